#!/bin/sh
# What `npm run bench:gateway` compares against, installed from Debian when missing: nginx (the reverse
# proxy of reference) and wrk (the load generator). The installed nginx is not started as a system service:
# the benchmark runs its own with its own configuration.
set -eu
missing=''
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx-light"
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
[ -z "$missing" ] && exit 0
apt-get update >/dev/null
# policy-rc.d 101 keeps the package from starting nginx on port 80 during installation.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null
