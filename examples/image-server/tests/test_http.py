"""POST /generate, GET /health and GET /info over real HTTP, around the seeded test pipeline."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from images import data_url, decode_png
from live_server import serving, wait_until_ready
from seeded_pipeline import SeededPipeline, seeded_loader
from settings import Settings
from variants import find_variant
from webapp import create_app

DISTILLED = find_variant("4b", "distilled")
BASE = find_variant("4b", "base")


def settings(**overrides) -> Settings:
    return Settings(variant=overrides.pop("variant", DISTILLED), **overrides)


@pytest.fixture(scope="module")
def shared_pipeline():
    return SeededPipeline()


@pytest.fixture(scope="module")
def shared_server(shared_pipeline):
    with serving(create_app(seeded_loader(shared_pipeline), settings(max_body_bytes=256 * 1024))) as base_url:
        assert wait_until_ready(base_url)["status"] == "ready"
        yield base_url


@pytest.fixture
def pipeline(shared_pipeline):
    shared_pipeline.calls.clear()
    return shared_pipeline


@pytest.fixture
def server(shared_server, pipeline):
    return shared_server


def generate(base_url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base_url}/generate", json=body, timeout=30)


def assert_error(response: httpx.Response, status: int, code: str, field) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"code", "field", "message"}
    assert (error["code"], error["field"]) == (code, field)
    return error["message"]


def test_generate_answers_a_png_of_the_requested_size_with_seed_and_time(server):
    response = generate(server, {"prompt": "a red fox in snow", "width": 320, "height": 192, "seed": 42})
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert decode_png(response.content).size == (320, 192)
    assert response.headers["x-seed"] == "42"
    assert float(response.headers["x-generation-time"]) >= 0


def test_same_seed_prompt_and_parameters_give_the_same_image(server):
    body = {"prompt": "a lighthouse", "width": 256, "height": 256, "seed": 7}
    first, second = generate(server, body), generate(server, body)
    assert first.content == second.content
    assert generate(server, {**body, "seed": 8}).content != first.content
    assert generate(server, {**body, "prompt": "a windmill"}).content != first.content


def test_a_random_seed_is_drawn_when_absent_and_reproduces_the_image(server):
    body = {"prompt": "a lighthouse", "width": 128, "height": 128}
    first, second = generate(server, body), generate(server, body)
    assert first.headers["x-seed"] != second.headers["x-seed"]
    assert first.content != second.content
    again = generate(server, {**body, "seed": int(first.headers["x-seed"])})
    assert again.content == first.content


def test_absent_fields_take_the_variant_defaults(server, pipeline):
    response = generate(server, {"prompt": "a cat"})
    assert decode_png(response.content).size == (1024, 1024)
    call = pipeline.calls[-1]
    assert (call["width"], call["height"], call["num_inference_steps"], call["guidance_scale"]) == (1024, 1024, 4, 1.0)
    assert call["prompt"] == "a cat"


def test_the_prompt_reaches_the_pipeline_exactly_as_given(server, pipeline):
    prompt = "  two spaces, then ünïcode and \"quotes\"\n"
    generate(server, {"prompt": prompt, "width": 64, "height": 64})
    assert pipeline.calls[-1]["prompt"] == prompt


def test_reference_images_reach_the_pipeline_and_change_the_result(server, pipeline):
    body = {"prompt": "put them together", "width": 256, "height": 256, "seed": 3}
    alone = generate(server, body)
    composed = generate(server, {**body, "images": [data_url((255, 0, 0)), data_url((0, 0, 255), image_format="JPEG")]})
    assert composed.status_code == 200
    assert pipeline.calls[-1]["references"] == 2
    assert composed.content != alone.content


def test_more_reference_images_than_allowed_are_refused(server):
    message = assert_error(generate(server, {"prompt": "x", "images": [data_url()] * 5}), 400, "invalid_field", "images")
    assert "at most 4" in message


@pytest.mark.parametrize("body, field", [
    ({}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": "x", "width": 1000}, "width"),
    ({"prompt": "x", "height": 48}, "height"),
    ({"prompt": "x", "width": 2048, "height": 2064}, "width"),
    ({"prompt": "x", "seed": -1}, "seed"),
    ({"prompt": "x", "num_inference_steps": 8}, "num_inference_steps"),
    ({"prompt": "x", "guidance_scale": 3.5}, "guidance_scale"),
    ({"prompt": "x", "images": ["not base64!"]}, "images[0]"),
    ({"prompt": "x", "steps": 4}, "steps"),
])
def test_each_client_mistake_is_a_400_naming_the_field(server, pipeline, body, field):
    assert_error(generate(server, body), 400, "invalid_field", field)
    assert pipeline.calls == []


def test_a_body_that_is_not_json_is_a_400(server):
    response = httpx.post(f"{server}/generate", content=b"{prompt", headers={"Content-Type": "application/json"})
    assert_error(response, 400, "invalid_json", "body")
    assert_error(generate(server, ["a list"]), 400, "invalid_json", "body")


def test_a_body_that_is_not_declared_json_is_a_415(server):
    response = httpx.post(f"{server}/generate", data={"prompt": "x"})
    assert_error(response, 415, "unsupported_media_type", None)


def test_a_body_over_the_limit_is_a_413(server):
    oversized = {"prompt": "x" * (300 * 1024)}
    assert_error(generate(server, oversized), 413, "body_too_large", "body")

    def chunks():
        for _ in range(40):
            yield b" " * 8192

    streamed = httpx.post(f"{server}/generate", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.headers.get("content-length") != "0"
    assert_error(streamed, 413, "body_too_large", "body")


def test_the_base_variant_takes_steps_and_guidance_within_bounds():
    pipeline = SeededPipeline()
    with serving(create_app(seeded_loader(pipeline), settings(variant=BASE))) as base_url:
        wait_until_ready(base_url)
        response = generate(base_url, {"prompt": "x", "width": 64, "height": 64})
        assert response.status_code == 200
        assert (pipeline.calls[-1]["num_inference_steps"], pipeline.calls[-1]["guidance_scale"]) == (50, 4.0)
        generate(base_url, {"prompt": "x", "width": 64, "height": 64, "num_inference_steps": 28, "guidance_scale": 3.5})
        assert (pipeline.calls[-1]["num_inference_steps"], pipeline.calls[-1]["guidance_scale"]) == (28, 3.5)
        assert_error(generate(base_url, {"prompt": "x", "num_inference_steps": 101}), 400, "invalid_field", "num_inference_steps")
        assert_error(generate(base_url, {"prompt": "x", "guidance_scale": 0.5}), 400, "invalid_field", "guidance_scale")
        assert httpx.get(f"{base_url}/info").json()["limits"]["num_inference_steps"] == [1, 100]


def test_while_loading_generate_is_a_503_with_retry_after_and_health_says_loading():
    release = threading.Event()
    app = create_app(seeded_loader(SeededPipeline(), before_ready=lambda: release.wait(10)), settings())
    with serving(app) as base_url:
        health = httpx.get(f"{base_url}/health")
        assert health.status_code == 503
        assert health.json()["status"] == "loading"
        assert health.json()["phase"] == "loading the seeded test pipeline"
        message = assert_error(generate(base_url, {"prompt": "x"}), 503, "loading", None)
        assert "loading the seeded test pipeline" in message
        assert int(generate(base_url, {"prompt": "x"}).headers["retry-after"]) > 0
        assert httpx.get(f"{base_url}/info").json()["model"] == "4b"
        release.set()
        assert wait_until_ready(base_url)["status"] == "ready"
        assert httpx.get(f"{base_url}/health").status_code == 200
        assert generate(base_url, {"prompt": "x", "width": 64, "height": 64}).status_code == 200


def test_a_failed_load_is_reported_and_handed_to_the_caller():
    failures = []

    def broken_loader(_settings, report):
        report("downloading weights")
        raise OSError("disk full")

    with serving(create_app(broken_loader, settings(), on_load_failure=failures.append)) as base_url:
        health = wait_until_ready(base_url)
        assert health["status"] == "failed"
        assert "disk full" in health["error"]
        assert httpx.get(f"{base_url}/health").status_code == 500
        assert "disk full" in assert_error(generate(base_url, {"prompt": "x"}), 503, "load_failed", None)
    assert [str(error) for error in failures] == ["disk full"]


def test_a_full_queue_answers_429_and_queued_requests_still_complete():
    gate = threading.Event()
    pipeline = SeededPipeline(gate=gate)
    with serving(create_app(seeded_loader(pipeline), settings(queue_size=1))) as base_url:
        wait_until_ready(base_url)
        body = {"prompt": "x", "width": 64, "height": 64}
        with ThreadPoolExecutor(max_workers=2) as clients:
            running = clients.submit(generate, base_url, {**body, "seed": 1})
            wait_for_pending(base_url, 1)
            waiting = clients.submit(generate, base_url, {**body, "seed": 2})
            wait_for_pending(base_url, 2)
            refused = generate(base_url, {**body, "seed": 3})
            assert_error(refused, 429, "queue_full", None)
            assert int(refused.headers["retry-after"]) >= 1
            gate.set()
            assert running.result().status_code == 200
            assert waiting.result().status_code == 200
        assert [call["seed"] for call in pipeline.calls] == [1, 2]


def wait_for_pending(base_url: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while httpx.get(f"{base_url}/health").json()["pending"] < count:
        assert time.monotonic() < deadline, f"never saw {count} pending requests"
        time.sleep(0.01)


def test_concurrent_requests_run_one_at_a_time_and_each_gets_its_own_image():
    pipeline = SeededPipeline(delay_s=0.02)
    with serving(create_app(seeded_loader(pipeline), settings())) as base_url:
        wait_until_ready(base_url)
        bodies = [{"prompt": f"image {seed}", "width": 96, "height": 64, "seed": seed} for seed in range(8)]
        with ThreadPoolExecutor(max_workers=8) as clients:
            together = list(clients.map(lambda body: generate(base_url, body), bodies))
        alone = [generate(base_url, body) for body in bodies]
    assert pipeline.most_active == 1
    assert [response.status_code for response in together] == [200] * 8
    assert [response.content for response in together] == [response.content for response in alone]
    assert [response.headers["x-seed"] for response in together] == [str(seed) for seed in range(8)]


def test_a_pipeline_failure_is_a_500_with_the_error_shape():
    def failing_pipeline(**_kwargs):
        raise RuntimeError("CUDA error: device-side assert triggered")

    from generation import LoadedModel

    app = create_app(lambda _settings, _report: LoadedModel(failing_pipeline, lambda seed: seed), settings())
    with serving(app) as base_url:
        wait_until_ready(base_url)
        message = assert_error(generate(base_url, {"prompt": "x"}), 500, "generation_failed", None)
        assert "device-side assert" in message


def test_unknown_paths_and_methods_use_the_error_shape(server):
    assert_error(httpx.get(f"{server}/nothing-here"), 404, "not_found", None)
    assert_error(httpx.get(f"{server}/generate"), 405, "method_not_allowed", None)


def test_info_gives_model_variant_defaults_and_limits(server):
    info = httpx.get(f"{server}/info").json()
    assert (info["model"], info["variant"], info["hub_id"]) == ("4b", "distilled", "black-forest-labs/FLUX.2-klein-4B")
    assert info["defaults"] == {"width": 1024, "height": 1024, "num_inference_steps": 4, "guidance_scale": 1.0}
    assert info["tunable"] is False
    limits = info["limits"]
    assert (limits["size_multiple"], limits["min_side"], limits["max_pixels"]) == (16, 64, 2048 * 2048)
    assert (limits["max_reference_images"], limits["max_body_bytes"]) == (4, 256 * 1024)
