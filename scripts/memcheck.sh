#!/usr/bin/env bash
# `make test-valgrind`: the waiting clients' paths under valgrind's memcheck.
#
# Builds the release module with line tables (scripts/module-with-lines.sh:
# the optimised code operators run, shared with `make bench-profile`), then
# runs tests/memcheck.rs with every server it starts under memcheck
# (RL_SERVER=scripts/memcheck-server.sh): the boundary load of issue 28 for
# MEMCHECK_LOAD_S seconds (default 30), the DEBUG SLEEP rounds, the
# operations with clients waiting, a replica attached, checks by name through
# policy changes. Then reads every server's log (scripts/memcheck_report.py):
# any error fails, as does a test that failed (a server that died or hung, a
# waiter never answered).
#
# Environment: MEMCHECK_OUT (the logs; default target/memcheck-out, emptied
# first), MEMCHECK_LOAD_S, MEMCHECK_SLEEP_ROUNDS (default 25), RL_MODULE (a
# module already built, to check instead), MEMCHECK_SERVER (default
# redis-server).
set -uo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "memcheck: valgrind not found: apt-get install -y valgrind" >&2; exit 1; }
out=${MEMCHECK_OUT:-target/memcheck-out}
if [ -n "${RL_MODULE:-}" ]; then
  module=$(realpath "$RL_MODULE")
else
  module=$(scripts/module-with-lines.sh) || exit 1
fi
rm -rf "$out" && mkdir -p "$out"
out=$(realpath "$out")
started=$(date +%s)
echo "memcheck: $module under memcheck; logs in $out" >&2
# One test at a time (two cores); bounded, so a hung server cannot hold CI.
MEMCHECK_DIR=$out RL_MODULE=$module RL_SERVER=$PWD/scripts/memcheck-server.sh \
  RL_START_TIMEOUT_S=60 timeout 900 \
  cargo test --test memcheck -- --ignored --test-threads 1 --nocapture
tests=$?
python3 scripts/memcheck_report.py "$out"
report=$?
echo "memcheck: $(( $(date +%s) - started )) s; tests $( [ $tests = 0 ] && echo passed || echo "FAILED ($tests)" ); memcheck $( [ $report = 0 ] && echo "clean" || echo "found errors" )" >&2
[ $tests = 0 ] && [ $report = 0 ]
