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
"""The image server with a web page at /: prompt, input images, size, steps, guidance, seed.

    uv run ui.py [--model 4b|9b] [--variant distilled|base] [--port 6006] [--host 0.0.0.0]

The page calls the same POST /generate, GET /info and GET /health as any other client.
"""

import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from server import serve
from settings import Settings, parse_settings
from webapp import ModelLoader, create_app

PAGE = Path(__file__).with_name("ui.html")
PAGE_POLICY = ("default-src 'self'; img-src 'self' data: blob:; style-src 'unsafe-inline'; "
               "script-src 'unsafe-inline'; connect-src 'self'")


def create_ui_app(load_model: ModelLoader, settings: Settings,
                  on_load_failure: Optional[Callable[[BaseException], None]] = None) -> Starlette:
    page = PAGE.read_text(encoding="utf-8")

    async def index(_request: Request) -> HTMLResponse:
        return HTMLResponse(page, headers={"Content-Security-Policy": PAGE_POLICY, "Cache-Control": "no-cache"})

    return create_app(load_model, settings, on_load_failure, extra_routes=[Route("/", index, methods=["GET"])])


def main(argv: Optional[Sequence[str]] = None) -> int:
    return serve(parse_settings(argv, "FLUX.2 [klein] image generation server with a web page"), create_ui_app)


if __name__ == "__main__":
    sys.exit(main())
