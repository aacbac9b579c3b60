"""The real loading code, as far as it runs without torch, diffusers or weights: the variant table,
the flags, the HF_TOKEN check, the optimisation plan, the warm-up and the generator."""

import inspect
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from generation import LoadedModel
from loading import (HubAccessError, HubRefused, OptimisationPlan, apply_optimisations, check_hub_access,
                     choose_attention_backend, compile_blocker, cpu_compiler, generator_factory, plan_optimisations,
                     plan_steps, warm_up)
from real_server import free_port, run_in_venv
from seeded_pipeline import SeededPipeline, make_generator
from settings import Settings, parse_settings
from variants import VARIANTS, find_variant

SERVER_DIR = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"


def test_the_variant_table_names_the_four_checkpoints_with_their_defaults():
    table = {(v.model, v.kind): (v.hub_id, v.steps, v.guidance, v.gated) for v in VARIANTS.values()}
    assert table == {
        ("4b", "distilled"): ("black-forest-labs/FLUX.2-klein-4B", 4, 1.0, False),
        ("4b", "base"): ("black-forest-labs/FLUX.2-klein-base-4B", 50, 4.0, False),
        ("9b", "distilled"): ("black-forest-labs/FLUX.2-klein-9B", 4, 1.0, True),
        ("9b", "base"): ("black-forest-labs/FLUX.2-klein-base-9B", 50, 4.0, True),
    }
    assert [v.tunable for v in VARIANTS.values()] == [False, True, False, True]
    with pytest.raises(ValueError, match="models are 4b, 9b"):
        find_variant("12b", "distilled")


def test_flags_default_to_the_4b_distilled_model_on_port_6006_with_compile():
    settings = parse_settings([], "test")
    assert settings.variant.hub_id == "black-forest-labs/FLUX.2-klein-4B"
    assert (settings.host, settings.port, settings.max_reference_images) == ("0.0.0.0", 6006, 4)
    assert settings.compile is True
    assert settings.warmup_sizes == ((1024, 1024), (768, 1344))
    assert (settings.model_dir, settings.source) == (None, "black-forest-labs/FLUX.2-klein-4B")


def test_model_dir_names_a_saved_pipeline_folder_and_becomes_the_source(tmp_path):
    (tmp_path / "model_index.json").write_text("{}")
    settings = parse_settings(["--model-dir", str(tmp_path), "--variant", "base"], "test")
    assert (settings.model_dir, settings.source) == (tmp_path, str(tmp_path))
    assert settings.variant.steps == 50


def test_a_model_dir_without_model_index_json_stops_with_a_message(capsys, tmp_path):
    with pytest.raises(SystemExit) as stopped:
        parse_settings(["--model-dir", str(tmp_path)], "test")
    assert stopped.value.code == 2
    assert "has no model_index.json" in capsys.readouterr().err


def test_flags_choose_model_variant_port_limits_and_no_compile():
    settings = parse_settings(["--model", "9b", "--variant", "base", "--port", "7000", "--host", "127.0.0.1",
                               "--max-reference-images", "8", "--queue-size", "2", "--max-body-mb", "5",
                               "--no-compile", "--attention-backend", "_flash_3", "--warmup-sizes", "512x512"], "test")
    assert settings.variant.hub_id == "black-forest-labs/FLUX.2-klein-base-9B"
    assert (settings.port, settings.host, settings.max_reference_images, settings.queue_size) == (7000, "127.0.0.1", 8, 2)
    assert settings.max_body_bytes == 5 * 1024 * 1024
    assert (settings.compile, settings.attention_backend, settings.warmup_sizes) == (False, "_flash_3", ((512, 512),))


@pytest.mark.parametrize("argv, words", [
    (["--model", "12b"], "invalid choice"),
    (["--variant", "turbo"], "invalid choice"),
    (["--port", "70000"], "between 1 and 65535"),
    (["--max-reference-images", "-1"], "at least 0"),
    (["--warmup-sizes", "1000x1000"], "multiple of 16"),
    (["--warmup-sizes", "4096x4096"], "pixels"),
    (["--warmup-sizes", "big"], "WIDTHxHEIGHT"),
])
def test_bad_flags_stop_with_a_message(capsys, argv, words):
    with pytest.raises(SystemExit) as stopped:
        parse_settings(argv, "test")
    assert stopped.value.code == 2
    assert words in capsys.readouterr().err


class HubLedger:
    def __init__(self, refuse: bool = False) -> None:
        self.asked = []
        self.refuse = refuse

    def __call__(self, repo_id: str, token: str) -> None:
        self.asked.append((repo_id, token))
        if self.refuse:
            raise HubRefused("HTTP 403")


