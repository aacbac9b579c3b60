#!/bin/sh
# Everything the test suite talks to, installed and started when missing: PostgreSQL on 127.0.0.1:5432,
# Podman's Docker API socket with a locally built test image, and the image server's Python packages.
set -eu
cd "$(dirname "$0")/.."
sh scripts/postgres-setup.sh
sh scripts/podman-setup.sh >/dev/null
sh scripts/install-image-server-deps.sh
