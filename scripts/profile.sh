#!/usr/bin/env bash
# `make bench-profile`: where the time of a request goes, in instructions.
#
# Runs redis-server under callgrind (instruction counts are repeatable, unlike
# time on a shared machine) with a release build of the module that keeps
# line tables and v0-mangled names (generic functions show their type
# parameters), then for each command: warms its key space with
# instrumentation off, counts a fixed number of requests from redis-benchmark
# (50 clients, 100k random keys, pipeline 32, the parameters of `make
# bench`), and dumps the counts. Prints (scripts/callgrind_summary.py)
# instructions per request for each command and, for the RL commands, the
# functions inside the command with their inclusive cost per request. The raw
# callgrind files stay in the output directory, for `callgrind_annotate` or
# kcachegrind. The floor module (benches/floor/floor.c, FLOOR.CHECK) is
# loaded beside ours and profiled the same way: "floor" with three words
# (the contract's floor), and, in the guard's workload, "floor-4" and
# "floor-5" with one and two integer words more, as many words as the
# checks (Redis's own work per argument, outside the command, is then the
# same on both sides; the summary sets each check beside the floor with its
# number of words).
#
# Then the guard (scripts/profile_guard.py): each command's instructions a
# request inside the command (Redis's call()) against the figures committed
# in docs/benchmarks.md; more than 3% above its figure fails the run, so a
# slowdown cannot go unnoticed. The figures are per request of a fixed
# workload (PROFILE_REQUESTS after a 200,000-request warm-up); PROFILE_GUARD=0
# skips the guard, PROFILE_GUARD=write rewrites the committed figures (after
# a change that is meant to cost more, or saves).
#
# Environment: PROFILE_REQUESTS (default 100000 per command),
# PROFILE_OUT (default target/profile-out), PROFILE_TARGET_DIR (the separate
# build, default target/profile), RL_SERVER (default redis-server),
# RL_MODULE (a module already built, to profile instead of building one:
# e.g. an older build, to compare), MODULE_ARGS (settings after the module's
# path, e.g. "expiry-slack 0"), PROFILE_ALL=1 (every check command, not only
# the token bucket and the sliding counter), PROFILE_ONLY (workload names,
# space-separated: only those, whatever PROFILE_ALL and PROFILE_GUARD say;
# a name that is no workload is an error).
set -euo pipefail
cd "$(dirname "$0")/.."

requests=${PROFILE_REQUESTS:-100000}
out=${PROFILE_OUT:-target/profile-out}
target=${PROFILE_TARGET_DIR:-target/profile}
server_bin=${RL_SERVER:-redis-server}

for tool in valgrind callgrind_control callgrind_annotate redis-benchmark redis-cli "$server_bin"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "profile: $tool not found: apt-get install -y valgrind (and scripts/ensure-deps.sh)" >&2
    exit 1
  fi
done