def test_the_4b_model_needs_no_token_and_asks_the_hub_nothing():
    hub = HubLedger(refuse=True)
    check_hub_access(find_variant("4b", "distilled"), {}, hub)
    check_hub_access(find_variant("4b", "base"), {}, hub)
    assert hub.asked == []


@pytest.mark.parametrize("environ", [{}, {"HF_TOKEN": "  "}])
def test_the_9b_model_without_hf_token_says_to_accept_the_licence_and_export_it(environ):
    hub = HubLedger()
    with pytest.raises(HubAccessError) as refused:
        check_hub_access(find_variant("9b", "distilled"), environ, hub)
    message = str(refused.value)
    assert "HF_TOKEN is not set" in message
    assert "https://huggingface.co/black-forest-labs/FLUX.2-klein-9B" in message
    assert "Accept the licence" in message and "export HF_TOKEN" in message
    assert hub.asked == []


def test_a_token_the_hub_refuses_gets_the_same_advice_and_is_not_repeated():
    hub = HubLedger(refuse=True)
    with pytest.raises(HubAccessError) as refused:
        check_hub_access(find_variant("9b", "base"), {"HF_TOKEN": "hf_secret_value"}, hub)
    message = str(refused.value)
    assert "refused HF_TOKEN" in message
    assert "https://huggingface.co/black-forest-labs/FLUX.2-klein-base-9B" in message
    assert "export HF_TOKEN" in message
    assert "hf_secret_value" not in message
    assert hub.asked == [("black-forest-labs/FLUX.2-klein-base-9B", "hf_secret_value")]


def test_an_accepted_token_passes_and_offline_mode_trusts_the_local_cache():
    hub = HubLedger()
    check_hub_access(find_variant("9b", "distilled"), {"HF_TOKEN": "hf_ok"}, hub)
    assert hub.asked == [("black-forest-labs/FLUX.2-klein-9B", "hf_ok")]
    refusing = HubLedger(refuse=True)
    check_hub_access(find_variant("9b", "distilled"), {"HF_TOKEN": "hf_ok", "HF_HUB_OFFLINE": "1"}, refusing)
    assert refusing.asked == []


@pytest.mark.parametrize("script", ["server.py", "ui.py"])
def test_starting_the_9b_model_without_hf_token_exits_at_once_with_the_advice(script):
    environ = {key: value for key, value in os.environ.items() if key != "HF_TOKEN"}
    started = time.monotonic()
    finished = subprocess.run([PYTHON, script, "--model", "9b", "--port", "1"], cwd=SERVER_DIR, env=environ,
                              capture_output=True, text=True, timeout=30)
    assert time.monotonic() - started < 10
    assert finished.returncode == 2
    assert "accept the licence" in finished.stderr.lower()
    assert "export HF_TOKEN" in finished.stderr


def test_a_local_9b_folder_needs_no_hf_token_and_asks_the_hub_nothing(tmp_path):
    # Without torch here, loading fails after the token check would have stopped it with exit code 2.
    (tmp_path / "model_index.json").write_text("{}")
    environ = {key: value for key, value in os.environ.items() if key != "HF_TOKEN"}
    finished = subprocess.run([PYTHON, "server.py", "--model", "9b", "--model-dir", str(tmp_path), "--host", "127.0.0.1",
                               "--port", str(free_port())], cwd=SERVER_DIR, env=environ, capture_output=True, text=True,
                              timeout=60)
    assert finished.returncode == 1
    assert f"loading {tmp_path} (a local folder, as 9B distilled)" in finished.stderr
    assert "HF_TOKEN" not in finished.stderr


def test_the_http_layer_loads_without_torch_or_diffusers():
    probe = "import sys, server, ui, bench; print(sorted({'torch', 'diffusers'} & set(sys.modules)))"
    finished = subprocess.run([PYTHON, "-c", probe], cwd=SERVER_DIR, capture_output=True, text=True, timeout=30)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "[]"


def test_auto_attention_prefers_flash_attention_3_on_hopper_then_2_then_pytorch_flash():
    installed = {"flash_attn_interface", "flash_attn"}.__contains__
    assert choose_attention_backend("auto", "cuda", 9, installed) == "_flash_3"
    assert choose_attention_backend("auto", "cuda", 8, installed) == "flash"
    assert choose_attention_backend("auto", "cuda", 9, lambda name: False) == "_native_flash"
    assert choose_attention_backend("auto", "cpu", None, installed) is None
    assert choose_attention_backend("_flash_3_hub", "cuda", 8, installed) == "_flash_3_hub"


