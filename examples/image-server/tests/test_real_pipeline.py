"""The real server.py and ui.py on diffusers' Flux2KleinPipeline: tiny, with random weights, on the CPU.

The pipeline folders are written by random_pipeline.py with the same transformer, VAE, text encoder,
scheduler and tokenizer classes as the published checkpoints; nothing comes from a hub. Everything
is observed over HTTP (or in the page), as a client would: the images are noise, but they are the
pipeline's, so a change in any input the pipeline honours changes the bytes.
"""

import hashlib
import json
import shutil
import subprocess

import httpx
import pytest

from images import data_url, decode_png
from real_server import SERVER_DIR, running, save_random_pipelines

FOX = {"prompt": "a red fox in fresh snow", "width": 192, "height": 128, "seed": 42}


@pytest.fixture(scope="session")
def pipeline_dirs(tmp_path_factory):
    folders = {variant: tmp_path_factory.mktemp(f"flux2-klein-tiny-{variant}") for variant in ("distilled", "base")}
    save_random_pipelines(folders)
    return folders


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("server-logs")


@pytest.fixture(scope="module")
def distilled(pipeline_dirs, log_dir):
    with running("server.py", pipeline_dirs["distilled"], log_dir, "--no-compile") as server:
        server.wait_until_ready()
        yield server


@pytest.fixture(scope="module")
def base(pipeline_dirs, log_dir):
    with running("server.py", pipeline_dirs["base"], log_dir, "--no-compile", "--variant", "base") as server:
        server.wait_until_ready()
        yield server


def png_of(response) -> bytes:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    return response.content