# name|command words (__rand_int__: the random key)
# tokenbucket is `make bench`'s: its keys are full again, and expire, 100 ms
# after a request, so nearly every request creates its key. tokenbucket-kept
# refills slowly enough that keys stay: the path of updating a stored state.
# check-kept is tokenbucket-kept by a policy's name (RL.CHECK).
commands=(
  "incr|INCR p:incr:__rand_int__"
  "floor|FLOOR.CHECK p:floor:__rand_int__ 60000"
  "tokenbucket|RL.TOKENBUCKET p:tb:__rand_int__ 100 10"
  "tokenbucket-kept|RL.TOKENBUCKET p:tbk:__rand_int__ 100 0.01"
  "check-kept|RL.CHECK profile:tbk p:ck:__rand_int__"
  "slidingcounter|RL.SLIDINGCOUNTER p:sc:__rand_int__ 100 60"
)
more=(
  "fixedwindow|RL.FIXEDWINDOW p:fw:__rand_int__ 100 60"
  "slidinglog|RL.SLIDINGLOG p:sl:__rand_int__ 100 60"
  "leakybucket|RL.LEAKYBUCKET p:lb:__rand_int__ 100 10"
  "gcra|RL.GCRA p:gcra:__rand_int__ 99 10 1"
  "cl.throttle|CL.THROTTLE p:cl:__rand_int__ 99 10 1"
)
# The guard's workload: every check command with parameters under which no
# key expires, no bucket refills to full and no window turns during the run,
# so that each request takes the same path whatever the timing (under
# valgrind a run takes minutes, and the churn of the commands above, keys
# created, expired and deleted inside the command, moves their counts by
# 2-3% from one run to the next). Names "g-...". Beside them the floor with
# as many words as the checks: floor-4 for the four-word commands
# (RL.TOKENBUCKET key 100 0.01, ...), floor-5 for the five-word ones (RL.GCRA
# key 99 1 1h, CL.THROTTLE key 99 1 3600); the extra words are integers the
# floor parses, as a check parses its parameters.
guard=(
  "floor-4|FLOOR.CHECK p:floor4:__rand_int__ 60000 100"
  "floor-5|FLOOR.CHECK p:floor5:__rand_int__ 60000 99 1"
  "g-tokenbucket|RL.TOKENBUCKET g:tb:__rand_int__ 100 0.01"
  "g-slidingcounter|RL.SLIDINGCOUNTER g:sc:__rand_int__ 100 1h"
  "g-fixedwindow|RL.FIXEDWINDOW g:fw:__rand_int__ 100 1h"
  "g-slidinglog|RL.SLIDINGLOG g:sl:__rand_int__ 100 1h"
  "g-leakybucket|RL.LEAKYBUCKET g:lb:__rand_int__ 100 0.01"
  "g-gcra|RL.GCRA g:gcra:__rand_int__ 99 1 1h"
  "g-cl.throttle|CL.THROTTLE g:cl:__rand_int__ 99 1 3600"
)
if [ -n "${PROFILE_ONLY:-}" ]; then
  # PROFILE_ONLY="floor g-tokenbucket": only the workloads named, in the
  # order of the lists above, from all of them (to look at a few commands
  # quickly; the guard, unless PROFILE_GUARD=0, then checks only those).
  if [ "${PROFILE_GUARD:-1}" = write ]; then
    echo "profile: PROFILE_GUARD=write rewrites every figure: not with PROFILE_ONLY" >&2
    exit 2
  fi
  known=" "
  for entry in "${commands[@]}" "${more[@]}" "${guard[@]}"; do known+="${entry%%|*} "; done
  for name in $PROFILE_ONLY; do
    case $known in *" $name "*) ;; *)
      echo "profile: PROFILE_ONLY: no workload named $name (the workloads:$known)" >&2
      exit 2
      ;;
    esac
  done
  only=()
  for entry in "${commands[@]}" "${more[@]}" "${guard[@]}"; do
    case " $PROFILE_ONLY " in *" ${entry%%|*} "*) only+=("$entry") ;; esac
  done
  commands=("${only[@]}")
else
  if [ -n "${PROFILE_ALL:-}" ]; then commands+=("${more[@]}"); fi
  if [ "${PROFILE_GUARD:-1}" != 0 ]; then commands+=("${guard[@]}"); fi
fi
if [ -n "${RL_MODULE:-}" ]; then
  module=$(realpath "$RL_MODULE")
else
  module=$(scripts/module-with-lines.sh "$target")
fi
floor=$(realpath "$(benches/floor/build.sh)")

mkdir -p "$out"
rm -f "$out"/callgrind.out*
workdir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Instrumentation starts off: start-up and warm-up are not counted.
# Bounded by `timeout`; callgrind_control needs valgrind's own pid, which
# prefixes the lines of its log.
timeout 3600 valgrind --tool=callgrind --instr-atstart=no \
  --log-file="$workdir/valgrind.log" --callgrind-out-file="$out/callgrind.out" \
  "$server_bin" --port "$port" --bind 127.0.0.1 --dir "$workdir" --save "" \
  --appendonly no --daemonize no --loadmodule "$module" ${MODULE_ARGS:-} --loadmodule "$floor" \
  >"$workdir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
  redis-cli -p "$port" PING >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$workdir/server.log" >&2; exit 1; }
  sleep 0.1
