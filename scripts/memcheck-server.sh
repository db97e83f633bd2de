#!/usr/bin/env bash
# redis-server under valgrind's memcheck, taking redis-server's arguments:
# what `make test-valgrind` (scripts/memcheck.sh) gives the integration
# tests as RL_SERVER. Each process writes its own log,
# $MEMCHECK_DIR/memcheck.<pid>.log, which scripts/memcheck_report.py reads.
#
# - somalloc=libjemalloc.so*: Debian's redis-server takes malloc and free
#   from libjemalloc.so.2; memcheck replaces that library's allocator with
#   its own, which keeps freed blocks aside and so recognises a read or a
#   free of one.
# - --track-origins: an uninitialised value's error says where it was made.
# - Leaks: Redis exits without freeing what it holds (reported as "still
#   reachable", and "possibly lost" for its sds strings, pointed to past
#   their header): not errors. A block nothing points to ("definitely
#   lost") is one.
# - --error-exitcode: a server with errors exits 99, not 0.
# - --verbose: the log ends with how often each suppression was used.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${MEMCHECK_DIR:?the directory for the logs of memcheck}"
exec nice -n 10 valgrind --tool=memcheck \
  --soname-synonyms='somalloc=libjemalloc.so*' \
  --track-origins=yes --num-callers=40 \
  --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
  --error-exitcode=99 --verbose \
  --suppressions="$here/memcheck.supp" \
  --log-file="$MEMCHECK_DIR/memcheck.%p.log" \
  "${MEMCHECK_SERVER:-redis-server}" "$@"
