"""Loads the real FLUX.2 [klein] pipeline: hub access, weights, the optimised path and the warm-up.

torch and diffusers are imported only inside load_model and ask_hugging_face, so everything
else here (and the whole HTTP layer) runs without them.
"""

import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from PIL import Image

from generation import LoadedModel, generate_image
from prompt_cache import pipeline_prompt_cache
from settings import Settings
from validation import GenerateRequest
from variants import Variant

log = logging.getLogger("image-server")

TRUTHY = {"1", "true", "yes", "on"}
WARMUP_PROMPT = "a lighthouse on a rocky coast at dusk, photograph"
PROMPT_CACHE_NAME = "prompt embedding cache"


class HubAccessError(Exception):
    """The weights cannot be fetched with the credentials at hand; the message says what to do."""


class HubRefused(Exception):
    """The hub answered that this token may not read the repository."""


def licence_steps(variant: Variant) -> str:
    return (f"Accept the licence on {variant.page} while signed in to Hugging Face, create a read "
            "token at https://huggingface.co/settings/tokens, then export HF_TOKEN=<that token> "
            "and start the server again.")


def ask_hugging_face(repo_id: str, token: str) -> None:
    """Asks for the metadata of one file of the repository, which the hub refuses without access."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "model_index.json"), token=token)
    except HfHubHTTPError as error:
        status = getattr(error.response, "status_code", None)
        if status in (401, 403, 404):
            raise HubRefused(f"HTTP {status}") from error
        raise HubAccessError(unreachable(repo_id, error)) from error
    except Exception as error:
        raise HubAccessError(unreachable(repo_id, error)) from error


def unreachable(repo_id: str, error: Exception) -> str:
    return (f"Could not ask the Hugging Face Hub about {repo_id} ({type(error).__name__}: {error}). "
            "If its weights are already in the local cache, set HF_HUB_OFFLINE=1 to skip this check.")


def check_hub_access(variant: Variant, environ: Mapping[str, str],
                     ask_hub: Callable[[str, str], None] = ask_hugging_face) -> None:
    if not variant.gated:
        return
    token = environ.get("HF_TOKEN", "").strip()
    if not token:
        raise HubAccessError(f"{variant.hub_id} is gated and HF_TOKEN is not set. {licence_steps(variant)}")
    if environ.get("HF_HUB_OFFLINE", "").lower() in TRUTHY:
        return
    try:
        ask_hub(variant.hub_id, token)
    except HubRefused as refusal:
        raise HubAccessError(f"The Hugging Face Hub refused HF_TOKEN for {variant.hub_id} ({refusal}). "
                             f"{licence_steps(variant)}") from None


def module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def choose_attention_backend(requested: str, device_type: str, cuda_major: Optional[int],
                             available: Callable[[str], bool] = module_available) -> Optional[str]:
    """auto: FlashAttention 3 on Hopper when installed, then FlashAttention 2, then PyTorch's own flash kernel."""
    if requested != "auto":
        return requested
    if device_type != "cuda":
        return None
    if cuda_major == 9 and available("flash_attn_interface"):
        return "_flash_3"
    if available("flash_attn"):
        return "flash"
    return "_native_flash"


@dataclass(frozen=True)
class OptimisationPlan:
    fuse_qkv: bool = False
    channels_last_vae: bool = False
    attention_backend: Optional[str] = None
    compile_transformer: bool = False
    compile_vae_decoder: bool = False
    compile_skipped: Optional[str] = None

    @property
    def compiles(self) -> bool:
        return self.compile_transformer or self.compile_vae_decoder


def cpu_compiler(environ: Mapping[str, str] = os.environ, which: Callable[[str], Optional[str]] = shutil.which) -> Optional[str]:
    """The C++ compiler that torch.compile's CPU code generation would call, as inductor looks for it."""
    candidates = [environ["CXX"]] if environ.get("CXX") else ["g++", "clang++", "c++"]
    return next((found for found in map(which, candidates) if found), None)


def compile_blocker(device_type: str, find_compiler: Callable[[], Optional[str]] = cpu_compiler,
                    available: Callable[[str], bool] = module_available) -> Optional[str]:
    """Why torch.compile cannot run on this device, or None when it can."""
    if device_type != "cpu":
        return None
    if find_compiler() is None:
        return "no C++ compiler (g++, clang++ or $CXX) was found, and torch.compile needs one on the CPU"
    if not available("setuptools"):
        return "setuptools is not installed, and torch.compile builds its CPU code with it"
    return None


def plan_optimisations(pipeline: Any, device_type: str, compile: bool, attention_backend: Optional[str],
                       blocker: Optional[str] = None) -> OptimisationPlan:
    """The fused, channels-last, flash-attention steps are for CUDA; torch.compile runs wherever it can.

    compile=False skips torch.compile everywhere; a blocker (see compile_blocker) skips it and says why.
    """
    compiles = compile and blocker is None
    skipped = blocker if compile and blocker else None
    has_decoder = hasattr(pipeline.vae, "decoder")
    if device_type != "cuda":
        return OptimisationPlan(compile_transformer=compiles, compile_vae_decoder=compiles and has_decoder,
                                compile_skipped=skipped)
    transformer = pipeline.transformer
    return OptimisationPlan(
        fuse_qkv=hasattr(transformer, "fuse_qkv_projections"),
        channels_last_vae=True,
        attention_backend=attention_backend if hasattr(transformer, "set_attention_backend") else None,
        compile_transformer=compiles,
        compile_vae_decoder=compiles and has_decoder,
        compile_skipped=skipped,
    )