class Part:
    """Records calls the way the diffusers modules would receive them."""

    def __init__(self, journal: list, name: str) -> None:
        self.journal = journal
        self.name = name

    def compile(self, **options) -> None:
        self.journal.append((self.name, "compile"))


class Transformer(Part):
    def fuse_qkv_projections(self) -> None:
        self.journal.append((self.name, "fuse_qkv_projections"))

    def set_attention_backend(self, backend: str) -> None:
        self.journal.append((self.name, "set_attention_backend", backend))


class Vae(Part):
    def __init__(self, journal: list) -> None:
        super().__init__(journal, "vae")
        self.decoder = Part(journal, "vae.decoder")

    def fuse_qkv_projections(self) -> None:
        self.journal.append(("vae", "fuse_qkv_projections"))

    def to(self, memory_format=None) -> None:
        self.journal.append(("vae", "to", memory_format))


def fake_pipeline(transformer_class=Transformer):
    journal = []
    return SimpleNamespace(transformer=transformer_class(journal, "transformer"), vae=Vae(journal)), journal


CHANNELS_LAST = "channels_last"


def test_on_cuda_the_optimised_path_fuses_qkv_goes_channels_last_picks_flash_and_compiles():
    pipeline, journal = fake_pipeline()
    plan = plan_optimisations(pipeline, "cuda", compile=True, attention_backend="_native_flash")
    applied = apply_optimisations(pipeline, plan, CHANNELS_LAST)
    assert journal == [
        ("transformer", "fuse_qkv_projections"),
        ("vae", "fuse_qkv_projections"),
        ("vae", "to", CHANNELS_LAST),
        ("transformer", "set_attention_backend", "_native_flash"),
        ("transformer", "compile"),
        ("vae.decoder", "compile"),
    ]
    assert applied == ["fused QKV projections", "channels-last VAE", "attention backend _native_flash",
                       "torch.compile transformer", "torch.compile VAE decoder"]


def test_the_plan_cut_into_steps_applies_the_same_calls_in_the_same_order():
    """bench.py times each step alone; together they must do exactly what the whole plan does."""
    whole, whole_journal = fake_pipeline()
    apply_optimisations(whole, plan_optimisations(whole, "cuda", compile=True, attention_backend="flash"), CHANNELS_LAST)
    stepped, stepped_journal = fake_pipeline()
    plan = plan_optimisations(stepped, "cuda", compile=True, attention_backend="flash")
    applied = [apply_optimisations(stepped, step, CHANNELS_LAST) for step in plan_steps(plan)]
    assert stepped_journal == whole_journal
    assert applied == [["fused QKV projections"], ["channels-last VAE"], ["attention backend flash"],
                       ["torch.compile transformer", "torch.compile VAE decoder"]]
    assert plan_steps(plan_optimisations(stepped, "cpu", compile=False, attention_backend=None)) == []


def test_no_compile_keeps_the_eager_optimisations_and_skips_torch_compile():
    pipeline, journal = fake_pipeline()
    plan = plan_optimisations(pipeline, "cuda", compile=False, attention_backend="flash")
    apply_optimisations(pipeline, plan, CHANNELS_LAST)
    assert not plan.compiles
    assert ("transformer", "compile") not in journal and ("vae.decoder", "compile") not in journal
    assert ("transformer", "set_attention_backend", "flash") in journal


def test_on_the_cpu_only_torch_compile_applies():
    pipeline, journal = fake_pipeline()
    plan = plan_optimisations(pipeline, "cpu", compile=True, attention_backend=None)
    assert plan == OptimisationPlan(compile_transformer=True, compile_vae_decoder=True)
    assert apply_optimisations(pipeline, plan, CHANNELS_LAST) == ["torch.compile transformer", "torch.compile VAE decoder"]
    assert journal == [("transformer", "compile"), ("vae.decoder", "compile")]


def test_a_blocker_skips_torch_compile_and_the_plan_says_why():
    pipeline, journal = fake_pipeline()
    plan = plan_optimisations(pipeline, "cpu", compile=True, attention_backend=None, blocker="no compiler")
    assert (plan.compiles, plan.compile_skipped) == (False, "no compiler")
    assert apply_optimisations(pipeline, plan, CHANNELS_LAST) == []
    assert journal == []
    assert plan_optimisations(pipeline, "cpu", compile=False, attention_backend=None, blocker="no compiler") == OptimisationPlan()


