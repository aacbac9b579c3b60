"""Small encoded images for requests."""

import base64
import io

from PIL import Image


def encoded(colour: tuple = (200, 40, 40), size: tuple = (96, 80), image_format: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format=image_format)
    return buffer.getvalue()


def data_url(colour: tuple = (200, 40, 40), size: tuple = (96, 80), image_format: str = "PNG") -> str:
    media_type = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}[image_format]
    return f"data:{media_type};base64," + base64.b64encode(encoded(colour, size, image_format)).decode()


def plain_base64(colour: tuple = (200, 40, 40), size: tuple = (96, 80), image_format: str = "PNG") -> str:
    return base64.b64encode(encoded(colour, size, image_format)).decode()


def decode_png(body: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(body))
    assert image.format == "PNG"
    return image
