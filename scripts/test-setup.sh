#!/bin/sh
# Everything the test suite talks to, installed and started when missing: PostgreSQL on 127.0.0.1:5432,
# Podman's Docker API socket with a locally built test image, the image server's Python packages, and
# tmux (the terminal the CLI's screen is read from).
set -eu
cd "$(dirname "$0")/.."
sh scripts/postgres-setup.sh
sh scripts/podman-setup.sh >/dev/null
sh scripts/install-image-server-deps.sh
if ! command -v tmux >/dev/null 2>&1; then
  apt-get update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y tmux >/dev/null
fi