done
redis-cli -p "$port" PING >/dev/null
# RL.CHECK's policy: tokenbucket-kept's parameters, by name (policies are
# not keys: the FLUSHALL before each command keeps it).
redis-cli -p "$port" RL.POLICY SET profile:tbk TOKENBUCKET 100 0.01 >/dev/null
vg_pid=$(sed -n 's/^==\([0-9]*\)==.*/\1/p' "$workdir/valgrind.log" | head -n 1)
# Each workload's command once, on a key of its own: one that answers an
# error (a floor module built before FLOOR.CHECK took extra words, a
# command renamed) would be measured as the cost of an error reply. Every
# workload answers integers; an error reply starts with its code (ERR,
# WRONGTYPE, ...).
for entry in "${commands[@]}"; do
  read -r -a words <<<"${entry#*|}"
  reply=$(redis-cli -p "$port" "${words[@]/__rand_int__/selfcheck}" 2>&1)
  case $reply in [A-Z]*)
    echo "profile: ${entry%%|*}: ${words[*]} answers an error, nothing to measure: $reply" >&2
    exit 1
    ;;
  esac
done

bench() {
  timeout 1800 redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -r 100000 -P 32 -q "$@" >/dev/null
}

for entry in "${commands[@]}"; do
  name=${entry%%|*}
  read -r -a words <<<"${entry#*|}"
  echo "profile: $name: warm-up, then $requests requests counted" >&2
  # Each command on an empty server: else a command's count depends on the
  # keys the commands before it left, through the key table's incremental
  # rehashing (done a step per lookup, inside commands) when the table
  # doubles: seen to add 17% to a command's count.
  #
  # redis-benchmark seeds its random keys with time(NULL) ^ getpid(): now
  # and then the counted run gets the warm-up's seed (a few seconds and a
  # few process ids later, the two can give the same number), draws the
  # warm-up's keys again and finds every one of them: no key is created, a
  # workload other than the usual one (~8.5% of its requests create their
  # key), ~3% cheaper (seen once in 44 counted runs, on floor-5). Told by
  # the key count, which then does not grow: that run is done again from
  # the flush.
  for attempt in 1 2 3; do
    redis-cli -p "$port" FLUSHALL SYNC >/dev/null
    bench -n 200000 "${words[@]}"
    keys_before=$(redis-cli -p "$port" DBSIZE)
    callgrind_control -i on "$vg_pid" >/dev/null 2>&1
    callgrind_control -z "$vg_pid" >/dev/null 2>&1
    bench -n "$requests" "${words[@]}"
    callgrind_control --dump="$name" "$vg_pid" >/dev/null 2>&1
    callgrind_control -i off "$vg_pid" >/dev/null 2>&1
    keys_after=$(redis-cli -p "$port" DBSIZE)
    [ "$keys_after" != "$keys_before" ] && break
    echo "profile: $name: the counted requests created no key (the warm-up's keys drawn again), attempt $attempt" >&2
    if [ "$attempt" = 3 ]; then
      echo "profile: $name: kept as it is after 3 attempts" >&2
      break
    fi
    { grep -lZ "^desc: Trigger: dump $name\$" "$out"/callgrind.out.* || true; } | xargs -0 -r rm -f
  done
done

redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
wait "$server_pid" 2>/dev/null || true
server_pid=

# Each dump file names its trigger ("dump <name>").
dump_of() {
  grep -l "^desc: Trigger: dump $1\$" "$out"/callgrind.out.* | head -n 1
}

dumps=()
for entry in "${commands[@]}"; do
  dump=$(dump_of "${entry%%|*}")
  [ -n "$dump" ] || { echo "profile: no callgrind dump for ${entry%%|*}" >&2; exit 1; }
  dumps+=("$dump")
done
echo
echo "Inclusive instructions per request ($requests requests of each, pipeline 32);"
echo "\"f <- file\": code of that file the compiler inlined into f."
python3 scripts/callgrind_summary.py "$requests" "${dumps[@]}"
echo
echo "profile: callgrind files in $out (callgrind_annotate --inclusive=yes --auto=no FILE)" >&2
case ${PROFILE_GUARD:-1} in
  0) echo "profile: the guard is off (PROFILE_GUARD=0)" >&2 ;;
  write) python3 scripts/profile_guard.py --write "$requests" "${dumps[@]}" ;;
  *) python3 scripts/profile_guard.py "$requests" "${dumps[@]}" ;;
esac
