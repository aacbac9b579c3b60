#!/bin/sh
# bench.py on a GPU machine, from this folder alone, with the environment it ran in printed first:
#
#   sh gpu-bench.sh [bench.py's flags]                 # installs the pinned packages from PyPI
#   sh gpu-bench.sh --wheels DIR [bench.py's flags]    # a machine without network whose python3 has a CUDA torch
#
# Without --wheels, the packages pinned at the top of server.py go into a virtual environment
# ($IMAGE_SERVER_VENV, default /tmp/image-server-venv) from PyPI; torch's Linux wheel brings its CUDA
# libraries, so the machine needs only the NVIDIA driver. With --wheels, the wheels in DIR (the pinned
# diffusers, transformers and the rest, no torch) are installed over python3's own packages with no index
# and no download, and its torch is used as it is: the environment printed says which.
# The flags default to --random-weights --variants 4b-distilled,9b-distilled (no weights, no hub).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wheels=""
if [ "${1:-}" = "--wheels" ]; then
  wheels=$(cd "$2" && pwd)
  shift 2
fi
[ "$#" -gt 0 ] || set -- --random-weights --variants 4b-distilled,9b-distilled

if [ -n "$wheels" ]; then
  python=python3
  site=/tmp/image-server-wheels
  "$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
else
  venv="${IMAGE_SERVER_VENV:-/tmp/image-server-venv}"
  python="$venv/bin/python"
  if [ ! -x "$python" ]; then
    python3 -m venv "$venv"
    requirements=$(python3 "$here/pinned_requirements.py")
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet $requirements
  fi
fi

echo "== environment"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | sed 's/^/gpu: /'
"$python" - <<'PY'
import os, platform
import torch, diffusers, transformers
print(f"python: {platform.python_version()}  cpus: {os.cpu_count()}")
print(f"torch: {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})")
print(f"diffusers: {diffusers.__version__}  transformers: {transformers.__version__}")
PY
echo "== bench.py $*"
cd "$here"
exec env PYTHONUNBUFFERED=1 "$python" bench.py "$@"
