# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "diffusers==0.37.0",
#     "transformers==4.57.6",
#     "accelerate==1.12.0",
#     "torch==2.10.0",
#     "huggingface-hub==0.36.2",
#     "starlette==0.52.1",
#     "uvicorn==0.40.0",
#     "pillow==12.1.1",
#     "setuptools==80.9.0",
# ]
# ///
"""Seconds per image for each FLUX.2 [klein] variant, baseline and optimised, beside the reference.

    uv run bench.py [--variants 4b-distilled,9b-distilled] [--runs 3] [--size 1024x1024]
    uv run bench.py --random-weights [--variants ...]     # no weights, no hub: the architecture alone

Needs a CUDA GPU and the weights (HF_TOKEN for the 9B ones), or --random-weights, which builds the
published architectures (configs/) with random bf16 weights instead. Each variant is loaded once and
timed as the plain pipeline, then after each step of the optimised path that server.py takes, in its
order: the compile step is followed by the server's own warm-up, which is timed too. Last, the same
seed's image is compared with the baseline's, and --concurrency serves the optimised pipeline through
the server's HTTP app and times concurrent requests.
"""

import argparse
import gc
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from generation import LoadedModel, generate_image
from loading import (HubAccessError, apply_plan, check_hub_access, generator_factory, load_pipeline, plan_pipeline,
                     plan_steps, warm_up)
from prompt_cache import pipeline_prompt_cache
from random_pipeline import build_pipeline
from settings import ATTENTION_BACKENDS, DEFAULT_WARMUP_SIZES, Settings, bounded_int, parse_size, parse_sizes
from validation import GenerateRequest
from variants import VARIANTS, Variant

# Seconds per 1024x1024 image at 4 steps on one A100: (baseline, optimised).
REFERENCE_A100_S = {("4b", "distilled"): (1.22, 0.90), ("9b", "distilled"): (2.24, 1.79)}
PROMPT = "a lighthouse on a rocky coast at dusk, photograph"
SEED = 7
RANDOM_WEIGHTS_NOTE = ("Weights: random bf16, built from the published configurations in configs/. The values of the "
                       "weights do not change the speed: the shapes, the kernels and the work per image are those of "
                       "the real checkpoints, so these seconds are theirs (the images are noise).")
TINY_NOTE = ("Weights: random, in the tiny configuration (configs/tiny): these seconds check the benchmark's "
             "code, they say nothing about the real models.")


@dataclass(frozen=True)
class Concurrency:
    alone_s: float
    latencies_s: tuple
    wall_s: float

    @property
    def images_per_s(self) -> float:
        return len(self.latencies_s) / self.wall_s


@dataclass(frozen=True)
class Row:
    variant: Variant
    steps: tuple = ()           # (what was applied, seconds per image), the baseline first
    warmup_s: Optional[float] = None
    peak_gib: Optional[float] = None
    pixel_difference: Optional[tuple] = None   # (largest, mean) of |optimised - baseline|, 0..255
    batch_of_two_s: Optional[float] = None
    concurrency: Optional[Concurrency] = None
    note: str = ""

    @property
    def baseline_s(self) -> Optional[float]:
        return self.steps[0][1] if self.steps else None

    @property
    def optimised_s(self) -> Optional[float]:
        timed = [seconds for name, seconds in self.steps if name != CACHE_STEP]
        return timed[-1] if timed else None


CACHE_STEP = "prompt embedding cache (the same prompt again)"


def parse_variants(text: str) -> list:
    chosen = []
    for name in text.split(","):
        model, _, kind = name.strip().partition("-")
        if (model, kind) not in VARIANTS:
            known = ", ".join(f"{m}-{k}" for m, k in VARIANTS)
            raise argparse.ArgumentTypeError(f"unknown variant {name!r}; known: {known}")
        chosen.append(VARIANTS[(model, kind)])
    return chosen