def test_the_pipeline_folder_holds_the_real_classes(pipeline_dirs):
    index = json.loads((pipeline_dirs["distilled"] / "model_index.json").read_text())
    assert index["_class_name"] == "Flux2KleinPipeline"
    assert {part: index[part] for part in ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")} == {
        "transformer": ["diffusers", "Flux2Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLFlux2"],
        "text_encoder": ["transformers", "Qwen3ForCausalLM"],
        "tokenizer": ["transformers", "Qwen2TokenizerFast"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    }
    assert index["is_distilled"] is True
    assert json.loads((pipeline_dirs["base"] / "model_index.json").read_text())["is_distilled"] is False


def test_health_goes_from_loading_the_folder_through_warm_up_to_ready(distilled, pipeline_dirs):
    seen = distilled.health_seen
    assert (seen[0]["code"], seen[0]["status"]) == (503, "loading")
    assert (seen[-1]["code"], seen[-1]["status"]) == (200, "ready")
    phases = [answer["phase"] for answer in seen]
    assert f"loading {pipeline_dirs['distilled']} (a local folder, as 4B distilled)" in phases[0]
    assert seen[-1]["optimisations"] == ["prompt embedding cache"]
    log = distilled.log
    assert "warming up 1/2: 64x64" in log and "warming up 2/2: 64x64 with a reference image" in log
    assert "ready after" in log


def test_info_names_the_local_folder_as_the_source(distilled, pipeline_dirs):
    info = httpx.get(f"{distilled.url}/info").json()
    assert info["source"] == str(pipeline_dirs["distilled"])
    assert (info["model"], info["variant"], info["compile"]) == ("4b", "distilled", False)


def test_generate_answers_a_png_of_the_requested_size(distilled):
    response = distilled.generate(FOX)
    image = decode_png(png_of(response))
    assert image.size == (192, 128)
    assert response.headers["x-seed"] == "42"
    assert len(set(image.getdata())) > 100, "the pipeline's output should not be a flat colour"
    assert decode_png(png_of(distilled.generate({**FOX, "width": 64, "height": 96}))).size == (64, 96)


def test_the_same_seed_gives_the_same_bytes_and_another_seed_or_prompt_does_not(distilled):
    first = png_of(distilled.generate(FOX))
    assert png_of(distilled.generate(FOX)) == first
    assert png_of(distilled.generate({**FOX, "seed": 43})) != first
    assert png_of(distilled.generate({**FOX, "prompt": "a lighthouse at dusk"})) != first


def test_reference_images_reach_the_pipeline_one_and_several(distilled):
    red, blue = data_url((220, 30, 30), (128, 96)), data_url((30, 30, 220), (96, 128), "JPEG")
    alone = png_of(distilled.generate(FOX))
    edited = png_of(distilled.generate({**FOX, "images": [red]}))
    edited_blue = png_of(distilled.generate({**FOX, "images": [blue]}))
    composed = png_of(distilled.generate({**FOX, "images": [red, blue]}))
    assert len({alone, edited, edited_blue, composed}) == 4
    assert png_of(distilled.generate({**FOX, "images": [red, blue]})) == composed
    assert decode_png(composed).size == (192, 128)


def test_the_base_variant_honours_steps_and_guidance(base):
    small = {**FOX, "width": 64, "height": 64}
    default = png_of(base.generate(small))
    assert png_of(base.generate({**small, "num_inference_steps": 50, "guidance_scale": 4.0})) == default
    fewer_steps = png_of(base.generate({**small, "num_inference_steps": 8}))
    other_guidance = png_of(base.generate({**small, "guidance_scale": 2.5}))
    no_guidance = png_of(base.generate({**small, "guidance_scale": 1.0}))
    assert len({default, fewer_steps, other_guidance, no_guidance}) == 4
    assert png_of(base.generate({**small, "num_inference_steps": 8})) == fewer_steps


def test_the_distilled_variant_still_refuses_other_steps(distilled):
    response = distilled.generate({**FOX, "num_inference_steps": 8})
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "num_inference_steps"


def test_compile_runs_on_the_cpu_where_a_compiler_is_found(pipeline_dirs, log_dir):
    """Compile left on, as by default: torch.compile runs on the CPU when a C++ compiler is found."""
    compiler = shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    with running("server.py", pipeline_dirs["distilled"], log_dir, "--max-reference-images", "0") as server:
        ready = server.wait_until_ready()
        assert ready["status"] == "ready", server.log
        if compiler is None:
            assert ready["optimisations"] == ["prompt embedding cache"]
            assert "torch.compile skipped: no C++ compiler" in server.log
        else:
            assert ready["optimisations"] == ["torch.compile transformer", "torch.compile VAE decoder",
                                              "prompt embedding cache"]
            assert "the first run spends minutes compiling" in server.log
        small = {**FOX, "width": 64, "height": 64}
        assert decode_png(png_of(server.generate(small))).size == (64, 64)
        assert png_of(server.generate(small)) == png_of(server.generate(small))


def test_without_a_compiler_compile_is_skipped_with_the_reason_logged(pipeline_dirs, log_dir):
    with running("server.py", pipeline_dirs["distilled"], log_dir, "--max-reference-images", "0",
                 env={"CXX": "/nonexistent/c++"}) as server:
        ready = server.wait_until_ready()
        assert ready["status"] == "ready", server.log
        assert ready["optimisations"] == ["prompt embedding cache"]
        assert ("torch.compile skipped: no C++ compiler (g++, clang++ or $CXX) was found, "
                "and torch.compile needs one on the CPU") in server.log
        assert png_of(server.generate({**FOX, "width": 64, "height": 64}))


def test_the_page_generates_an_image_in_headless_chromium(pipeline_dirs, log_dir, distilled):
    with running("ui.py", pipeline_dirs["distilled"], log_dir, "--no-compile") as page_server:
        assert page_server.wait_until_ready()["status"] == "ready"
        finished = subprocess.run(["node", str(SERVER_DIR / "tests/page_generates.mjs"), page_server.url,
                                   FOX["prompt"], "192", "128", "42"],
                                  capture_output=True, text=True, timeout=300)
        assert finished.returncode == 0, finished.stderr
        shown = json.loads(finished.stdout.strip().splitlines()[-1])
    assert shown["model"] == f"4B distilled · {pipeline_dirs['distilled']}"
    assert (shown["size"], shown["seed"]) == ([192, 128], "42")
    pixels = decode_png(png_of(distilled.generate(FOX))).convert("RGBA").tobytes()
    assert shown["sha256"] == hashlib.sha256(pixels).hexdigest()