def apply_optimisations(pipeline: Any, plan: OptimisationPlan, channels_last: Any) -> list:
    applied = []
    if plan.fuse_qkv:
        pipeline.transformer.fuse_qkv_projections()
        if hasattr(pipeline.vae, "fuse_qkv_projections"):
            pipeline.vae.fuse_qkv_projections()
        applied.append("fused QKV projections")
    if plan.channels_last_vae:
        pipeline.vae.to(memory_format=channels_last)
        applied.append("channels-last VAE")
    if plan.attention_backend:
        pipeline.transformer.set_attention_backend(plan.attention_backend)
        applied.append(f"attention backend {plan.attention_backend}")
    # Compiled in place with automatic dynamic shapes: the first size gets a specialised graph,
    # the second warm-up size a shape-generic one that every later size reuses. Inductor keeps its
    # defaults: with coordinate-descent tuning, an H100 had not compiled the 4B model's first size after
    # more than four minutes, where the defaults take 83 s for the whole warm-up (see README.md, Speed).
    if plan.compile_transformer:
        pipeline.transformer.compile()
        applied.append("torch.compile transformer")
    if plan.compile_vae_decoder:
        pipeline.vae.decoder.compile()
        applied.append("torch.compile VAE decoder")
    return applied


def warmup_requests(settings: Settings) -> list:
    variant = settings.variant
    steps = min(variant.steps, 4)
    requests = [GenerateRequest(WARMUP_PROMPT, width, height, steps, variant.guidance, 0, ())
                for width, height in settings.warmup_sizes]
    if settings.max_reference_images > 0:
        width, height = settings.warmup_sizes[0]
        reference = Image.new("RGB", (width, height), (128, 128, 128))
        requests.append(GenerateRequest("make it night", width, height, steps, variant.guidance, 0, (reference,)))
    return requests


def warm_up(model: LoadedModel, settings: Settings, compiling: bool, report: Callable[[str], None]) -> None:
    requests = warmup_requests(settings)
    for index, request in enumerate(requests, start=1):
        what = f"{request.width}x{request.height}" + (" with a reference image" if request.images else "")
        note = "; the first run spends minutes compiling" if compiling else ""
        report(f"warming up {index}/{len(requests)}: {what}{note}")
        generate_image(model, request, request.seed)


def generator_factory(torch: Any, device: str) -> Callable[[int], Any]:
    return lambda seed: torch.Generator(device).manual_seed(seed)


def load_pipeline(source: str, device: str, torch: Any) -> Any:
    """source is a hub repository id or a local folder; from_pretrained reads a folder without the hub."""
    from diffusers import Flux2KleinPipeline

    pipeline = Flux2KleinPipeline.from_pretrained(source, torch_dtype=torch.bfloat16,
                                                  token=os.environ.get("HF_TOKEN") or None)
    pipeline.to(device)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def plan_pipeline(pipeline: Any, device: str, compile: bool, attention_backend: str, torch: Any) -> OptimisationPlan:
    cuda_major = torch.cuda.get_device_capability()[0] if device == "cuda" else None
    backend = choose_attention_backend(attention_backend, device, cuda_major)
    return plan_optimisations(pipeline, device, compile, backend, compile_blocker(device))


def apply_plan(pipeline: Any, plan: OptimisationPlan, torch: Any) -> list:
    return apply_optimisations(pipeline, plan, torch.channels_last)


def optimise_pipeline(pipeline: Any, device: str, compile: bool, attention_backend: str, torch: Any) -> tuple:
    plan = plan_pipeline(pipeline, device, compile, attention_backend, torch)
    return plan, apply_plan(pipeline, plan, torch)


def plan_steps(plan: OptimisationPlan) -> list:
    """The plan cut into the steps that apply_optimisations takes in turn, so that each one can be timed alone."""
    steps = [OptimisationPlan(fuse_qkv=True) if plan.fuse_qkv else None,
             OptimisationPlan(channels_last_vae=True) if plan.channels_last_vae else None,
             OptimisationPlan(attention_backend=plan.attention_backend) if plan.attention_backend else None,
             OptimisationPlan(compile_transformer=plan.compile_transformer,
                              compile_vae_decoder=plan.compile_vae_decoder) if plan.compiles else None]
    return [step for step in steps if step is not None]


def describe_optimisations(applied: list, plan: OptimisationPlan, device: str) -> str:
    described = ", ".join(applied) or f"nothing to do on {device}"
    if plan.compile_skipped:
        described += f"; torch.compile skipped: {plan.compile_skipped}"
    return described


def load_model(settings: Settings, report: Callable[[str], None]) -> LoadedModel:
    variant = settings.variant
    if settings.model_dir:
        report(f"loading {settings.model_dir} (a local folder, as {variant.label})")
    else:
        report(f"downloading and loading {variant.hub_id} (about {variant.gpu_memory_gb} GB of GPU memory)")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device != "cuda":
        log.warning("no CUDA device: generating on the CPU, which takes minutes per image")
    pipeline = load_pipeline(settings.source, device, torch)
    plan, applied = optimise_pipeline(pipeline, device, settings.compile, settings.attention_backend, torch)
    if plan.compile_skipped:
        log.warning("torch.compile skipped: %s", plan.compile_skipped)
    report("optimising: " + describe_optimisations(applied, plan, device))
    model = LoadedModel(pipeline=pipeline, make_generator=generator_factory(torch, device),
                        optimisations=(*applied, PROMPT_CACHE_NAME), embed_prompt=pipeline_prompt_cache(pipeline))
    warm_up(model, settings, plan.compiles, report)
    return model
