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
"""FLUX.2 [klein] image generation over HTTP: POST /generate, GET /health, GET /info.

    uv run server.py [--model 4b|9b] [--variant distilled|base] [--port 6006] [--host 0.0.0.0]
"""

import logging
import os
import sys
import threading
from typing import Callable, Optional, Sequence

import uvicorn

from loading import HubAccessError, check_hub_access, load_model
from settings import Settings, parse_settings
from webapp import create_app

log = logging.getLogger("image-server")

AppFactory = Callable[..., object]


def serve(settings: Settings, app_factory: AppFactory) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.model_dir is None:
        try:
            check_hub_access(settings.variant, os.environ)
        except HubAccessError as error:
            log.error("%s", error)
            return 2

    load_failed = threading.Event()

    def stop_after_load_failure(_error: BaseException) -> None:
        load_failed.set()
        server.should_exit = True

    app = app_factory(load_model, settings, on_load_failure=stop_after_load_failure)
    server = uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None))
    log.info("serving %s (%s) on %s:%d", settings.variant.label, settings.source, settings.host, settings.port)
    server.run()
    # The GPU thread may still be downloading or compiling, which cannot be interrupted; waiting
    # for it would keep a stopped server alive for minutes.
    logging.shutdown()
    os._exit(1 if load_failed.is_set() else 0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return serve(parse_settings(argv, "FLUX.2 [klein] image generation server"), create_app)


if __name__ == "__main__":
    sys.exit(main())
