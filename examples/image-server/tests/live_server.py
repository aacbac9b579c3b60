"""The app under test, served for real on a loopback port."""

import socket
import threading
import time
from contextlib import contextmanager

import httpx
import uvicorn



@contextmanager
def serving(app):
    """Runs the app under uvicorn on a free loopback port in a background thread."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


def wait_until_ready(base_url: str, timeout_s: float = 10) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        body = httpx.get(f"{base_url}/health").json()
        if body["status"] != "loading" or time.monotonic() > deadline:
            return body
        time.sleep(0.02)
