"""Serves ui.py's app around the seeded test pipeline on a free loopback port, for the page test.

Prints "listening on http://127.0.0.1:PORT" once the socket is bound; takes server.py's flags
but --host and --port, since it always listens on a free loopback port.
"""

import argparse
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvicorn  # noqa: E402

from seeded_pipeline import SeededPipeline, seeded_loader  # noqa: E402
from settings import build_parser, settings_from_args  # noqa: E402
from ui import create_ui_app  # noqa: E402


def main() -> None:
    parser = build_parser("ui.py around the seeded test pipeline")
    parser.add_argument("--generation-delay", type=float, default=0.0,
                        help="seconds each generation takes, so a page can show its progress")
    args: argparse.Namespace = parser.parse_args()
    settings = settings_from_args(args)
    app = create_ui_app(seeded_loader(SeededPipeline(delay_s=args.generation_delay)), settings)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    print(f"listening on http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])


if __name__ == "__main__":
    main()
