#!/usr/bin/env bash
# `make dist`: the release an operator installs without Rust.
#
# Writes dist/redis-ratelimit-<version>-linux-<arch>.tar.gz (version from
# Cargo.toml, arch from `uname -m`) holding one directory of the same name:
#   libredis_ratelimit.so    the release build (target/release, `make build`)
#   redis-ratelimit.conf     a redis.conf snippet: loadmodule and the settings
#   INSTALL.md               docs/install.md: installing, upgrading, the matrix
#   README.md                the commands and their settings
#   LICENSE                  the licence (MIT, as Cargo.toml declares)
#   BUILD-INFO               version, commit, compiler, newest glibc symbol
#   SHA256SUMS               of every file above (sha256sum --check)
# and dist/SHA256SUMS of the tarball itself. The tarball is reproducible from
# the same build: files sorted, owner root, times the last commit's. The
# module path in the snippet is where docs/install.md puts the .so.
#
# tests/dist.rs (`make test-dist`) unpacks it, checks the sums and the glibc
# symbol versions, and starts every matrix server with it.
set -euo pipefail
cd "$(dirname "$0")/.."

module=${DIST_MODULE:-target/release/libredis_ratelimit.so}
install_dir=/usr/local/lib/redis-ratelimit
[ -f "$module" ] || { echo "dist: $module is missing: make build" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
arch=$(uname -m)
name="redis-ratelimit-$version-linux-$arch"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
dir="$stage/$name"
mkdir -p "$dir" dist

install -m 0755 "$module" "$dir/libredis_ratelimit.so"
install -m 0644 docs/install.md "$dir/INSTALL.md"
install -m 0644 README.md "$dir/README.md"
[ -f LICENSE ] || { echo "dist: LICENSE is missing: the tarball ships the licence text" >&2; exit 1; }
install -m 0644 LICENSE "$dir/LICENSE"

cat >"$dir/redis-ratelimit.conf" <<EOF
# redis-ratelimit $version: the module's lines for redis.conf. Copy them into
# redis.conf, or add "include /etc/redis/redis-ratelimit.conf" there.
# The path is where INSTALL.md puts the .so; any absolute path the server's
# user can read works. The settings may stand anywhere in the file: the
# server applies them once the module is loaded.
loadmodule $install_dir/libredis_ratelimit.so

# The settings, at their defaults (README.md, "Configuration, INFO and
# events"). Each can also be given after the path on the loadmodule line
# ("loadmodule ... max-keys 500") and changed at run time with
# CONFIG SET ratelimit.<name> <value>.
ratelimit.deny-events no
ratelimit.expiry-slack 1000
ratelimit.max-keys 100
ratelimit.top-keys 1000

# The module's commands have no ACL category on Redis 7.0: give
# applications a user that names them (README.md, "Access control").
# MODULE LOAD/UNLOAD at run time need enable-module-command (off by default
# since Redis 7.0); upgrading needs a restart or a failover (INSTALL.md).
EOF

glibc=$(objdump -T "$module" | grep -o 'GLIBC_[0-9.]*' | sort -u -V | tail -n 1)
{
  echo "name: redis-ratelimit"
  echo "version: $version"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "target: linux-$arch"
  echo "compiler: $(rustc --version)"
  echo "newest glibc symbol version needed: $glibc"
  echo "licence: MIT (LICENSE)"
} >"$dir/BUILD-INFO"

(cd "$dir" && sha256sum -- * >SHA256SUMS)

mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)
tarball="dist/$name.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
  -C "$stage" -cf - "$name" | gzip -n -9 >"$tarball"
(cd dist && sha256sum -- "$name.tar.gz" >SHA256SUMS)
echo "dist: $tarball ($(stat -c %s "$tarball") B; needs glibc >= ${glibc#GLIBC_})" >&2
echo "$tarball"
