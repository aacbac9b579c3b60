#!/bin/sh
# Makes sure a PostgreSQL server answers on 127.0.0.1:5432 with trust authentication for the
# `postgres` user, which the test suite uses for its scratch databases. Idempotent; run as root.
# A machine may come with PostgreSQL already installed (asking for passwords), so the
# authentication lines are checked every time, not only after an install.
set -eu
export DEBIAN_FRONTEND=noninteractive

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  apt-get update
  apt-get install -y postgresql
fi
version=$(ls /etc/postgresql | sort -n | tail -1)
hba=/etc/postgresql/$version/main/pg_hba.conf
# The tests connect as postgres without a password, on loopback only.
before=$(cksum < "$hba")
sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
sed -i -E 's/^(local\s+all\s+postgres\s+)\S+/\1trust/' "$hba"
changed=$([ "$before" = "$(cksum < "$hba")" ] && echo no || echo yes)

if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
elif [ "$changed" = yes ]; then
  pg_ctlcluster --skip-systemctl-redirect "$version" main reload
fi
for _ in $(seq 1 30); do
  pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1 && break
  sleep 1
done
psql -h 127.0.0.1 -U postgres -d postgres -Atc 'SELECT 1' >/dev/null
