#!/usr/bin/env python3
"""`make bench`: what each check costs the server, next to INCR and Lua.

Starts its own redis-server processes with the module under test (loopback,
free ports, a private temporary directory; stopped on exit, on Ctrl-C, on any
failure, and killed with this process if it dies), then, in one run:

1. memory per key (bare server): `MEMORY USAGE` of one key and the growth of
   `used_memory` over many keys, for INCR, each algorithm, the Lua twins,
   and full sliding logs;
2. server CPU per request and throughput, bare (one server): redis-benchmark
   (50 clients, 100k random keys, pipeline 32 and unpipelined) for INCR,
   the floor (FLOOR.CHECK of benches/floor/floor.c, a minimal module loaded
   beside ours: what any module answering as a check does), every check
   command, CL.THROTTLE and the Lua twins (benches/lua/*.lua, by EVALSHA),
   each right after an INCR run, in rounds; the CPU time of the server's
   main thread from /proc/<pid>/schedstat (ns) before and after each run;
3. checks on big states (bare): a 1M-entry sliding log against a small one
   (allowed and denied), RL.ACQUIRE / renew / RL.RELEASE on 100k leases
   against 10, the states built by examples/bench_states.rs;
4. with one replica attached: replication bytes per check of every command
   (small states, a 1000-entry and a 1M-entry log, 10 and 100k leases), then
   step 2 again, the primary's CPU;
5. CL.THROTTLE and INCR on redis-cell, when REDIS_CELL_MODULE names it.

The algorithms are those of src/algorithms/registry.rs, each measured from
the case it gives itself (`Algorithm::limit_of`, listed by
examples/bench_states.rs) or its case in scripts/benchkit/cases.py (a Lua
twin is optional). Prints the tables and the goals, and writes them into
docs/benchmarks.md between the markers `<!-- bench:begin -->` and
`<!-- bench:end -->`. Python 3 standard library only (scripts/benchkit/).

Environment (each also a command-line option):
  RL_MODULE          the module under test (default
                     target/release/libredis_ratelimit.so, under
                     CARGO_TARGET_DIR when that is set): run the same harness
                     on two builds to compare them
  RL_SERVER          the server binary (default redis-server)
  REDIS_CELL_MODULE  libredis_cell.so, to measure redis-cell's CL.THROTTLE too
  BENCH_QUICK=1      tiny counts and one round, to try the harness (a minute
                     or two; the figures mean little)
  BENCH_ROUNDS       rounds of the CPU and throughput figures (default 3; a
                     figure is the median of the rounds)
  BENCH_REQUESTS     requests per redis-benchmark run, unpipelined (default 20000)
  BENCH_REQUESTS_P32 requests per run at pipeline 32 (default 200000; half
                     that for the Lua scripts)
  BENCH_MEMORY_KEYS  keys per memory figure (default 100000)
  BENCH_REPS         repetitions of each big-state figure (default 500)
  BENCH_LEASES       leases of the big lease set (default 100000)
  BENCH_TIMEOUT      seconds after which the whole run gives up (default 1200)
  BENCH_SKIP         parts to leave out, comma-separated: memory, bare, big,
                     replica, cell
"""

import argparse
import datetime
import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# No __pycache__ beside the sources: the package is small and run rarely.
sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import Abort  # noqa: E402
from benchkit import cases, memory, report, states, throughput  # noqa: E402
from benchkit.cases import FLOOR  # noqa: E402
from benchkit.server import Server, Servers, start_replica_pair, wait_in_sync  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LUA_DIR = ROOT / "benches" / "lua"
PARTS = ("memory", "bare", "big", "replica", "cell")


class Counts:
    """How much of everything a run does: the defaults, or BENCH_QUICK's."""

    def __init__(self, quick):
        self.rounds = 1 if quick else 3
        self.requests = 2_000 if quick else 20_000
        self.requests_p32 = 20_000 if quick else 200_000
        self.warmup = 20_000 if quick else throughput.KEYSPACE
        self.memory_keys = 2_000 if quick else 100_000
        # Full logs of the memory figures: (entries, keys).
        self.log_fills = [(100, 200), (1000, 20)] if quick else memory.LOG_FILLS
        # Replication: keys, checks a key, checks on the medium and big states.
        self.repl_keys = 20 if quick else 100
        self.repl_checks_per_key = 5 if quick else 10
        self.repl_medium_checks = 20 if quick else 200
        self.repl_big_checks = 3 if quick else 10
        # Big states.
        self.big_log = 1_000_000
        self.leases = 10_000 if quick else 100_000
        self.big_reps = 30 if quick else 500


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self):
        left = self.end - time.monotonic()
        if left <= 0:
            raise Abort(f"the run took longer than {self.seconds} s (BENCH_TIMEOUT)")
        return left


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _raise_overtime(_signum, _frame):
    raise Abort("the run took longer than BENCH_TIMEOUT; stopped")


def env_int(name, default):
    value = os.environ.get(name, "")
    if not value:
        return default
    if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
        raise SystemExit(f"{name} must be a whole number of at least 1, not {value!r}")
    return int(value)


