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
published architectures (configs/) with random bf16 weights instead. Each variant is loaded once,
timed as the plain pipeline, then optimised exactly as server.py does and timed again.
"""

import argparse
import gc
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from generation import LoadedModel, generate_image
from loading import HubAccessError, check_hub_access, generator_factory, load_pipeline, optimise_pipeline
from random_pipeline import build_pipeline
from settings import ATTENTION_BACKENDS, bounded_int, parse_size
from validation import GenerateRequest
from variants import VARIANTS, Variant

# Seconds per 1024x1024 image at 4 steps on one A100: (baseline, optimised).
REFERENCE_A100_S = {("4b", "distilled"): (1.22, 0.90), ("9b", "distilled"): (2.24, 1.79)}
PROMPT = "a lighthouse on a rocky coast at dusk, photograph"
COMPILE_WARMUP_RUNS = 3
RANDOM_WEIGHTS_NOTE = ("Weights: random bf16, built from the published configurations in configs/. The values of the "
                       "weights do not change the speed: the shapes, the kernels and the work per image are those of "
                       "the real checkpoints, so these seconds are theirs (the images are noise).")
TINY_NOTE = ("Weights: random, in the tiny configuration (configs/tiny): these seconds check the benchmark's "
             "code, they say nothing about the real models.")


@dataclass(frozen=True)
class Row:
    variant: Variant
    baseline_s: Optional[float] = None
    optimised_s: Optional[float] = None
    note: str = ""


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
    header = f"{'variant':<14} {'steps':>5} {'baseline':>9} {'optimised':>10} {'speed-up':>9}   reference A100 (baseline / optimised)"
    lines += [header, "-" * len(header)]
    for row in rows:
        reference = REFERENCE_A100_S.get((row.variant.model, row.variant.kind))
        speed_up = (f"{row.baseline_s / row.optimised_s:.2f}x"
                    if row.baseline_s is not None and row.optimised_s else "-")
        lines.append(f"{row.variant.label:<14} {row.variant.steps:>5} {seconds(row.baseline_s):>9} "
                     f"{seconds(row.optimised_s):>10} {speed_up:>9}   "
                     + (f"{reference[0]:.2f} / {reference[1]:.2f}" if reference else "-")
                     + (f"   {row.note}" if row.note else ""))
    return "\n".join(lines)


def synchronizer(torch: Any, device: str):
    """Waits for the device's queued work, so that a timing covers it; the CPU has none queued."""
    return torch.cuda.synchronize if device == "cuda" else lambda: None


def median_seconds(model: LoadedModel, request: GenerateRequest, runs: int, synchronize) -> float:
    timings = []
    for run in range(runs):
        synchronize()
        started = time.perf_counter()
        generate_image(model, request, run)
        synchronize()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def load_variant(variant: Variant, args: argparse.Namespace, device: str, torch: Any) -> Any:
    if args.random_weights:
        size = "tiny" if args.tiny else variant.model
        print(f"{variant.label}: building the {size} architecture with random bf16 weights", file=sys.stderr, flush=True)
        return build_pipeline(size, variant.kind == "distilled", torch, torch.bfloat16, device)
    print(f"{variant.label}: loading {variant.hub_id}", file=sys.stderr, flush=True)
    return load_pipeline(variant.hub_id, device, torch)


def bench_variant(variant: Variant, args: argparse.Namespace, device: str, torch: Any) -> Row:
    if not args.random_weights:
        try:
            check_hub_access(variant, os.environ)
        except HubAccessError as error:
            return Row(variant, note=f"skipped: {error}")
    width, height = args.size
    request = GenerateRequest(PROMPT, width, height, variant.steps, variant.guidance, 0, ())
    synchronize = synchronizer(torch, device)
    pipeline = load_variant(variant, args, device, torch)
    model = LoadedModel(pipeline=pipeline, make_generator=generator_factory(torch, device))
    try:
        generate_image(model, request, 0)
        baseline = median_seconds(model, request, args.runs, synchronize)
        plan, applied = optimise_pipeline(pipeline, device, args.compile, args.attention_backend, torch)
        compiling = "; compiling (minutes)" if plan.compiles else ""
        print(f"{variant.label}: {', '.join(applied) or 'nothing to apply'}{compiling}", file=sys.stderr, flush=True)
        for run in range(COMPILE_WARMUP_RUNS):
            generate_image(model, request, run)
        optimised = median_seconds(model, request, args.runs, synchronize)
        return Row(variant, baseline, optimised)
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
