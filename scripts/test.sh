#!/usr/bin/env bash
# Builds, runs the TypeScript suite (mocha) and the image server's suite (pytest), and prints one closing line for both
# (scripts/test-summary.sh), which fails the run when a test failed or was skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
sh scripts/test-setup.sh || exit 1
npx tsc -p tsconfig.json || exit 1
npx tsc -p console/tsconfig.json || exit 1

mocha_out=$(mktemp)
export ORCHESTRATOR_TEST_TIMINGS=$(mktemp)
# The Kubernetes suites go last: the set-up may still be building their API server in the background.
npx mocha --parallel --jobs 2 --reporter spec --require test/helpers/file-timings.ts $(ls test/*.test.ts | grep -v '^test/kubernetes-') test/kubernetes-*.test.ts 2>&1 | tee "$mocha_out"
mocha_status=${PIPESTATUS[0]}
# The whole suite is to stay under 35 minutes on a fresh machine: the files that weigh most on it.
echo "slowest test files (wall time, seconds; two run at once):"
sort -rn "$ORCHESTRATOR_TEST_TIMINGS" | head -10 | awk -F'\t' '{ printf "  %6.0f  %s\n", $1 / 1000, $2 }'

pytest_out=$(mktemp)
/usr/bin/python3 -m pytest -q -p no:cacheprovider examples/image-server/tests 2>&1 | tee "$pytest_out"
pytest_status=${PIPESTATUS[0]}

bash scripts/test-summary.sh "$mocha_out" "$mocha_status" "$pytest_out" "$pytest_status"
summary_status=$?
rm -f "$mocha_out" "$pytest_out" "$ORCHESTRATOR_TEST_TIMINGS"
exit "$summary_status"
