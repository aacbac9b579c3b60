#!/bin/sh
# Everything the test suite talks to, installed and started when missing: PostgreSQL on 127.0.0.1:5432,
# Podman's Docker API socket with a locally built test image, the image server's Python packages, a Kubernetes
# API server with its etcd and the kstatus checker (built once, then cached), and the
# command-line tools the tests call (tmux is the terminal the CLI's screen is read from; git and docker-registry
# serve repos and private images).
set -eu
cd "$(dirname "$0")/.."
sh scripts/postgres-setup.sh
# The API server's first build takes minutes of CPU and little network. It runs in the background at the lowest
# priority, beside the downloads below and then beside the tests, taking the CPU they leave idle; the Kubernetes
# suites run last and wait for it (scripts/install-kubernetes.sh holds a lock while it builds).
sh scripts/install-kubernetes.sh etcd >/dev/null
mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/kubernetes"
nohup nice -n 19 sh -c 'sh scripts/install-kubernetes.sh kube-apiserver && sh scripts/install-kubernetes.sh kstatus' >"${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator/kubernetes/build.log" 2>&1 &
sh scripts/podman-setup.sh >/dev/null
sh scripts/install-image-server-deps.sh
# Command-line tools the tests run: the OpenSSH client (ssh, scp, ssh-keygen) and server, curl, tmux, git (its daemon
# serves the repos tests), the reference image registry with htpasswd for the registry_auth tests, and Lua 5.1
# (the version Argo CD's health checks are written in) for manifests/argocd/health.lua.
missing=""
command -v scp >/dev/null 2>&1 || missing="$missing openssh-client"
# sshd: the hosts of the SSH fleet tests (test/ssh-fleet.test.ts), each an sshd of its own on a loopback address.
[ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
command -v curl >/dev/null 2>&1 || missing="$missing curl"
command -v tmux >/dev/null 2>&1 || missing="$missing tmux"
command -v git >/dev/null 2>&1 || missing="$missing git"
command -v docker-registry >/dev/null 2>&1 || missing="$missing docker-registry"
command -v htpasswd >/dev/null 2>&1 || missing="$missing apache2-utils"
command -v lua5.1 >/dev/null 2>&1 || missing="$missing lua5.1"
# pebble (Let's Encrypt's test ACME server, with pebble-challtestsrv as its DNS) and openssl (its own certificate)
# for the gateway tests.
command -v pebble >/dev/null 2>&1 || missing="$missing pebble"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
if [ -n "$missing" ]; then
  apt-get update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y $missing >/dev/null
fi
