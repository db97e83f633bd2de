#!/usr/bin/env bash
# Builds the floor module (benches/floor/floor.c) into
# target/floor/libfloor.so when the source is newer, and prints its path.
# The header is the redismodule.h of the redis-module crate this project
# depends on (found with `cargo metadata`), so no copy of it lives here.
# Needs a C compiler (cc; Debian: build-essential, which Rust needs anyway).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${FLOOR_OUT:-target/floor/libfloor.so}
src=benches/floor/floor.c
if [ ! -f "$out" ] || [ "$src" -nt "$out" ]; then
  manifest=$(cargo metadata --format-version 1 --offline 2>/dev/null || cargo metadata --format-version 1)
  crate=$(python3 -c '
import json, sys
m = json.load(sys.stdin)
print(next(p["manifest_path"] for p in m["packages"] if p["name"] == "redis-module").rsplit("/", 1)[0])
' <<<"$manifest")
  mkdir -p "$(dirname "$out")"
  cc -O2 -g -fPIC -shared -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter \
    -I "$crate/src/include" -o "$out" "$src"
fi
echo "$out"
