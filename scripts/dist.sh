#!/usr/bin/env bash
# `make dist`: the release an operator installs without Rust.
#
# Writes dist/redis-ratelimit-<version>-linux-<arch>.tar.gz (version from
# Cargo.toml, arch from `uname -m`) holding one directory of the same name,
# which an operator can use on its own, without the repository:
#   libredis_ratelimit.so    the release build (target/release, `make build`)
#   redis-ratelimit.conf     a redis.conf snippet: loadmodule and the settings
#   README.md                the repository's README
#   INSTALL.md               where to start: docs/install.md and operations.md
#   docs/                    every page of docs/ (install, operations: settings,
#                            INFO, events, maxmemory, persistence, replication,
#                            data types, ACL, upgrading; the commands...) and
#                            its charts; links to files outside the tarball
#                            (the clients' READMEs, fuzz/) become plain text
#                            (scripts/dist-links.py)
#   monitoring/              the exporter's Lua script, the Prometheus rules
#                            and their promtool tests (docs/operations.md)
#   LICENSE                  the licence (MIT, as Cargo.toml declares)
#   BUILD-INFO               version, commit, compiler, newest glibc symbol
#   SHA256SUMS               of every file above (sha256sum --check)
# and dist/SHA256SUMS of the tarball itself. The tarball is reproducible from
# the same build: files sorted, owner root, times the last commit's. The
# module path in the snippet is where docs/install.md puts the .so.
#
# tests/dist.rs (`make test-dist`) unpacks it, checks the sums, that every
# link of every page resolves inside it, the glibc symbol versions, and
# starts every matrix server with it.
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
install -m 0644 README.md "$dir/README.md"
install -d -m 0755 "$dir/docs/accuracy" "$dir/monitoring"
install -m 0644 docs/*.md "$dir/docs/"
install -m 0644 docs/accuracy/*.svg "$dir/docs/accuracy/"
install -m 0644 monitoring/* "$dir/monitoring/"
cat >"$dir/INSTALL.md" <<'START'
# redis-ratelimit: start here

- [docs/install.md](docs/install.md): the supported servers, installing this
  module on a server, checking it, upgrading, removing it.
- [docs/operations.md](docs/operations.md): running it: the settings, `INFO
  ratelimit` and Prometheus, events, `maxmemory`, persistence, replication, the
  data types (to delete before removing the module), access control.
- [docs/commands.md](docs/commands.md): every command, reply and error.
- `redis-ratelimit.conf`: the lines for redis.conf; `monitoring/`: the
  Prometheus exporter's script and the alerting rules.
START
python3 scripts/dist-links.py "$dir"
[ -f LICENSE ] || { echo "dist: LICENSE is missing: the tarball ships the licence text" >&2; exit 1; }
install -m 0644 LICENSE "$dir/LICENSE"

cat >"$dir/redis-ratelimit.conf" <<EOF
# redis-ratelimit $version: the module's lines for redis.conf. Copy them into
# redis.conf, or add "include /etc/redis/redis-ratelimit.conf" there.
# The path is where docs/install.md puts the .so; any absolute path the server's
# user can read works. The settings may stand anywhere in the file: the
# server applies them once the module is loaded.
loadmodule $install_dir/libredis_ratelimit.so

# The settings, at their defaults (docs/operations.md#configuration; what
# the module reports: docs/operations.md#info-ratelimit). Each can also be
# given after the path on the loadmodule line
# ("loadmodule ... max-keys 500") and changed at run time with
# CONFIG SET ratelimit.<name> <value>.
ratelimit.deny-events no
ratelimit.expiry-slack 1000
ratelimit.max-keys 100
ratelimit.top-keys 1000

# The module's commands have no ACL category on Redis 7.0: give
# applications a user that names them (docs/operations.md#access-control).
# MODULE LOAD/UNLOAD at run time need enable-module-command (off by default
# since Redis 7.0); upgrading needs a restart or a failover
# (docs/install.md#upgrading).
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

(cd "$dir" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum -- >SHA256SUMS)

mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)
tarball="dist/$name.tar.gz"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
  -C "$stage" -cf - "$name" | gzip -n -9 >"$tarball"
(cd dist && sha256sum -- "$name.tar.gz" >SHA256SUMS)
echo "dist: $tarball ($(stat -c %s "$tarball") B; needs glibc >= ${glibc#GLIBC_})" >&2
echo "$tarball"
