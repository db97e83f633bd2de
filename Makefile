# The two commands of the README: `make run` and `make test`.
PORT ?= 6379
MODULE_RELEASE := target/release/libredis_ratelimit.so
MODULE_DEBUG := target/debug/libredis_ratelimit.so

.PHONY: run test deps build build-debug lint accuracy

deps:
	@scripts/ensure-deps.sh

build: deps
	cargo build --release

build-debug: deps
	cargo build

# A redis-server in the foreground with the module loaded by redis.conf.
run: build
	redis-server redis.conf --port $(PORT)

# Unit tests, then the integration tests, which start their own servers
# loading the debug build of the module (RL_MODULE overrides the path).
test: build-debug
	cargo test --all-targets

lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

# The accuracy study: rewrites docs/accuracy.md and the charts in
# docs/accuracy/ (pure Rust, no server needed; about a minute).
accuracy:
	cargo run --release --example accuracy
