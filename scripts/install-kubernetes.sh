#!/bin/sh
# A real Kubernetes API server for the tests of the Kubernetes source controller: kube-apiserver, built
# from the published Go modules of one release, and etcd, from Debian's etcd-server package.
#
# k8s.io/kubernetes cannot be required as it is published: its go.mod points every k8s.io/* staging module
# at ./staging/src/..., which only exists in its Git tree. A throwaway module requires it and replaces each
# of those with the same release's published v0.Y.Z module, then builds only cmd/kube-apiserver.
# The binary lands in ~/.cache/orchestrator/kubernetes/<version>/ (Go's module and build caches beside it),
# so a second run finds it and does nothing. Run as root (apt-get). Prints the binaries' folder.
# `install-kubernetes.sh etcd` or `install-kubernetes.sh kube-apiserver` does one part only.
#
# `install-kubernetes.sh kstatus` builds scripts/kstatus/ (the status Flux and kpt compute for an object, from the
# published sigs.k8s.io/cli-utils its go.mod pins) into ~/.cache/orchestrator/kubernetes/kstatus/<digest of its
# sources>/ with the same Go caches, and prints that folder.
#
# The build is the slow part of a fresh machine's set-up (several minutes of CPU on two cores), so it compiles
# without optimisations or inlining (-N -l: about a third less compile time, and the server still starts in
# about 2 s) and without cgo, at low priority beside whatever else the machine is doing.
set -eu
export DEBIAN_FRONTEND=noninteractive
version=v1.34.4
cache="${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/kubernetes"
binaries="$cache/$version"

part=${1:-all}

# Go's own installer puts it in /usr/local/go, which a non-login shell may not have on its PATH.
use_go() {
  command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null 2>&1 || { echo "kubernetes: building $1 needs Go 1.24 or later on the PATH" >&2; exit 1; }
  export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOTOOLCHAIN=local CGO_ENABLED=0
}

if [ "$part" = kstatus ]; then
  source=$(cd "$(dirname "$0")/kstatus" && pwd)
  folder="$cache/kstatus/$(cat "$source/go.mod" "$source/go.sum" "$source/main.go" | sha256sum | cut -c1-16)"
  if [ ! -x "$folder/kstatus" ]; then
    mkdir -p "$cache"
    exec 8>"$cache/kstatus.lock"
    flock 8
  fi
  if [ ! -x "$folder/kstatus" ]; then
    use_go kstatus
    mkdir -p "$folder"
    (cd "$source" && GOFLAGS=-mod=readonly go build -trimpath -ldflags='-s -w' -o "$folder/kstatus.partial" .)
    mv "$folder/kstatus.partial" "$folder/kstatus"
  fi
  echo "$folder"
  exit 0
fi

if [ "$part" != kube-apiserver ] && ! command -v etcd >/dev/null 2>&1; then
  apt-get -o DPkg::Lock::Timeout=600 update >/dev/null
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends etcd-server >/dev/null
fi

# One build at a time: the test set-up starts it in the background, and a test that needs the binary before it is
# done waits here for the lock, then finds it built.
if [ "$part" != etcd ] && [ ! -x "$binaries/kube-apiserver" ]; then
  mkdir -p "$cache"
  exec 9>"$cache/build.lock"
  flock 9
fi
if [ "$part" != etcd ] && [ ! -x "$binaries/kube-apiserver" ]; then
  echo "kubernetes: building kube-apiserver $version from its Go modules into $binaries" >&2
  use_go "kube-apiserver $version"
  export GOFLAGS=-mod=mod
  module=$(mktemp -d)
  trap 'rm -rf "$module"' EXIT
  cd "$module"
  go mod init kube-apiserver-build >/dev/null 2>&1
  go mod download -json "k8s.io/kubernetes@$version" >/dev/null
  staging_version="v0.${version#v1.}"
  replaces=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$version.mod")
  [ -n "$replaces" ] || { echo "kubernetes: no staging replace directives found in k8s.io/kubernetes@$version's go.mod" >&2; exit 1; }
  for staged in $replaces; do
    go mod edit -replace "$staged=$staged@$staging_version"
  done
  go mod edit -require "k8s.io/kubernetes@$version"
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$version" >get.log 2>&1 || { cat get.log >&2; exit 1; }
  mkdir -p "$binaries"
  nice -n 10 go build -trimpath -gcflags=all='-N -l' -ldflags='-s -w' -o "$binaries/kube-apiserver.partial" k8s.io/kubernetes/cmd/kube-apiserver
  mv "$binaries/kube-apiserver.partial" "$binaries/kube-apiserver"
fi
echo "$binaries"
