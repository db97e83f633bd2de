#!/usr/bin/env bash
# Makes sure what building and testing the module needs is on this machine:
# libclang (bindgen, used by the redis-module crate), redis-server and
# redis-cli/redis-benchmark, and faketime (libfaketime, for the clock tests).
# Installs them with apt-get when missing and root.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 &&
   ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
  missing+=(libclang-dev)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing: $packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq $packages >/dev/null
else
  echo "Missing: $packages" >&2
  echo "Install them (Debian/Ubuntu: sudo apt-get install -y $packages) and run again." >&2
  exit 1
fi
