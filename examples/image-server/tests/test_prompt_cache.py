"""The prompt embedding cache: a repeated prompt skips the text encoder and gives the same image."""

import json

from prompt_cache import PromptCache
from real_server import run_in_venv


def test_the_cache_encodes_each_prompt_once_and_forgets_the_least_recently_used():
    encoded = []
    cache = PromptCache(lambda prompt: encoded.append(prompt) or f"embeddings of {prompt}", capacity=2)
    assert cache("fox") == "embeddings of fox"
    assert cache("owl") == "embeddings of owl"
    assert cache("fox") == "embeddings of fox"
    cache("cat")            # owl is the least recently used and goes
    cache("fox")
    cache("owl")
    assert encoded == ["fox", "owl", "cat", "owl"]


CACHED_AGAINST_PLAIN = """
import json, torch
from generation import LoadedModel, generate_image
from prompt_cache import pipeline_prompt_cache
from random_pipeline import build_pipeline
from validation import GenerateRequest

def run(distilled, guidance):
    pipeline = build_pipeline("tiny", distilled, torch, torch.float32)
    calls = []
    pipeline.text_encoder.register_forward_hook(lambda *_: calls.append(1))
    plain = LoadedModel(pipeline=pipeline, make_generator=lambda seed: torch.Generator("cpu").manual_seed(seed))
    cached = LoadedModel(pipeline=pipeline, make_generator=plain.make_generator,
                         embed_prompt=pipeline_prompt_cache(pipeline))
    request = GenerateRequest("a red fox in fresh snow", 64, 64, 2, guidance, 3, ())
    expected = generate_image(plain, request, 3).tobytes()
    plain_calls = len(calls)
    first, again = (generate_image(cached, request, 3).tobytes() for _ in range(2))
    other = generate_image(cached, GenerateRequest("an owl", 64, 64, 2, guidance, 3, ()), 3).tobytes()
    return {"same": first == expected and again == expected, "other_differs": other != expected,
            "plain_calls": plain_calls, "cached_calls": len(calls) - plain_calls}

print(json.dumps({"distilled": run(True, 1.0), "base": run(False, 4.0)}))
"""


def test_a_repeated_prompt_skips_the_text_encoder_and_gives_the_same_image_as_without_the_cache():
    """On the real pipeline (tiny, random weights): byte for byte the image of the plain call, with and without
    guidance (which encodes the empty negative prompt too)."""
    finished = run_in_venv(["-c", CACHED_AGAINST_PLAIN])
    assert finished.returncode == 0, finished.stderr
    results = json.loads(finished.stdout.strip().splitlines()[-1])
    # The plain pipeline encodes the prompt on every call (and the negative prompt with guidance); the cache
    # encodes each prompt once: the fox, then the owl (and the empty negative prompt once with guidance).
    assert results["distilled"] == {"same": True, "other_differs": True, "plain_calls": 1, "cached_calls": 2}
    assert results["base"] == {"same": True, "other_differs": True, "plain_calls": 2, "cached_calls": 3}