def seconds(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(rows: Sequence[Row], width: int, height: int, device_name: str) -> str:
    lines = [f"FLUX.2 [klein], {width}x{height}, seconds per image (median) on {device_name}", ""]
    header = (f"{'variant':<14} {'steps':>5} {'baseline':>9} {'optimised':>10} {'speed-up':>9} {'warm-up':>8} "
              f"{'peak GiB':>9}   reference A100 (baseline / optimised)")
    lines += [header, "-" * len(header)]
    for row in rows:
        reference = REFERENCE_A100_S.get((row.variant.model, row.variant.kind))
        speed_up = (f"{row.baseline_s / row.optimised_s:.2f}x"
                    if row.baseline_s is not None and row.optimised_s else "-")
        peak = "-" if row.peak_gib is None else f"{row.peak_gib:.1f}"
        lines.append(f"{row.variant.label:<14} {row.variant.steps:>5} {seconds(row.baseline_s):>9} "
                     f"{seconds(row.optimised_s):>10} {speed_up:>9} {seconds(row.warmup_s):>8} {peak:>9}   "
                     + (f"{reference[0]:.2f} / {reference[1]:.2f}" if reference else "-")
                     + (f"   {row.note}" if row.note else ""))
    for row in rows:
        lines += format_details(row)
    return "\n".join(lines)


def format_details(row: Row) -> list:
    if not row.steps:
        return []
    lines = ["", f"{row.variant.label}: each step of the optimised path, in the order the server applies them",
             f"  {'step':<52} {'s/image':>8} {'vs previous':>12}"]
    previous = None
    for name, value in row.steps:
        change = "-" if previous is None else f"{(value - previous) / previous * 100:+.0f}%"
        lines.append(f"  {name:<52} {value:>8.3f} {change:>12}")
        previous = value
    if row.pixel_difference is not None:
        largest, mean = row.pixel_difference
        lines.append(f"  same seed, optimised against baseline: pixels differ by {mean:.2f} on average, "
                     f"{largest:.0f} at most (of 255)")
    if row.batch_of_two_s is not None and len(row.steps) > 1:
        eager = [value for name, value in row.steps if "torch.compile" not in name and name != CACHE_STEP][-1]
        lines.append(f"  two images in one batch (before compiling): {row.batch_of_two_s:.3f} s, "
                     f"{row.batch_of_two_s / 2:.3f} s each, against {eager:.3f} s for one alone")
    if row.concurrency is not None:
        timed = row.concurrency
        each = ", ".join(f"{latency:.2f}" for latency in timed.latencies_s)
        lines.append(f"  through the server: one request alone {timed.alone_s:.2f} s; {len(timed.latencies_s)} at once "
                     f"answered in {each} s; {timed.images_per_s:.2f} images/s against {1 / timed.alone_s:.2f} alone")
    return lines


def synchronizer(torch: Any, device: str):
    """Waits for the device's queued work, so that a timing covers it; the CPU has none queued."""
    return torch.cuda.synchronize if device == "cuda" else lambda: None


def timed_seconds(work: Callable[[], Any], synchronize: Callable[[], None]) -> float:
    synchronize()
    started = time.perf_counter()
    work()
    synchronize()
    return time.perf_counter() - started


def median_seconds(model: LoadedModel, request: GenerateRequest, runs: int, synchronize) -> float:
    return statistics.median(timed_seconds(lambda: generate_image(model, request, run), synchronize)
                             for run in range(runs))


def pixel_difference(baseline: Any, optimised: Any) -> tuple:
    import numpy

    difference = numpy.abs(numpy.asarray(baseline, dtype=numpy.int16) - numpy.asarray(optimised, dtype=numpy.int16))
    return float(difference.max()), float(difference.mean())


def batch_of_two_seconds(model: LoadedModel, request: GenerateRequest, runs: int, synchronize) -> float:
    def batch() -> Any:
        return model.pipeline(prompt=[request.prompt] * 2, height=request.height, width=request.width,
                              num_inference_steps=request.num_inference_steps,
                              guidance_scale=request.guidance_scale,
                              generator=[model.make_generator(0), model.make_generator(1)])

    batch()
    return statistics.median(timed_seconds(batch, synchronize) for _ in range(runs))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post_generate(port: int, prompt: str, seed: int, request: GenerateRequest) -> float:
    body = json.dumps({"prompt": prompt, "seed": seed, "width": request.width, "height": request.height}).encode()
    started = time.perf_counter()
    call = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                  headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(call, timeout=600) as answer:
        answer.read()
    return time.perf_counter() - started


def serve_concurrently(model: LoadedModel, settings: Settings, request: GenerateRequest, count: int) -> Concurrency:
    """The server's own app (its queue, PNG encoding and HTTP) around the loaded model, on a local port."""
    import uvicorn
    from webapp import create_app

    port = free_port()
    app = create_app(lambda _settings, _report: model, settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        # Other prompts than the timed steps', so that no request finds its embeddings cached.
        post_generate(port, "warm-up request", 0, request)
        alone = post_generate(port, "one request alone", 1, request)
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=count) as clients:
            latencies = list(clients.map(lambda index: post_generate(port, f"concurrent request {index}", index, request),
                                         range(count)))
        return Concurrency(alone, tuple(sorted(latencies)), time.perf_counter() - started)
    finally:
        server.should_exit = True
        thread.join()


def load_variant(variant: Variant, args: argparse.Namespace, device: str, torch: Any) -> Any:
    if args.random_weights:
        size = "tiny" if args.tiny else variant.model
        print(f"{variant.label}: building the {size} architecture with random bf16 weights", file=sys.stderr, flush=True)
        return build_pipeline(size, variant.kind == "distilled", torch, torch.bfloat16, device)
    print(f"{variant.label}: loading {variant.hub_id}", file=sys.stderr, flush=True)
    return load_pipeline(variant.hub_id, device, torch)


def progress(variant: Variant) -> Callable[[str], None]:
    return lambda message: print(f"{variant.label}: {message}", file=sys.stderr, flush=True)


def bench_variant(variant: Variant, args: argparse.Namespace, device: str, torch: Any) -> Row:
    if not args.random_weights:
        try:
            check_hub_access(variant, os.environ)
        except HubAccessError as error:
            return Row(variant, note=f"skipped: {error}")
    width, height = args.size
    request = GenerateRequest(PROMPT, width, height, variant.steps, variant.guidance, 0, ())
    settings = Settings(variant=variant, warmup_sizes=args.warmup_sizes)
    synchronize = synchronizer(torch, device)
    report = progress(variant)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    pipeline = load_variant(variant, args, device, torch)
    model = LoadedModel(pipeline=pipeline, make_generator=generator_factory(torch, device))
    row = Row(variant)
    try:
        generate_image(model, request, 0)
        baseline_image = generate_image(model, request, SEED)
        steps = [("baseline", median_seconds(model, request, args.runs, synchronize))]
        report(f"baseline: {steps[-1][1]:.3f} s per image")
        plan = plan_pipeline(pipeline, device, args.compile, args.attention_backend, torch)
        for step in plan_steps(plan):
            if step.compiles:
                row = replace(row, batch_of_two_s=batch_of_two_seconds(model, request, args.runs, synchronize))
                report(f"two images in one batch: {row.batch_of_two_s:.3f} s")
            applied = apply_plan(pipeline, step, torch)
            report(f"applied {', '.join(applied)}")
            if step.compiles:
                warmup_s = timed_seconds(lambda: warm_up(model, settings, True, report), synchronize)
                row = replace(row, warmup_s=warmup_s)
                report(f"warm-up took {warmup_s:.1f} s")
            else:
                generate_image(model, request, 0)
            steps.append(("+ " + ", ".join(applied), median_seconds(model, request, args.runs, synchronize)))
            report(f"{steps[-1][0]}: {steps[-1][1]:.3f} s per image")
        model = replace(model, embed_prompt=pipeline_prompt_cache(pipeline))
        generate_image(model, request, 0)
        steps.append((CACHE_STEP, median_seconds(model, request, args.runs, synchronize)))
        row = replace(row, steps=tuple(steps),
                      pixel_difference=pixel_difference(baseline_image, generate_image(model, request, SEED)))
        if args.concurrency:
            row = replace(row, concurrency=serve_concurrently(model, settings, request, args.concurrency))
        if device == "cuda":
            row = replace(row, peak_gib=torch.cuda.max_memory_allocated() / 2**30)
        return row
    finally:
        del model, pipeline
        gc.collect()
        torch._dynamo.reset()
        if device == "cuda":
            torch.cuda.empty_cache()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=parse_variants, default=list(VARIANTS.values()),
                        help="comma-separated, e.g. 4b-distilled,9b-base (default: all four)")
    parser.add_argument("--runs", type=bounded_int(1), default=3, help="timed runs per measurement")
    parser.add_argument("--size", type=parse_size, default=(1024, 1024), help="WIDTHxHEIGHT")
    parser.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default="auto")
    parser.add_argument("--warmup-sizes", type=parse_sizes, default=parse_sizes(DEFAULT_WARMUP_SIZES),
                        help=f"the sizes of the server's warm-up after compiling (default: the server's, "
                             f"{DEFAULT_WARMUP_SIZES})")
    parser.add_argument("--concurrency", type=bounded_int(0), default=0,
                        help="serve the optimised pipeline through the server's HTTP app and time this many "
                             "requests sent at once (0: skip)")
    parser.add_argument("--random-weights", action="store_true",
                        help="build each variant's published architecture with random bf16 weights: no hub, "
                             "no download, the same seconds per image")
    parser.add_argument("--tiny", action="store_true",
                        help="with --random-weights: the tiny configuration, which runs on a CPU in seconds")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="the optimised path without torch.compile")
    args = parser.parse_args(argv)
    if args.tiny and not args.random_weights:
        parser.error("--tiny needs --random-weights")

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.tiny:
        print("bench.py needs a CUDA GPU (only --random-weights --tiny runs on a CPU)", file=sys.stderr)
        return 1
    rows = [bench_variant(variant, args, device, torch) for variant in args.variants]
    device_name = torch.cuda.get_device_name() if device == "cuda" else "the CPU"
    print(format_table(rows, *args.size, device_name))
    if args.random_weights:
        print("\n" + (TINY_NOTE if args.tiny else RANDOM_WEIGHTS_NOTE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
