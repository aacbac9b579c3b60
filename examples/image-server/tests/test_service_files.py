"""service.yml and service-9b.yml ship every module server.py needs and ask for a GPU that fits."""

import ast
import re
import tomllib
from pathlib import Path

import pytest
import yaml

SERVER_DIR = Path(__file__).resolve().parent.parent


def local_imports(script: str) -> set:
    """script and every module of this folder that it imports, directly or through another."""
    found, pending = set(), [script]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        for node in ast.walk(ast.parse((SERVER_DIR / name).read_text())):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            pending += [f"{module}.py" for module in modules if (SERVER_DIR / f"{module}.py").exists()]
    return found


def inline_metadata(script: str) -> dict:
    block = re.search(r"^# /// script\n((?:#.*\n)*?)# ///$", (SERVER_DIR / script).read_text(), re.MULTILINE)
    assert block, f"{script} has no inline script metadata"
    return tomllib.loads("".join(line[2:] + "\n" for line in block.group(1).splitlines()))


@pytest.mark.parametrize("file, model, gpu", [("service.yml", "4b", "24GB.."), ("service-9b.yml", "9b", "40GB..")])
def test_each_service_file_runs_the_server_with_every_module_it_imports(file, model, gpu):
    spec = yaml.safe_load((SERVER_DIR / file).read_text())
    assert (spec["type"], spec["port"]) == ("service", 6006)
    assert spec["commands"] == [f"uv run server.py --model {model} --port 6006"]
    assert set(spec["files"]) == local_imports("server.py")
    assert spec["resources"]["gpu"] == gpu
    assert int(spec["resources"]["disk"].rstrip(".").removesuffix("GB")) >= 100
    assert spec["probes"][0]["url"] == "/health"
    assert ("HF_TOKEN" in spec.get("env", [])) == (model == "9b")


def test_every_script_pins_the_same_dependencies_for_uv():
    server = inline_metadata("server.py")
    for script in ("ui.py", "bench.py", "random_pipeline.py"):
        assert inline_metadata(script) == server, script
    pins = dict(requirement.split("==") for requirement in server["dependencies"])
    assert len(pins) == len(server["dependencies"]), "every dependency is pinned with =="
    assert pins["diffusers"] == "0.37.0", "the first diffusers with Flux2KleinPipeline"
    assert set(pins) >= {"diffusers", "transformers", "torch", "huggingface-hub", "starlette", "uvicorn", "pillow",
                         "setuptools"}
