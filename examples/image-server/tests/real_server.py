"""server.py and ui.py run for real, in the Python environment that scripts/install-image-server-deps.sh
builds with the pinned diffusers, transformers and torch, on a random-weight pipeline folder."""

import os
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

import httpx

SERVER_DIR = Path(__file__).resolve().parent.parent
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator/image-server/venv"
VENV = Path(os.environ.get("IMAGE_SERVER_VENV") or DEFAULT_VENV)
VENV_PYTHON = VENV / "bin/python"
# Loading imports torch and diffusers, and with compile on the CPU compiles for minutes.
START_TIMEOUT_S = 600


def require_venv() -> Path:
    if not VENV_PYTHON.exists():
        raise RuntimeError(f"{VENV_PYTHON} is missing: run scripts/install-image-server-deps.sh, which installs "
                           "the server's pinned packages there (IMAGE_SERVER_VENV names another place)")
    return VENV_PYTHON


def run_in_venv(args: List[str], timeout_s: float = 300, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(require_venv()), *args], cwd=SERVER_DIR, capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})})


def save_random_pipelines(folders: dict) -> None:
    """folders maps a variant ('distilled' or 'base') to the folder its tiny pipeline is saved in."""
    script = ("import sys; from pathlib import Path; from random_pipeline import save_random_pipeline\n"
              "for variant, folder in zip(sys.argv[1::2], sys.argv[2::2]):\n"
              "    save_random_pipeline(Path(folder), 'tiny', variant == 'distilled')")
    pairs = [str(item) for variant, folder in folders.items() for item in (variant, folder)]
    finished = run_in_venv(["-c", script, *pairs])
    assert finished.returncode == 0, finished.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RunningServer:
    def __init__(self, process: subprocess.Popen, url: str, log_path: Path) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path
        self.health_seen: List[dict] = []

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until_ready(self) -> dict:
        """Polls /health from the moment the process starts, keeping every distinct answer."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{self.log}")
            try:
                response = httpx.get(f"{self.url}/health", timeout=5)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            seen = {"code": response.status_code, **response.json()}
            if not self.health_seen or (seen["status"], seen["phase"]) != (self.health_seen[-1]["status"],
                                                                           self.health_seen[-1]["phase"]):
                self.health_seen.append(seen)
            if seen["status"] != "loading":
                return seen
            time.sleep(0.1)
        raise RuntimeError(f"the server was not ready after {START_TIMEOUT_S} s:\n{self.log}")

    def generate(self, body: dict) -> httpx.Response:
        return httpx.post(f"{self.url}/generate", json=body, timeout=120)


@contextmanager
def running(script: str, model_dir: Path, log_dir: Path, *flags: str, env: Optional[dict] = None) -> Iterator[RunningServer]:
    port = free_port()
    log_path = log_dir / f"{script}-{port}.log"
    with open(log_path, "w") as log_file:
        process = subprocess.Popen(
            [str(require_venv()), script, "--model-dir", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
             "--warmup-sizes", "64x64", *flags],
            cwd=SERVER_DIR, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    server = RunningServer(process, f"http://127.0.0.1:{port}", log_path)
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
