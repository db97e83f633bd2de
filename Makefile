# The two commands of the README: `make run` and `make test`.
SHELL := /bin/bash
PORT ?= 6379
MODULE_RELEASE := target/release/libredis_ratelimit.so
MODULE_DEBUG := target/debug/libredis_ratelimit.so

VALKEY_DIR := target/valkey

.PHONY: run test test-python test-node test-compat test-valkey test-valgrind dist test-dist soak deps build build-debug lint accuracy bench bench-quick bench-global bench-global-saturate bench-core bench-profile fuzz

deps:
	@scripts/ensure-deps.sh

build: deps
	cargo build --release

build-debug: deps
	cargo build

# A redis-server in the foreground with the module loaded by redis.conf.
run: build
	@if (exec 3<>/dev/tcp/127.0.0.1/$(PORT)) 2>/dev/null; then \
		echo "make run: port $(PORT) is taken (a system redis-server?): try make run PORT=6380" >&2; \
		exit 1; fi
	redis-server redis.conf --port $(PORT)

# Unit tests, then the integration tests, which start their own servers
# loading the debug build of the module (RL_MODULE overrides the path), then
# the Python client's, then the Node client's.
test: build-debug
	cargo test --all-targets
	@$(MAKE) --no-print-directory test-python
	@$(MAKE) --no-print-directory test-node

# The Python client (clients/python): its lints and format (ruff), its types
# (mypy --strict), then its tests (pytest), which start their own servers
# with the debug build; all in a virtual environment inside the repository
# (target/pyenv) holding the package (editable) and the pinned test
# dependencies, made again when those change.
PYENV := target/pyenv
PYCLIENT := clients/python

