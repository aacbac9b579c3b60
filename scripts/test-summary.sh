#!/usr/bin/env bash
# The closing line of scripts/test.sh, from what mocha (spec reporter) and pytest printed and how each exited:
#   test-summary.sh MOCHA_OUTPUT MOCHA_STATUS PYTEST_OUTPUT PYTEST_STATUS
# Fails when a test failed, when either exited non-zero, and when a test was skipped: scripts/test-setup.sh has
# installed what every suite needs, so a suite that skips itself (the Podman ones without Podman, say) checked
# nothing, and a run that only counted what passed would not show it.
set -uo pipefail
mocha_out=$1 mocha_status=$2 pytest_out=$3 pytest_status=$4

last_count() { grep -Eo "$1" "$2" | grep -Eo '[0-9]+' | tail -1; }
mocha_passed=$(last_count '^ +[0-9]+ passing' "$mocha_out")
mocha_failed=$(last_count '^ +[0-9]+ failing' "$mocha_out")
mocha_pending=$(last_count '^ +[0-9]+ pending' "$mocha_out")
pytest_passed=$(last_count '[0-9]+ passed' "$pytest_out")
pytest_failed=$(grep -Eo '[0-9]+ (failed|errors?)' "$pytest_out" | awk '{s+=$1} END {print s+0}')
pytest_skipped=$(last_count '[0-9]+ skipped' "$pytest_out")

passed=$(( ${mocha_passed:-0} + ${pytest_passed:-0} ))
failed=$(( ${mocha_failed:-0} + ${pytest_failed:-0} ))
skipped=$(( ${mocha_pending:-0} + ${pytest_skipped:-0} ))
if [ "$mocha_status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
if [ "$pytest_status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
if [ "$skipped" -ne 0 ]; then
  echo "tests: a skipped test ran nothing; mocha marks each with '-' above (pending), pytest with 's', with the reason its suite printed"
fi
[ "$failed" -eq 0 ] && [ "$skipped" -eq 0 ]
