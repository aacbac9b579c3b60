#!/bin/sh
# Prepares a Podman service that speaks the Docker Engine API on a Unix socket, plus a tiny
# busybox image built locally (no registry is reachable on test machines). Idempotent; run as root.
# Prints the DOCKER_HOST value on its last line.
set -eu

BASE=/tmp/orch-podman
SOCKET=/tmp/orch-podman.sock
IMAGE=localhost/orchestrator-test:busybox
CONF="$BASE/containers.conf"
SERVICE_LOG="$BASE/service.log"

log() { echo "podman-setup: $*" >&2; }

socket_answers() {
  [ -S "$SOCKET" ] || return 1
  node -e '
    const req = require("http").get({ socketPath: process.argv[1], path: "/_ping", timeout: 2000 }, (res) => {
      process.exit(res.statusCode === 200 ? 0 : 1);
    });
    req.on("error", () => process.exit(1));
    req.on("timeout", () => { req.destroy(); process.exit(1); });
  ' "$SOCKET"
}

mkdir -p "$BASE"
# One set-up at a time: test processes running side by side would otherwise start two services.
exec 9>"$BASE/setup.lock"
flock 9

missing=""
command -v podman >/dev/null 2>&1 || missing="$missing podman"
command -v runc >/dev/null 2>&1 || missing="$missing runc"
# The image needs the static build: it is copied alone into an empty root file system.
dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || missing="$missing busybox-static"
if [ -n "$missing" ]; then
  log "installing$missing (output in $BASE/apt.log)"
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  if ! { apt-get -o DPkg::Lock::Timeout=600 update \
      && apt-get -o DPkg::Lock::Timeout=600 install -y $missing; } >"$BASE/apt.log" 2>&1; then
    cat "$BASE/apt.log" >&2
    log "installing$missing failed"
    exit 1
  fi
fi
cat > "$CONF.tmp" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
EOF
mv "$CONF.tmp" "$CONF"
export CONTAINERS_CONF="$CONF"

if ! socket_answers; then
  log "starting podman system service on $SOCKET"
  rm -f "$SOCKET"
  # setsid: the service outlives the shell (and test run) that started it. From /: a service whose working
  # directory is removed (a checkout deleted after its test run) cannot start containers any more.
  (cd / && exec setsid podman system service --time=0 "unix://$SOCKET" >"$SERVICE_LOG" 2>&1 </dev/null 9>&-) &
  tries=0
  until socket_answers; do
    tries=$((tries + 1))
    if [ "$tries" -gt 100 ]; then
      log "podman service did not answer on $SOCKET within 20 s; see $SERVICE_LOG"
      cat "$SERVICE_LOG" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
fi

if ! podman image exists "$IMAGE"; then
  log "building $IMAGE"
  ROOTFS="$BASE/rootfs"
  rm -rf "$ROOTFS"
  mkdir -p "$ROOTFS/bin" "$ROOTFS/tmp" "$ROOTFS/etc" "$ROOTFS/proc" "$ROOTFS/sys" "$ROOTFS/dev" "$ROOTFS/root"
  chmod 1777 "$ROOTFS/tmp"
  cp /bin/busybox "$ROOTFS/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$ROOTFS/bin/$applet"
  done
  echo "root:x:0:0:root:/root:/bin/sh" > "$ROOTFS/etc/passwd"
  echo "root:x:0:" > "$ROOTFS/etc/group"
  tar -C "$ROOTFS" -cf "$BASE/rootfs.tar" .
  podman import --change 'CMD ["/bin/sh"]' --change 'ENV PATH=/bin' "$BASE/rootfs.tar" "$IMAGE" >&2
  rm -rf "$ROOTFS" "$BASE/rootfs.tar"
fi

echo "unix://$SOCKET"
