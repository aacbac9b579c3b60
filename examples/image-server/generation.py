"""The loaded pipeline, its loading state, and the one-at-a-time queue in front of it."""

import asyncio
import io
import logging
import math
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional

from validation import SEED_RANGE, ClientError, GenerateRequest

log = logging.getLogger("image-server")


@dataclass(frozen=True)
class LoadedModel:
    """pipeline is called like Flux2KleinPipeline.__call__; make_generator(seed) seeds its noise;
    optimisations name what was applied to it (torch.compile among them); embed_prompt, where set, gives
    a prompt's text embeddings (a PromptCache), which the pipeline then takes instead of encoding it."""
    pipeline: Callable[..., Any]
    make_generator: Callable[[int], Any]
    optimisations: tuple = ()
    embed_prompt: Optional[Callable[[str], Any]] = None


def draw_seed() -> int:
    return secrets.randbelow(SEED_RANGE[1] + 1)


def prompt_arguments(model: LoadedModel, request: GenerateRequest) -> dict:
    if model.embed_prompt is None:
        return {"prompt": request.prompt}
    guided = request.guidance_scale > 1 and not model.pipeline.config.is_distilled
    # With guidance the pipeline encodes the empty negative prompt on every call too.
    return {"prompt_embeds": model.embed_prompt(request.prompt),
            "negative_prompt_embeds": model.embed_prompt("") if guided else None}


def generate_image(model: LoadedModel, request: GenerateRequest, seed: int) -> Any:
    output = model.pipeline(
        **prompt_arguments(model, request),
        image=list(request.images) or None,
        height=request.height,
        width=request.width,
        num_inference_steps=request.num_inference_steps,
        guidance_scale=request.guidance_scale,
        generator=model.make_generator(seed),
    )
    return output.images[0]


def generate_png(model: LoadedModel, request: GenerateRequest, seed: int) -> bytes:
    buffer = io.BytesIO()
    # Level 1 encodes a 1024x1024 image in tens of milliseconds; the default level costs a large
    # share of a sub-second generation for a file only slightly smaller.
    generate_image(model, request, seed).save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()


class ModelState:
    """Loading, ready or failed; the phase says what loading is doing now."""

    def __init__(self) -> None:
        self.status = "loading"
        self.phase = "starting"
        self.error: Optional[str] = None
        self.model: Optional[LoadedModel] = None
        self.started = time.monotonic()
        self.ready_after: Optional[float] = None

    def report(self, phase: str) -> None:
        log.info(phase)
        self.phase = phase

    def mark_ready(self, model: LoadedModel) -> None:
        self.model = model
        self.ready_after = time.monotonic() - self.started
        self.phase = "ready"
        self.status = "ready"
        log.info("ready after %.1f s", self.ready_after)

    def mark_failed(self, error: BaseException) -> None:
        self.error = f"{type(error).__name__}: {error}"
        self.phase = "failed"
        self.status = "failed"
        log.error("loading failed: %s", self.error, exc_info=error)

    def snapshot(self) -> dict:
        described = {"status": self.status, "phase": self.phase,
                     "elapsed_s": round(time.monotonic() - self.started, 1)}
        if self.ready_after is not None:
            described["ready_after_s"] = round(self.ready_after, 1)
        if self.model is not None:
            described["optimisations"] = list(self.model.optimisations)
        if self.error:
            described["error"] = self.error
        return described


class GenerationQueue:
    """Runs jobs one at a time, in arrival order, on one worker thread that owns the GPU.

    Holds at most `waiting` jobs behind the running one; the next gets 429.
    """

    def __init__(self, waiting: int) -> None:
        self.capacity = waiting + 1
        self.pending = 0
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpu")
        self.turn = asyncio.Lock()
        self.last_seconds = 1.0

    def retry_after(self) -> int:
        return max(1, math.ceil(self.last_seconds * self.pending))

    async def run(self, job: Callable[[], Any]) -> Any:
        if self.pending >= self.capacity:
            raise ClientError(429, "queue_full",
                              f"{self.pending} requests are already queued or running; retry later",
                              headers={"Retry-After": str(self.retry_after())})
        self.pending += 1
        try:
            async with self.turn:
                started = time.monotonic()
                result = await asyncio.get_running_loop().run_in_executor(self.executor, job)
                self.last_seconds = time.monotonic() - started
                return result
        finally:
            self.pending -= 1

    async def run_exclusive(self, job: Callable[[], Any]) -> Any:
        """Runs a job on the GPU thread without counting it against the request capacity."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, job)

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
