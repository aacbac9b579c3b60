#!/usr/bin/env bash
# Builds, runs the TypeScript suite (mocha) and the image server's suite (pytest), and prints one closing line for both.
set -uo pipefail
cd "$(dirname "$0")/.."
sh scripts/test-setup.sh || exit 1
npx tsc -p tsconfig.json || exit 1

mocha_out=$(mktemp)
# The Kubernetes suites go last: the set-up may still be building their API server in the background.
npx mocha --parallel --jobs 2 --reporter spec $(ls test/*.test.ts | grep -v '^test/kubernetes-') test/kubernetes-*.test.ts 2>&1 | tee "$mocha_out"
mocha_status=${PIPESTATUS[0]}
mocha_passed=$(grep -Eo '^ +[0-9]+ passing' "$mocha_out" | grep -Eo '[0-9]+' | tail -1)
mocha_failed=$(grep -Eo '^ +[0-9]+ failing' "$mocha_out" | grep -Eo '[0-9]+' | tail -1)

pytest_out=$(mktemp)
/usr/bin/python3 -m pytest -q -p no:cacheprovider examples/image-server/tests 2>&1 | tee "$pytest_out"
pytest_status=${PIPESTATUS[0]}
pytest_passed=$(grep -Eo '[0-9]+ passed' "$pytest_out" | grep -Eo '[0-9]+' | tail -1)
pytest_failed=$(grep -Eo '[0-9]+ (failed|errors?)' "$pytest_out" | awk '{s+=$1} END {print s+0}')

passed=$(( ${mocha_passed:-0} + ${pytest_passed:-0} ))
failed=$(( ${mocha_failed:-0} + ${pytest_failed:-0} ))
if [ "$mocha_status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
if [ "$pytest_status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
rm -f "$mocha_out" "$pytest_out"
echo
echo "tests: ${passed} passed, ${failed} failed"
[ "$mocha_status" -eq 0 ] && [ "$pytest_status" -eq 0 ]