def test_compile_is_blocked_on_the_cpu_without_a_cxx_compiler_or_setuptools():
    assert compile_blocker("cpu", lambda: "/usr/bin/g++", lambda name: True) is None
    assert "no C++ compiler" in compile_blocker("cpu", lambda: None, lambda name: True)
    assert "setuptools is not installed" in compile_blocker("cpu", lambda: "/usr/bin/g++", lambda name: False)
    assert compile_blocker("cuda", lambda: None, lambda name: False) is None


def test_the_cpu_compiler_is_cxx_when_set_else_the_first_of_gpp_clangpp_cpp_found():
    on_path = {"clang++": "/usr/bin/clang++", "c++": "/usr/bin/c++"}.get
    assert cpu_compiler({}, on_path) == "/usr/bin/clang++"
    assert cpu_compiler({"CXX": "/opt/gcc/bin/g++"}, lambda name: name if name.startswith("/opt") else None) == "/opt/gcc/bin/g++"
    assert cpu_compiler({"CXX": "/nonexistent/c++"}, on_path) is None


def test_a_transformer_without_fusion_or_backends_is_still_compiled():
    pipeline, journal = fake_pipeline(transformer_class=Part)
    plan = plan_optimisations(pipeline, "cuda", compile=True, attention_backend="_native_flash")
    assert (plan.fuse_qkv, plan.attention_backend) == (False, None)
    apply_optimisations(pipeline, plan, CHANNELS_LAST)
    assert journal == [("vae", "to", CHANNELS_LAST), ("transformer", "compile"), ("vae.decoder", "compile")]


def test_warm_up_generates_every_size_then_an_edit_and_says_when_it_compiles():
    pipeline = SeededPipeline()
    phases = []
    settings = Settings(variant=find_variant("4b", "base"), warmup_sizes=((256, 256), (192, 320)))
    warm_up(LoadedModel(pipeline, make_generator), settings, compiling=True, report=phases.append)
    assert [(call["width"], call["height"], call["references"]) for call in pipeline.calls] == [
        (256, 256, 0), (192, 320, 0), (256, 256, 1)]
    assert [call["guidance_scale"] for call in pipeline.calls] == [4.0] * 3
    assert len(phases) == 3
    assert all("minutes compiling" in phase for phase in phases)


def test_warm_up_skips_the_edit_when_reference_images_are_disabled():
    pipeline = SeededPipeline()
    phases = []
    settings = Settings(variant=find_variant("4b", "distilled"), warmup_sizes=((128, 128),), max_reference_images=0)
    warm_up(LoadedModel(pipeline, make_generator), settings, compiling=False, report=phases.append)
    assert [(call["width"], call["references"], call["num_inference_steps"]) for call in pipeline.calls] == [(128, 0, 4)]
    assert phases == ["warming up 1/1: 128x128"]


def test_the_generator_is_a_torch_generator_on_the_pipeline_device_seeded_per_request():
    made = []

    class Generator:
        def __init__(self, device: str) -> None:
            self.device = device

        def manual_seed(self, seed: int) -> "Generator":
            made.append((self.device, seed))
            return self

    make = generator_factory(SimpleNamespace(Generator=Generator), "cuda")
    first, second = make(11), make(12)
    assert first is not second
    assert made == [("cuda", 11), ("cuda", 12)]


def test_the_seeded_pipeline_honours_the_real_call_signature():
    """Compared with the pinned diffusers' own Flux2KleinPipeline, in the environment the install script builds."""
    probe = ("import inspect; from diffusers import Flux2KleinPipeline; "
             "print(' '.join(list(inspect.signature(Flux2KleinPipeline.__call__).parameters)[1:]))")
    finished = run_in_venv(["-c", probe])
    assert finished.returncode == 0, finished.stderr
    assert list(inspect.signature(SeededPipeline.__call__).parameters)[1:] == finished.stdout.split()
    assert make_generator(5).initial_seed() == 5


def test_a_server_whose_model_cannot_load_logs_why_and_exits_with_failure():
    # Here torch is missing; offline mode guarantees nothing is fetched wherever it is not.
    environ = {**os.environ, "HF_HUB_OFFLINE": "1"}
    finished = subprocess.run([PYTHON, "server.py", "--host", "127.0.0.1", "--port", str(free_port())],
                              cwd=SERVER_DIR, env=environ, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 1
    assert "downloading and loading black-forest-labs/FLUX.2-klein-4B" in finished.stderr
    assert "loading failed: " in finished.stderr
