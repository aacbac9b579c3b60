#!/bin/sh
# What the image server's tests run on. From Debian: Starlette and uvicorn for the app, Pillow for the
# images, pytest and PyYAML for the suite, Chromium for the page tests, and venv for the tool below.
# From PyPI: the server's own dependencies, exactly as pinned in the inline metadata of
# examples/image-server/server.py (diffusers, transformers, torch...), in a virtual environment that the
# tests run the real pipeline in: $IMAGE_SERVER_VENV, by default ~/.cache/orchestrator/image-server/venv.
# uv installs them and keeps the wheels in its cache (~/.cache/uv), so a second install downloads nothing.
# Idempotent: installs only what is missing or pinned differently.
set -eu
export DEBIAN_FRONTEND=noninteractive
repo=$(cd "$(dirname "$0")/.." && pwd)
packages="python3-starlette python3-uvicorn python3-pil python3-httpx python3-pytest python3-yaml python3-venv chromium"
missing=""
for package in $packages; do
  dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'ok installed' || missing="$missing $package"
done
if [ -n "$missing" ]; then
  apt-get -o DPkg::Lock::Timeout=600 update
  # shellcheck disable=SC2086
  apt-get -o DPkg::Lock::Timeout=600 install -y $missing
fi

uv_version=0.9.30
cache="${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/image-server"
venv="${IMAGE_SERVER_VENV:-$cache/venv}"
requirements=$(/usr/bin/python3 "$repo/examples/image-server/pinned_requirements.py")
[ -x "$venv/bin/python" ] && [ "$(cat "$venv/.requirements" 2>/dev/null)" = "$requirements" ] && exit 0

tool="$cache/uv-$uv_version"
if [ ! -x "$tool/bin/uv" ]; then
  /usr/bin/python3 -m venv "$tool"
  "$tool/bin/pip" install --quiet "uv==$uv_version"
fi
echo "image server: installing its pinned Python packages into $venv"
"$tool/bin/uv" venv --quiet --clear --python /usr/bin/python3 "$venv"
echo "$requirements" > "$cache/requirements.txt"
"$tool/bin/uv" pip install --quiet --python "$venv/bin/python" -r "$cache/requirements.txt"
echo "$requirements" > "$venv/.requirements"
