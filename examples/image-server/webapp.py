"""The HTTP app: POST /generate, GET /health, GET /info, built around any pipeline loader."""

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, Callable, Optional, Sequence

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from generation import GenerationQueue, LoadedModel, ModelState, draw_seed, generate_png
from settings import Settings
from validation import (DEFAULT_SIZE, GUIDANCE_RANGE, MAX_PIXELS, MAX_SIDE, MIN_REFERENCE_SIDE, MIN_SIDE,
                        SEED_RANGE, SIZE_MULTIPLE, STEPS_RANGE, ClientError, GenerateRequest,
                        parse_generate_request, parse_json_body)

log = logging.getLogger("image-server")

ModelLoader = Callable[[Settings, Callable[[str], None]], LoadedModel]
LOADING_RETRY_AFTER_S = 5
HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed"}


def error_response(status: int, code: str, message: str, field: Optional[str] = None,
                   headers: Optional[dict] = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "field": field, "message": message}},
                        status_code=status, headers=headers)


async def client_error_handler(_request: Request, error: ClientError) -> JSONResponse:
    return error_response(error.status, error.code, error.message, error.field, error.headers)


async def http_error_handler(_request: Request, error: HTTPException) -> JSONResponse:
    code = HTTP_ERROR_CODES.get(error.status_code, "http_error")
    return error_response(error.status_code, code, str(error.detail), headers=getattr(error, "headers", None))


def describe(settings: Settings) -> dict:
    variant = settings.variant
    return {
        "model": variant.model,
        "variant": variant.kind,
        "label": variant.label,
        "hub_id": variant.hub_id,
        "source": settings.source,
        "licence": variant.licence,
        "gated": variant.gated,
        "tunable": variant.tunable,
        "compile": settings.compile,
        "defaults": {"width": DEFAULT_SIZE, "height": DEFAULT_SIZE,
                     "num_inference_steps": variant.steps, "guidance_scale": variant.guidance},
        "limits": {
            "size_multiple": SIZE_MULTIPLE,
            "min_side": MIN_SIDE,
            "max_side": MAX_SIDE,
            "max_pixels": MAX_PIXELS,
            "num_inference_steps": list(STEPS_RANGE) if variant.tunable else [variant.steps, variant.steps],
            "guidance_scale": list(GUIDANCE_RANGE) if variant.tunable else [variant.guidance, variant.guidance],
            "seed": list(SEED_RANGE),
            "max_reference_images": settings.max_reference_images,
            "min_reference_side": MIN_REFERENCE_SIDE,
            "max_body_bytes": settings.max_body_bytes,
            "queue_size": settings.queue_size,
        },
    }


async def read_limited_body(request: Request, limit: int) -> bytes:
    too_large = ClientError(413, "body_too_large", f"the body is larger than the {limit}-byte limit", "body")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def require_json(request: Request) -> None:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise ClientError(415, "unsupported_media_type",
                          f"send the body as Content-Type: application/json, not {media_type or 'nothing'}")


def describe_failure(error: BaseException) -> str:
    if "OutOfMemory" in type(error).__name__:
        return "the GPU ran out of memory: try a smaller size or fewer reference images"
    return f"generation failed: {type(error).__name__}: {error}"


def create_app(load_model: ModelLoader, settings: Settings,
               on_load_failure: Optional[Callable[[BaseException], None]] = None,
               extra_routes: Sequence[BaseRoute] = ()) -> Starlette:
    state = ModelState()
    queue = GenerationQueue(settings.queue_size)

    def require_ready() -> LoadedModel:
        if state.status == "loading":
            raise ClientError(503, "loading", f"the model is loading ({state.phase}); retry shortly",
                              headers={"Retry-After": str(LOADING_RETRY_AFTER_S)})
        if state.model is None:
            raise ClientError(503, "load_failed", f"the model failed to load: {state.error}")
        return state.model

    def parse(body: bytes) -> GenerateRequest:
        return parse_generate_request(parse_json_body(body), settings.variant, settings.max_reference_images)

    async def generate(request: Request) -> Response:
        model = require_ready()
        require_json(request)
        body = await read_limited_body(request, settings.max_body_bytes)
        parsed = await run_in_threadpool(parse, body)
        seed = parsed.seed if parsed.seed is not None else draw_seed()

        def job() -> tuple:
            started = time.monotonic()
            return generate_png(model, parsed, seed), time.monotonic() - started

        try:
            png, seconds = await queue.run(job)
        except ClientError:
            raise
        except Exception as error:
            log.exception("generation failed for %dx%d seed %d", parsed.width, parsed.height, seed)
            return error_response(500, "generation_failed", describe_failure(error))
        log.info("generated %dx%d, %d steps, %d reference images, seed %d in %.2f s",
                 parsed.width, parsed.height, parsed.num_inference_steps, len(parsed.images), seed, seconds)
        return Response(png, media_type="image/png", headers={
            "X-Seed": str(seed),
            "X-Generation-Time": f"{seconds:.3f}",
            "Cache-Control": "no-store",
        })

    async def health(_request: Request) -> JSONResponse:
        body = {**state.snapshot(), "model": settings.variant.model, "variant": settings.variant.kind,
                "pending": queue.pending}
        if state.status == "ready":
            return JSONResponse(body)
        if state.status == "loading":
            return JSONResponse(body, status_code=503, headers={"Retry-After": str(LOADING_RETRY_AFTER_S)})
        return JSONResponse(body, status_code=500)

    async def info(_request: Request) -> JSONResponse:
        return JSONResponse(describe(settings))

    async def load() -> None:
        try:
            model = await queue.run_exclusive(lambda: load_model(settings, state.report))
        except Exception as error:
            state.mark_failed(error)
            if on_load_failure is not None:
                on_load_failure(error)
            return
        state.mark_ready(model)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        app.state.loading = asyncio.create_task(load())
        yield
        queue.close()

    routes = [
        Route("/generate", generate, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
        *extra_routes,
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        ClientError: client_error_handler,
        HTTPException: http_error_handler,
    })
    app.state.model_state = state
    app.state.queue = queue
    return app
