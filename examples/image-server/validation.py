"""Turns a POST /generate body into a GenerateRequest, or a ClientError that names the bad field."""

import base64
import binascii
import io
import json
from dataclasses import dataclass
from typing import Any, Optional

from PIL import Image, UnidentifiedImageError

from variants import Variant

DEFAULT_SIZE = 1024
SIZE_MULTIPLE = 16
MIN_SIDE = 64
MAX_SIDE = 4096
MAX_PIXELS = 2048 * 2048
MAX_PROMPT_CHARS = 10_000
STEPS_RANGE = (1, 100)
GUIDANCE_RANGE = (1.0, 10.0)
SEED_RANGE = (0, 2**32 - 1)
MIN_REFERENCE_SIDE = 64
MAX_REFERENCE_PIXELS = 4096 * 4096
REFERENCE_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
FIELDS = ("prompt", "width", "height", "num_inference_steps", "guidance_scale", "seed", "images")


class ClientError(Exception):
    """A request the server refuses; status, code and field go to the client in the error body."""

    def __init__(self, status: int, code: str, message: str, field: Optional[str] = None,
                 headers: Optional[dict] = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}


def invalid(field: str, message: str) -> ClientError:
    return ClientError(400, "invalid_field", message, field)


@dataclass(frozen=True)
class GenerateRequest:
    prompt: str
    width: int
    height: int
    num_inference_steps: int
    guidance_scale: float
    seed: Optional[int]
    images: tuple


def parse_json_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ClientError(400, "invalid_json", f"the body is not valid JSON: {error}", "body") from None


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_prompt(body: dict) -> str:
    prompt = body.get("prompt")
    if prompt is None:
        raise invalid("prompt", "prompt is required")
    if not isinstance(prompt, str):
        raise invalid("prompt", "prompt must be a string")
    if not prompt.strip():
        raise invalid("prompt", "prompt must not be empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise invalid("prompt", f"prompt is {len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}")
    return prompt


def read_side(body: dict, field: str) -> int:
    value = body.get(field, DEFAULT_SIZE)
    if not is_integer(value):
        raise invalid(field, f"{field} must be an integer number of pixels")
    if value < MIN_SIDE or value > MAX_SIDE:
        raise invalid(field, f"{field} must be between {MIN_SIDE} and {MAX_SIDE}, got {value}")
    if value % SIZE_MULTIPLE:
        raise invalid(field, f"{field} must be a multiple of {SIZE_MULTIPLE}, got {value}")
    return value


def read_steps(body: dict, variant: Variant) -> int:
    value = body.get("num_inference_steps", variant.steps)
    if not is_integer(value):
        raise invalid("num_inference_steps", "num_inference_steps must be an integer")
    if not variant.tunable and value != variant.steps:
        raise invalid("num_inference_steps",
                      f"the {variant.label} variant runs exactly {variant.steps} steps; "
                      "start the server with --variant base to tune them")
    low, high = STEPS_RANGE
    if value < low or value > high:
        raise invalid("num_inference_steps", f"num_inference_steps must be between {low} and {high}, got {value}")
    return value


def read_guidance(body: dict, variant: Variant) -> float:
    value = body.get("guidance_scale", variant.guidance)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid("guidance_scale", "guidance_scale must be a number")
    value = float(value)
    if not variant.tunable and value != variant.guidance:
        raise invalid("guidance_scale",
                      f"the {variant.label} variant runs at guidance {variant.guidance}; "
                      "start the server with --variant base to tune it")
    low, high = GUIDANCE_RANGE
    if not low <= value <= high:
        raise invalid("guidance_scale", f"guidance_scale must be between {low} and {high}, got {value}")
    return value


def read_seed(body: dict) -> Optional[int]:
    value = body.get("seed")
    if value is None:
        return None
    low, high = SEED_RANGE
    if not is_integer(value) or not low <= value <= high:
        raise invalid("seed", f"seed must be an integer between {low} and {high}")
    return value


def decode_reference(text: Any, field: str) -> Image.Image:
    if not isinstance(text, str):
        raise invalid(field, "each reference image must be a base64 string or a data URL")
    payload = text
    declared = None
    if text.startswith("data:"):
        header, comma, payload = text.partition(",")
        if not comma or not header.endswith(";base64"):
            raise invalid(field, "a data URL must look like data:image/png;base64,...")
        declared = header[len("data:"):-len(";base64")]
        if declared not in REFERENCE_FORMATS.values():
            raise invalid(field, f"{declared or 'no media type'} is not accepted; send PNG, JPEG or WebP")
    try:
        raw = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError):
        raise invalid(field, "not valid base64") from None
    try:
        with Image.open(io.BytesIO(raw)) as opened:
            image_format = opened.format
            width, height = opened.size
            if image_format not in REFERENCE_FORMATS:
                raise invalid(field, f"{image_format} images are not accepted; send PNG, JPEG or WebP")
            if declared and REFERENCE_FORMATS[image_format] != declared:
                raise invalid(field, f"the data URL says {declared} but the bytes are {image_format}")
            if width < MIN_REFERENCE_SIDE or height < MIN_REFERENCE_SIDE:
                raise invalid(field, f"the image is {width}x{height}; each side must be at least {MIN_REFERENCE_SIDE} px")
            if width * height > MAX_REFERENCE_PIXELS:
                raise invalid(field, f"the image is {width}x{height}; at most {MAX_REFERENCE_PIXELS} pixels")
            return opened.convert("RGB")
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError):
        raise invalid(field, "not a readable PNG, JPEG or WebP image") from None


def read_images(body: dict, max_images: int) -> tuple:
    value = body.get("images")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid("images", "images must be a list of base64 strings or data URLs")
    if len(value) > max_images:
        raise invalid("images", f"{len(value)} reference images sent; this server accepts at most {max_images}")
    return tuple(decode_reference(item, f"images[{index}]") for index, item in enumerate(value))


def parse_generate_request(body: Any, variant: Variant, max_reference_images: int) -> GenerateRequest:
    if not isinstance(body, dict):
        raise ClientError(400, "invalid_json", "the body must be a JSON object", "body")
    for field in body:
        if field not in FIELDS:
            raise invalid(field, f"unknown field {field!r}; accepted fields are {', '.join(FIELDS)}")
    prompt = read_prompt(body)
    width = read_side(body, "width")
    height = read_side(body, "height")
    if width * height > MAX_PIXELS:
        raise invalid("width", f"{width}x{height} is {width * height} pixels; the limit is {MAX_PIXELS} (2048x2048)")
    return GenerateRequest(
        prompt=prompt,
        width=width,
        height=height,
        num_inference_steps=read_steps(body, variant),
        guidance_scale=read_guidance(body, variant),
        seed=read_seed(body),
        images=read_images(body, max_reference_images),
    )
