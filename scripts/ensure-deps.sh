#!/usr/bin/env bash
# Makes sure this machine has what `make run` and `make test` need, and
# installs what is missing (Debian/Ubuntu, as root or with password-less
# sudo); elsewhere it names the exact packages and stops, before any compiler
# output.
#
# Each check asks the question the tool that needs it asks, not whether a
# file with a likely name exists (a name pattern matched Debian's
# libclang-cpp.so.14, which is not libclang, and the build then failed):
# - libclang: can bindgen load one and parse a header with it
#   (scripts/find-libclang.py)? Package libclang-dev.
# - redis-server: does it run, and is it 7.0 or later? Package redis-server.
# - redis-cli, redis-benchmark: do they run? Package redis-tools.
# - libfaketime (the clock tests): does preloading it, as tests/clock.rs
#   does, move a program's clock? Package faketime.
# - python3 -m venv (the Python client's tests, `make test-python`): does it
#   make a virtual environment with a working pip? Package python3-venv.
# - node and npm (the Node client's tests, `make test-node`): does node run
#   and is it 18 or later? Packages nodejs; does npm run? Package npm.
# - the monitoring test (tests/monitoring.rs): does Debian's Redis exporter
#   run (package prometheus-redis-exporter), and does promtool, which checks
#   the shipped alerting and recording rules, run (package prometheus; its
#   server is not started by the tests)?
# Rust (stable, with cargo) must be installed beforehand: https://rustup.rs
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "ensure-deps: $*" >&2; }

if ! cargo --version >/dev/null 2>&1; then
  say "Rust is not installed (no working 'cargo'). Install Rust stable first: https://rustup.rs"
  exit 1
fi

has_libclang() {
  if command -v python3 >/dev/null 2>&1; then
    python3 scripts/find-libclang.py >/dev/null
  else
    # Without python3 to load it, ask the package manager.
    [ "$(dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null)" = "install ok installed" ]
  fi
}

has_redis_server() {
  local version
  version=$(redis-server --version 2>/dev/null | sed -n 's/.* v=\([0-9]*\)\.\([0-9]*\).*/\1 \2/p') || return 1
  [ -n "$version" ] || return 1
  set -- $version
  [ "$1" -gt 7 ] || { [ "$1" -eq 7 ] && [ "$2" -ge 0 ]; }
}

runs() { "$@" >/dev/null 2>&1; }

# The clock tests preload these two (see tests/clock.rs for why both).
faketime_preload='/usr/$LIB/libc_malloc_debug.so.0 /usr/$LIB/faketime/libfaketime.so.1'
has_libfaketime() {
  local real faked
  real=$(date +%Y)
  faked=$(LD_PRELOAD="$faketime_preload" FAKETIME='+400d' date +%Y 2>/dev/null) || return 1
  [ -n "$faked" ] && [ "$faked" -gt "$real" ]
}

# The tests' own environment (target/pyenv) answers when it works; else a
# throwaway one does (a few seconds, so not on every run).
has_python_venv() {
  target/pyenv/bin/python -m pip --version >/dev/null 2>&1 && return 0
  local dir ok=0
  dir=$(mktemp -d) || return 1
  { python3 -m venv "$dir/venv" && "$dir/venv/bin/python" -m pip --version; } >/dev/null 2>&1 || ok=1
  rm -rf "$dir"
  return $ok
}

has_node() {
  local major
  major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || return 1
  [ -n "$major" ] && [ "$major" -ge 18 ]
}

missing_packages() {
  local missing=()
  has_libclang || missing+=(libclang-dev)
  has_redis_server || missing+=(redis-server)
  { runs redis-cli --version && runs redis-benchmark --version; } || missing+=(redis-tools)
  has_libfaketime || missing+=(faketime)
  has_python_venv || missing+=(python3-venv)
  has_node || missing+=(nodejs)
  runs npm --version || missing+=(npm)
  runs prometheus-redis-exporter --version || missing+=(prometheus-redis-exporter)
  runs promtool --version || missing+=(prometheus)
  echo "${missing[@]:-}"
}

packages=$(missing_packages)
[ -z "$packages" ] && exit 0

if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
  else
    say "missing: $packages"
    say "install them as root, then run this again:"
    say "  sudo apt-get install -y $packages"
    exit 1
  fi
  say "installing: $packages"
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends $packages >/dev/null
else
  say "missing: $packages (Debian/Ubuntu package names)"
  say "this is not a Debian-like system: install libclang (with clang's headers), redis-server and"
  say "redis-cli/redis-benchmark 7.0 or later, libfaketime, Python 3.10+ with venv and pip,"
  say "and Node.js 18 or later with npm, the Prometheus Redis exporter (1.45 or later) and promtool,"
  say "then run this again"
  exit 1
fi

still=$(missing_packages)
if [ -n "$still" ]; then
  say "still missing after installing: $still"
  exit 1
fi
say "installed: $packages"
