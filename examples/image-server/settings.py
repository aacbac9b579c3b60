"""Command-line flags shared by server.py, ui.py and bench.py, turned into one Settings value."""

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from validation import MAX_PIXELS, MAX_SIDE, MIN_SIDE, SIZE_MULTIPLE
from variants import KINDS, MODELS, Variant, find_variant

ATTENTION_BACKENDS = ("auto", "native", "_native_flash", "flash", "_flash_3", "_flash_3_hub")
DEFAULT_WARMUP_SIZES = "1024x1024,768x1344"
MIB = 1024 * 1024


def parse_size(text: str) -> tuple:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 1024x1024") from None
    if not all(MIN_SIDE <= side <= MAX_SIDE and side % SIZE_MULTIPLE == 0 for side in (width, height)):
        raise argparse.ArgumentTypeError(
            f"{text!r}: each side must be a multiple of {SIZE_MULTIPLE} between {MIN_SIDE} and {MAX_SIDE}")
    if width * height > MAX_PIXELS:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {MAX_PIXELS} pixels")
    return width, height


def parse_model_dir(text: str) -> Path:
    folder = Path(text).expanduser().resolve()
    if not (folder / "model_index.json").is_file():
        raise argparse.ArgumentTypeError(
            f"{text!r} has no model_index.json: give a folder that Flux2KleinPipeline.save_pretrained wrote, "
            "or a downloaded snapshot of a FLUX.2 [klein] repository")
    return folder


def parse_sizes(text: str) -> tuple:
    sizes = tuple(parse_size(part) for part in text.split(",") if part.strip())
    if not sizes:
        raise argparse.ArgumentTypeError("give at least one size, e.g. 1024x1024")
    return sizes


@dataclass(frozen=True)
class Settings:
    variant: Variant
    host: str = "0.0.0.0"
    port: int = 6006
    max_reference_images: int = 4
    queue_size: int = 16
    max_body_bytes: int = 64 * MIB
    compile: bool = True
    attention_backend: str = "auto"
    warmup_sizes: tuple = parse_sizes(DEFAULT_WARMUP_SIZES)
    model_dir: Optional[Path] = None

    @property
    def source(self) -> str:
        """Where the weights come from: the local folder, else the variant's hub repository."""
        return str(self.model_dir) if self.model_dir else self.variant.hub_id


def bounded_int(low: int, high: Optional[int] = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            limit = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be {limit}")
        return value
    return parse


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", choices=MODELS, default="4b",
                        help="4b (Apache 2.0, about 13 GB of GPU memory) or 9b (gated, about 29 GB)")
    parser.add_argument("--variant", choices=KINDS, default="distilled",
                        help="distilled: 4 steps, fixed guidance; base: 50 steps, tunable")
    parser.add_argument("--model-dir", type=parse_model_dir, default=None,
                        help="load the pipeline from this local folder (save_pretrained output or a downloaded "
                             "snapshot) instead of the hub; --model and --variant still set the defaults")
    parser.add_argument("--host", default=Settings.host)
    parser.add_argument("--port", type=bounded_int(1, 65535), default=Settings.port)
    parser.add_argument("--max-reference-images", type=bounded_int(0), default=Settings.max_reference_images,
                        help="reference images per request; raise it where GPU memory allows")
    parser.add_argument("--queue-size", type=bounded_int(0), default=Settings.queue_size,
                        help="requests that may wait behind the one being generated; more get 429")
    parser.add_argument("--max-body-mb", type=bounded_int(1), default=Settings.max_body_bytes // MIB,
                        help="largest request body in MiB; larger ones get 413")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="skip torch.compile: starts in seconds instead of minutes, generates slower")
    parser.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default=Settings.attention_backend,
                        help="diffusers attention backend; auto picks the fastest flash kernel installed")
    parser.add_argument("--warmup-sizes", type=parse_sizes, default=Settings.warmup_sizes,
                        help="WIDTHxHEIGHT list generated at start; two or more sizes make the compiled "
                             "graphs shape-generic, so a new size later does not recompile")
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(
        variant=find_variant(args.model, args.variant),
        host=args.host,
        port=args.port,
        max_reference_images=args.max_reference_images,
        queue_size=args.queue_size,
        max_body_bytes=args.max_body_mb * MIB,
        compile=args.compile,
        attention_backend=args.attention_backend,
        warmup_sizes=args.warmup_sizes,
        model_dir=args.model_dir,
    )


def parse_settings(argv: Optional[Sequence[str]], description: str) -> Settings:
    return settings_from_args(build_parser(description).parse_args(argv))