def default_module():
    if os.environ.get("RL_MODULE"):
        return os.environ["RL_MODULE"]
    target = os.environ.get("CARGO_TARGET_DIR") or str(ROOT / "target")
    return str(Path(target) / "release" / "libredis_ratelimit.so")


def parse_args():
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", default=quick, help="tiny counts, one round (BENCH_QUICK=1)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--requests", type=int)
    p.add_argument("--requests-p32", type=int)
    p.add_argument("--memory-keys", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--leases", type=int)
    p.add_argument("--timeout", type=int, default=env_int("BENCH_TIMEOUT", 1200))
    p.add_argument("--module", default=default_module())
    p.add_argument("--server", default=os.environ.get("RL_SERVER", "redis-server"))
    p.add_argument("--cell-module", default=os.environ.get("REDIS_CELL_MODULE", ""))
    p.add_argument("--skip", default=os.environ.get("BENCH_SKIP", ""), help=f"comma-separated: {', '.join(PARTS)}")
    p.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = p.parse_args()
    counts = Counts(args.quick)
    for option, env, attr in (
        ("rounds", "BENCH_ROUNDS", "rounds"),
        ("requests", "BENCH_REQUESTS", "requests"),
        ("requests_p32", "BENCH_REQUESTS_P32", "requests_p32"),
        ("memory_keys", "BENCH_MEMORY_KEYS", "memory_keys"),
        ("reps", "BENCH_REPS", "big_reps"),
        ("leases", "BENCH_LEASES", "leases"),
    ):
        value = getattr(args, option)
        value = env_int(env, getattr(counts, attr)) if value is None else value
        if value < 1:
            p.error(f"--{option.replace('_', '-')} must be at least 1")
        setattr(counts, attr, value)
    if counts.leases <= states.SMALL_LEASES:
        p.error(f"the big lease set must hold more than {states.SMALL_LEASES} leases")
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = args.skip - set(PARTS)
    if unknown:
        p.error(f"unknown part(s) to skip: {', '.join(sorted(unknown))} (parts: {', '.join(PARTS)})")
    if args.timeout < 1:
        p.error("the timeout must be at least 1")
    args.counts = counts
    return args


def command_line(args):
    """The command that made this run, with every setting spelled out."""
    c = args.counts
    settings = [
        *(["BENCH_QUICK=1"] if args.quick else []),
        f"BENCH_ROUNDS={c.rounds}",
        f"BENCH_REQUESTS={c.requests}",
        f"BENCH_REQUESTS_P32={c.requests_p32}",
        f"BENCH_MEMORY_KEYS={c.memory_keys}",
        f"BENCH_REPS={c.big_reps}",
        f"BENCH_LEASES={c.leases}",
        *([f"BENCH_SKIP={','.join(sorted(args.skip))}"] if args.skip else []),
        *(["RL_MODULE=" + args.module] if os.environ.get("RL_MODULE") else []),
        *(["REDIS_CELL_MODULE=" + args.cell_module] if args.cell_module else []),
    ]
    if os.environ.get("MAKELEVEL"):
        return " ".join(settings + ["make bench"])
    return " ".join(settings + [shlex.join(["scripts/bench.py"] + sys.argv[1:])])


def module_id(path):
    """A file's identity for the report: size, SHA-256 prefix, time."""
    data = Path(path).read_bytes()
    when = datetime.datetime.fromtimestamp(Path(path).stat().st_mtime, datetime.timezone.utc)
    return f"{len(data):,} B, sha256 {hashlib.sha256(data).hexdigest()[:12]}, built {when:%Y-%m-%d %H:%M} UTC"


def find_tool(tool):
    if "/" in tool:
        return Path(tool).is_file()
    return any((Path(d) / tool).is_file() for d in os.environ.get("PATH", "").split(":"))


class Run:
    """What the report says about the run itself."""

    def __init__(self, args):
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.command = command_line(args)
        self.module = args.module
        self.module_id = module_id(args.module)
        self.settings = throughput.Settings(
            args.counts.rounds, args.counts.requests, args.counts.requests_p32, args.counts.warmup
        )
        self.seconds = 0.0
        self.min_cpu_ms = None


def measure(args, results, run, builder, need_states, deadline, log):
    """Every part not skipped, into `results`; the Lua scripts' SHAs."""
    counts = args.counts
    algorithms = results.algorithms
    extra = [cases.CL_THROTTLE]
    lua = cases.LUA_TESTS
    checks = [FLOOR] + algorithms + extra + lua
    modules = [args.module, args.floor_module]
    workdir = builder.workdir
    shas = {}
    if not {"memory", "bare", "big"} <= args.skip:
        with Servers() as servers:
            server = servers.start(Server(args.server, modules, workdir, "bare"))
            log(f"bare: redis-server on 127.0.0.1:{server.port}, module {args.module}")
            client = server.client()
            results.info = client.info("server")
            results.info.update(client.info("memory"))
            shas = throughput.load_scripts(client, lua, LUA_DIR)
            throughput.check_twins(client, algorithms + extra, lua, shas)
            client.call("FLUSHALL", "SYNC")
            if "memory" not in args.skip:
                results.memory = memory.measure_memory(
                    client, shas, cases.memory_tests(algorithms), counts.memory_keys, counts.log_fills, log
                )
            client.close()
            if need_states:
                # The big lease set, started in the background: done before
                # anything that needs the CPU.
                builder.leases(None, counts.leases)
            if "bare" not in args.skip:
                phase = throughput.Phase("bare", checks)
                results.bare = throughput.run_phase(phase, server, shas, run.settings, deadline, log)
            if "big" not in args.skip:
                results.big = states.measure_big_states(server, builder, counts, deadline, log)
    if "replica" not in args.skip:
        with Servers() as servers:
            primary, replica = start_replica_pair(servers, args.server, modules, workdir)
            log(f"replica: primary on 127.0.0.1:{primary.port}, replica on {replica.port}, in sync")
            client = primary.client()
            if not results.info:
                results.info = client.info("server")
                results.info.update(client.info("memory"))
            shas = throughput.load_scripts(client, lua, LUA_DIR)
            client.close()
            results.replication = states.measure_replication(
                primary, algorithms, extra, lua, shas, builder, counts, deadline, log
            )
            phase = throughput.Phase("replica", checks)
            results.replica = throughput.run_phase(phase, primary, shas, run.settings, deadline, log)
            # The figures count only if the replica stayed attached (a
            # replica that falls too far behind is disconnected).
            if replica.process.poll() is not None:
                raise Abort(f"the replica died during the run:\n{replica.log_tail()}")
            wait_in_sync(primary, replica, timeout=min(120, deadline.left()))
    if not results.cell_skipped:
        with Servers() as servers:
            server = servers.start(Server(args.server, [args.cell_module], workdir, "redis-cell"))
            log(f"redis-cell: redis-server on 127.0.0.1:{server.port}, module {args.cell_module}")
            phase = throughput.Phase("redis-cell", [cases.CL_THROTTLE])
            results.cell = throughput.run_phase(phase, server, {}, run.settings, deadline, log)
    return shas


def main():
    args = parse_args()
    counts = args.counts
    for tool in (args.server, "redis-benchmark"):
        if not find_tool(tool):
            raise Abort(f"{tool} not found: run scripts/ensure-deps.sh (installs redis-server and redis-tools)")
    if not Path(args.module).is_file():
        raise Abort(f"{args.module} is missing: build it with `make build` (or set RL_MODULE)")
    # The floor module, built (if its source changed) with the C compiler.
    built = subprocess.run(
        [str(ROOT / "benches" / "floor" / "build.sh")], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if built.returncode != 0:
        raise Abort(f"benches/floor/build.sh failed:\n{built.stderr}")
    args.floor_module = str(ROOT / built.stdout.strip())
    # First, so that a case for no algorithm stops the bench at once.
    algorithms = cases.algorithm_tests(ROOT)
    extra = [cases.CL_THROTTLE]
    lua = cases.LUA_TESTS
    cell_module = args.cell_module
    if "cell" in args.skip:
        cell_skipped = "skipped (BENCH_SKIP)"
    elif not cell_module:
        cell_skipped = "REDIS_CELL_MODULE is not set (point it at a libredis_cell.so to compare)"
    elif not Path(cell_module).is_file():
        raise Abort(f"REDIS_CELL_MODULE={cell_module}: no such file")
    else:
        cell_skipped = None

    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    # The hard stop, should a step hang where the deadline is not checked.
    signal.signal(signal.SIGALRM, _raise_overtime)
    signal.alarm(args.timeout + 30)
    deadline = Deadline(args.timeout)
    run = Run(args)
    t0 = time.monotonic()

    def log(message):
        print(f"[{time.monotonic() - t0:6.1f}s] {message}", file=sys.stderr, flush=True)

    if cell_skipped:
        log(f"redis-cell: {cell_skipped}")
    results = report.Results()
    results.algorithms = algorithms
    results.cell_skipped = cell_skipped
    results.cell_module = f"`{cell_module}`, {module_id(cell_module)}" if not cell_skipped else None
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as workdir:
        builder = states.StateBuilder(ROOT, workdir, deadline, log)
        need_states = not {"big", "replica"} <= args.skip
        if need_states:
            builder.build()
            builder.start_leases(counts.leases)
        try:
            shas = measure(args, results, run, builder, need_states, deadline, log)
        finally:
            builder.stop()
    run.seconds = time.monotonic() - t0
    phases = [p for p in (results.bare, results.replica, results.cell) if p]
    if phases:
        run.min_cpu_ms = min(report.min_cpu_ms(p) for p in phases)
    body, met_all = report.report(run, results, algorithms, extra, lua, shas)
    print(body)
    if not args.no_write:
        report.write_report(args.output, body)
        log(f"written to {args.output}")
    if not met_all:
        log("some goals are not met (see the Goals table); the run itself succeeded")


if __name__ == "__main__":
    try:
        main()
    except Abort as e:
        print(f"bench: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("bench: interrupted; the servers are stopped", file=sys.stderr)
        sys.exit(130)
    except subprocess.SubprocessError as e:
        print(f"bench: {e}", file=sys.stderr)
        sys.exit(1)