$(PYENV)/installed: $(PYCLIENT)/pyproject.toml $(PYCLIENT)/requirements-test.txt
	python3 -m venv $(PYENV)
	$(PYENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-r $(PYCLIENT)/requirements-test.txt -e $(PYCLIENT)
	touch $@

test-python: build-debug $(PYENV)/installed
	cd $(PYCLIENT) && ../../$(PYENV)/bin/ruff check . && ../../$(PYENV)/bin/ruff format --check .
	cd $(PYCLIENT) && ../../$(PYENV)/bin/mypy
	cd $(PYCLIENT) && ../../$(PYENV)/bin/python -m pytest -q

# The Node client (clients/node): its dependencies installed inside the
# package from the committed package-lock.json (npm ci, nothing global; again
# when the lockfile changes), then its lints (ESLint with typescript-eslint),
# its types (tsc, strict, the tests and the example included), then its
# build (ESM + CJS + .d.ts in dist/) and its tests (node:test), which start
# their own servers and a three-node cluster with the debug build.
NODECLIENT := clients/node

$(NODECLIENT)/node_modules/.installed: $(NODECLIENT)/package-lock.json
	cd $(NODECLIENT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

test-node: build-debug $(NODECLIENT)/node_modules/.installed
	cd $(NODECLIENT) && npm run --silent lint
	cd $(NODECLIENT) && npm run --silent typecheck
	cd $(NODECLIENT) && npm test

# The compatibility matrix (docs/install.md): the integration tests on each
# server we can fetch, each binary pinned by SHA-256 and cached under
# target/: Redis 7.0 (Debian), Redis 8.2 (scripts/get-redis8.sh), Valkey 8.1
# (scripts/get-valkey.sh), Redis Stack 7.4 (scripts/get-redis-stack.sh:
# reported, not failed, where it cannot start). COMPAT_SERVERS="redis-8.2
# valkey-8.1" for some of them; prints a table of what ran where.
test-compat: build-debug
	scripts/test-compat.sh

# One column of the matrix: the integration tests against Valkey 8.1.8.
test-valkey: build-debug
	COMPAT_SERVERS=valkey-8.1 scripts/test-compat.sh

# Memory errors looked for (docs/development.md#memcheck): redis-server
# under valgrind's memcheck with the release module built with line tables
# (the code operators run; the build `make bench-profile` uses), driven by
# tests/memcheck.rs: issue 28's boundary load for 30 s (MEMCHECK_LOAD_S), 25
# rounds of DEBUG SLEEP at a waiter's deadline, the operations of
# tests/block.rs and tests/operations.rs with clients waiting, a replica
# attached. Fails on any memcheck error (invalid read, write or free, an
# uninitialised value, a definite leak) not in scripts/memcheck.supp, each
# entry of which says why, or on a waiter never answered. About 1.5 min here
# (95 s of tests when it fails), plus the build the first time (2.5 min);
# needs valgrind (apt-get install -y valgrind).
test-valgrind: deps
	scripts/memcheck.sh

# On demand: a minute of traffic over a million expiring keys against the
# release build, printing memory and error figures (tests/soak.rs). About
# 70 s, plus a release build of the test the first time.
soak: build
	RL_MODULE=$(MODULE_RELEASE) cargo test --release --test soak -- --ignored --nocapture

# The fuzz targets too (built on stable here; `make fuzz` runs them on
# nightly), so that they keep up with the code they drive.
lint:
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo fmt --check --manifest-path fuzz/Cargo.toml
	cargo clippy --manifest-path fuzz/Cargo.toml --bins -- -D warnings

# The accuracy study: rewrites docs/accuracy.md and the charts in
# docs/accuracy/ (pure Rust, no server needed; about a minute).
accuracy:
	cargo run --release --example accuracy

# Benchmarks (docs/benchmarks.md). `bench`: its own redis-servers (one bare,
# then a primary with a replica) with the release module, on free loopback
# ports: server CPU per request (the main thread's, /proc/<pid>/schedstat) and
# throughput of every check command against INCR, the floor (benches/floor/,
# a minimal C module the bench builds and loads beside ours) and Lua,
# replication bytes per check, checks on big states (a 1M-entry
# sliding log, 100k leases, built by examples/bench_states.rs) and memory per
# key, with the goals, written into docs/benchmarks.md; about 10 min plus,
# the first time, a release build of the dev-dependencies. RL_MODULE=path
# measures another build; REDIS_CELL_MODULE=path adds redis-cell;
# BENCH_ROUNDS=n for more rounds. `bench-quick`: tiny counts, one round,
# printed only: to try the harness (its figures mean little).
bench: build
	python3 scripts/bench.py

bench-quick: build
	BENCH_QUICK=1 python3 scripts/bench.py --no-write

# The leased global limit (issue 33, docs/benchmarks.md "Global limit"):
# 4 processes per language (Python; Node too when clients/node/dist and
# benches/global/worker.mjs exist) share one GlobalLimit on one key for
# 20 s at 0.5x, 1x, 2x and 10x its rate, against their own redis-server
# with the release build; prints a markdown table. About 3 min per
# language; BENCH_GLOBAL_ARGS=--quick for 3-s runs.
bench-global: build $(PYENV)/installed
	$(PYENV)/bin/python benches/global/run.py $(BENCH_GLOBAL_ARGS)

# The same workers in a closed loop (as fast as they go), 1, 2 and 3
# processes per language, a limit never reached and one reached (1M/s):
# checks served, Redis calls and the server's CPU per call, and the
# projected ceiling of one global key (docs/benchmarks.md).
bench-global-saturate: build $(PYENV)/installed
	$(PYENV)/bin/python benches/global/run.py --saturate --duration 10 $(BENCH_GLOBAL_ARGS)

# Nanoseconds per check of each algorithm core (criterion, benches/); about
# a minute, plus a release build of the dev-dependencies the first time.
bench-core:
	cargo bench --bench algorithms

# Instructions per request of INCR, the floor and RL.* under callgrind, and
# where they go inside the command (needs valgrind: apt-get install -y
# valgrind); then the guard: fails if a command costs more than 3% over the
# instructions committed in docs/benchmarks.md (PROFILE_GUARD=write commits
# new figures, PROFILE_GUARD=0 skips it).
bench-profile: deps
	scripts/profile.sh

# Fuzzing (on demand, not part of `make test`): each target of fuzz/ for
# FUZZ_SECONDS, with overflow checks on; needs the nightly toolchain, and
# installs cargo-fuzz when missing. A finding stops with the input saved in
# fuzz/artifacts/<target>/; the corpus grows in fuzz/corpus/ (not in git),
# starting from the seeds in fuzz/seeds/ and those examples/fuzz_seeds.rs
# makes of every algorithm of the registry (with the dictionary).
FUZZ_SECONDS ?= 60
FUZZ_MADE = fuzz/corpus/made
fuzz: deps
	@command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	cargo +nightly fuzz build
	mkdir -p fuzz/corpus/parse_args fuzz/corpus/decode_state fuzz/corpus/check_sequence
	rm -rf $(FUZZ_MADE) && cargo run --example fuzz_seeds -- $(FUZZ_MADE)
	nice -n 10 cargo +nightly fuzz run parse_args fuzz/corpus/parse_args fuzz/seeds/parse_args \
		$(FUZZ_MADE)/parse_args -- -max_total_time=$(FUZZ_SECONDS) -dict=$(FUZZ_MADE)/parse_args.dict
	nice -n 10 cargo +nightly fuzz run decode_state fuzz/corpus/decode_state fuzz/seeds/states \
		$(FUZZ_MADE)/states -- -max_total_time=$(FUZZ_SECONDS) -max_len=9000
	nice -n 10 cargo +nightly fuzz run check_sequence fuzz/corpus/check_sequence fuzz/seeds/states \
		$(FUZZ_MADE)/states -- -max_total_time=$(FUZZ_SECONDS) -max_len=9000

# The release an operator installs without Rust (docs/install.md): the
# release build, its redis.conf snippet, the README and every page of docs/
# (links to files it does not ship made plain text), monitoring/ (the
# Prometheus exporter's script and rules), the licence (LICENSE), BUILD-INFO
# and SHA256SUMS, in dist/redis-ratelimit-<version>-linux-<arch>.tar.gz
# (scripts/dist.sh).
dist: build
	scripts/dist.sh

# The tarball as an operator gets it (tests/dist.rs): unpacked into a
# temporary directory, its sums checked, every link of every page and every
# pointer of the conf snippet resolved inside it, the glibc symbol versions of the
# .so printed and held to Ubuntu 22.04's 2.35, and every matrix server that
# runs here started with it through its conf snippet.
test-dist: dist
	tarball=dist/redis-ratelimit-$$(sed -n 's/^version = "\(.*\)"$$/\1/p' Cargo.toml | head -n 1)-linux-$$(uname -m).tar.gz && \
	servers="$$(command -v redis-server) $$(scripts/get-redis8.sh target/redis8) $$(scripts/get-valkey.sh $(VALKEY_DIR))" && \
	RL_DIST=$$PWD/$$tarball RL_DIST_SERVERS="$$servers" cargo test --test dist -- --ignored --nocapture --test-threads 1
