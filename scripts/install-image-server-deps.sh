#!/bin/sh
# Debian packages that the image server's tests run on: Starlette and uvicorn for the app, Pillow for
# the images, pytest and PyYAML for the suite and Chromium for the page test. No GPU libraries: the tests
# build the app around a test pipeline. Idempotent: installs only what is missing.
set -eu
export DEBIAN_FRONTEND=noninteractive
packages="python3-starlette python3-uvicorn python3-pil python3-httpx python3-pytest python3-yaml chromium"
missing=""
for package in $packages; do
  dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'ok installed' || missing="$missing $package"
done
[ -z "$missing" ] && exit 0
apt-get -o DPkg::Lock::Timeout=600 update
# shellcheck disable=SC2086
apt-get -o DPkg::Lock::Timeout=600 install -y $missing
