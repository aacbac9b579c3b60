#!/bin/sh
# Debian packages that the image server's tests run on: Starlette and uvicorn for the app, Pillow for
# the images, pytest and PyYAML for the suite and Chromium for the page test. No GPU libraries: the tests
# build the app around a test pipeline.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y \
  python3-starlette python3-uvicorn python3-pil python3-httpx python3-pytest python3-yaml chromium
