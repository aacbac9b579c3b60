#!/usr/bin/env bash
# Builds, runs the TypeScript suite (mocha) and the image server's suite (pytest), and prints one closing line for both
# (scripts/test-summary.sh), which fails the run when a test failed or was skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
sh scripts/test-setup.sh || exit 1
npx tsc -p tsconfig.json || exit 1
npx tsc -p console/tsconfig.json || exit 1

mocha_out=$(mktemp)
# The Kubernetes suites go last: the set-up may still be building their API server in the background.
npx mocha --parallel --jobs 2 --reporter spec $(ls test/*.test.ts | grep -v '^test/kubernetes-') test/kubernetes-*.test.ts 2>&1 | tee "$mocha_out"
mocha_status=${PIPESTATUS[0]}

pytest_out=$(mktemp)
/usr/bin/python3 -m pytest -q -p no:cacheprovider examples/image-server/tests 2>&1 | tee "$pytest_out"
pytest_status=${PIPESTATUS[0]}

bash scripts/test-summary.sh "$mocha_out" "$mocha_status" "$pytest_out" "$pytest_status"
summary_status=$?
rm -f "$mocha_out" "$pytest_out"
exit "$summary_status"
