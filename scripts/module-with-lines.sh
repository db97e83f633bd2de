#!/usr/bin/env bash
# The release build of the module with line tables and v0-mangled names
# (generic functions show their type parameters), in a target directory of
# its own (these flags would otherwise rebuild the normal release build);
# prints the path of the .so. The same optimised code as the release, so
# that what valgrind looks at is what operators run: `make bench-profile`
# (callgrind) and `make test-valgrind` (memcheck) share it, and CI builds it
# once. Argument: the target directory (default target/profile).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-target/profile}
echo "building the module with line tables into $target" >&2
CARGO_TARGET_DIR=$target CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
  CARGO_PROFILE_RELEASE_STRIP=none RUSTFLAGS="-C symbol-mangling-version=v0" \
  cargo build --release >&2
realpath "$target/release/libredis_ratelimit.so"
