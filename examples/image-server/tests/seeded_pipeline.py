"""A stand-in for Flux2KleinPipeline: same call signature, draws a deterministic image from its seed.

The picture depends on the seed, prompt, steps, guidance and reference images, exactly the
inputs that make the real pipeline's output reproducible, so tests can compare bytes.
"""

import hashlib
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from PIL import Image, ImageDraw

from generation import LoadedModel


@dataclass
class PipelineOutput:
    images: List[Image.Image]


class SeedOnlyGenerator:
    """Stands in for torch.Generator where torch is not installed: keeps the seed and nothing else."""

    def __init__(self) -> None:
        self.seed = 0

    def manual_seed(self, seed: int) -> "SeedOnlyGenerator":
        self.seed = seed
        return self

    def initial_seed(self) -> int:
        return self.seed


def make_generator(seed: int) -> Any:
    try:
        import torch
    except ImportError:
        return SeedOnlyGenerator().manual_seed(seed)
    return torch.Generator("cpu").manual_seed(seed)


def image_digest(image: Image.Image) -> str:
    return hashlib.sha256(image.tobytes()).hexdigest()


class SeededPipeline:
    def __init__(self, delay_s: float = 0.0, gate: Optional[threading.Event] = None) -> None:
        self.delay_s = delay_s
        self.gate = gate
        self.calls: list = []
        self.active = 0
        self.most_active = 0
        self.counter = threading.Lock()

    def __call__(self, image=None, prompt=None, height=None, width=None, num_inference_steps=50, sigmas=None,
                 guidance_scale=4.0, num_images_per_prompt=1, generator=None, latents=None, prompt_embeds=None,
                 negative_prompt_embeds=None, output_type="pil", return_dict=True, attention_kwargs=None,
                 callback_on_step_end=None, callback_on_step_end_tensor_inputs=("latents",), max_sequence_length=512,
                 text_encoder_out_layers=(9, 18, 27)):
        references = [] if image is None else (image if isinstance(image, list) else [image])
        height = height or (references[0].height if references else 1024)
        width = width or (references[0].width if references else 1024)
        with self.counter:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.calls.append({"prompt": prompt, "width": width, "height": height, "references": len(references),
                               "num_inference_steps": num_inference_steps, "guidance_scale": guidance_scale,
                               "seed": generator.initial_seed()})
        try:
            if self.gate is not None:
                self.gate.wait(timeout=30)
            time.sleep(self.delay_s)
            drawn = draw(generator.initial_seed(), prompt, width, height, num_inference_steps, guidance_scale, references)
        finally:
            with self.counter:
                self.active -= 1
        return PipelineOutput([drawn]) if return_dict else ([drawn],)


def draw(seed: int, prompt: str, width: int, height: int, steps: int, guidance: float,
         references: List[Image.Image]) -> Image.Image:
    digests = ",".join(image_digest(reference) for reference in references)
    rng = random.Random(f"{seed}|{prompt}|{steps}|{guidance}|{digests}")

    def colour() -> tuple:
        return tuple(rng.randrange(256) for _ in range(3))

    top, bottom = colour(), colour()
    gradient = Image.linear_gradient("L").resize((width, height))
    canvas = Image.composite(Image.new("RGB", (width, height), bottom), Image.new("RGB", (width, height), top), gradient)
    pen = ImageDraw.Draw(canvas)
    for _ in range(8):
        x0, y0 = rng.randrange(width), rng.randrange(height)
        x1, y1 = x0 + rng.randrange(width // 8, width // 2), y0 + rng.randrange(height // 8, height // 2)
        shape = pen.ellipse if rng.random() < 0.5 else pen.rectangle
        shape((x0, y0, x1, y1), fill=colour())
    side = max(16, min(width, height) // 4)
    for index, reference in enumerate(references):
        canvas.paste(reference.resize((side, side)), (index * side % width, height - side))
    return canvas


def seeded_loader(pipeline: SeededPipeline, before_ready: Optional[Callable[[], None]] = None):
    """A loader for create_app that reports a phase, optionally waits, and hands out the pipeline."""

    def load(_settings, report) -> LoadedModel:
        report("loading the seeded test pipeline")
        if before_ready is not None:
            before_ready()
        return LoadedModel(pipeline=pipeline, make_generator=make_generator)

    return load
