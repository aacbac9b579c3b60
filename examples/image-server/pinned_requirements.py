"""Prints the packages pinned in server.py's inline script metadata (PEP 723), one per line: what uv installs
for `uv run server.py`, and what the test set-up and gpu-bench.sh install."""

import re
import sys
import tomllib
from pathlib import Path


def pinned_requirements(script: Path) -> list:
    block = re.search(r"^# /// script\n((?:#.*\n)*?)# ///$", script.read_text(), re.MULTILINE).group(1)
    return tomllib.loads("".join(line[2:] + "\n" for line in block.splitlines()))["dependencies"]


if __name__ == "__main__":
    print("\n".join(pinned_requirements(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("server.py"))))
