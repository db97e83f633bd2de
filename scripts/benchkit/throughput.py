"""Throughput, latency and server CPU per request, with redis-benchmark.

Each run: `redis-benchmark -c 50 -r 100000 -P P --csv` on one command, with
the CPU time of the server's main thread (the one that runs the commands;
nanoseconds, from /proc/<pid>/schedstat) read right before and right after
it; CPU per request is the difference over the requests. Each command runs right after an INCR
run of the same pipelining, on the same server, in several rounds: on a
shared machine absolute figures drift, ratios to the run beside hold better.
A figure is the median over the rounds, a ratio the median of the rounds'
ratios.
"""

import csv
import io
import random
import shlex
import statistics
import subprocess
import time

from . import Abort
from .cases import INCR
from .resp import ReplyError
from .server import die_with_parent

CLIENTS = 50
KEYSPACE = 100_000
PIPELINES = (32, 1)
# The pipeline depth the goals are judged at.
GOAL_PIPELINE = 32
# redis-benchmark replaces this in key names with a random 12-digit number
# below KEYSPACE.
RAND = "__rand_int__"
# Requests sampled per command to check that most were allowed.
ALLOWED_SAMPLE = 2000


class Sample:
    """One redis-benchmark run."""

    def __init__(self, rps, p50_ms, p99_ms, requests, cpu_ns):
        self.rps = rps
        self.p50_ms = p50_ms
        self.p99_ms = p99_ms
        self.requests = requests
        self.cpu_ns = cpu_ns

    @property
    def cpu_us(self):
        """Server CPU per request, microseconds."""
        return self.cpu_ns / 1e3 / self.requests


def load_scripts(client, lua_tests, lua_dir):
    """SCRIPT LOAD of each Lua test: {label: sha}."""
    return {t.label: client.call("SCRIPT", "LOAD", (lua_dir / t.script).read_text()) for t in lua_tests}


def check_twins(client, tests, lua_tests, shas):
    """Each command and its Lua twin answer the same on fresh keys: the same
    first reply (allowed, limit, remaining), and the same number allowed of
    limit + 1 requests at once. A mismatch means the comparison would not be
    like with like."""
    by_label = {t.label: t for t in lua_tests}
    problems = []
    for test in tests:
        if not test.same_replies:
            continue
        twin = by_label[test.twin]
        runs = []
        for t, sha in ((test, None), (twin, shas[twin.label])):
            key = f"check:{t.prefix}"
            # Parameters of the twins agree word for word after the key.
            replies = client.pipeline([t.command(key, sha)] * 101)
            for reply in replies:
                if isinstance(reply, ReplyError):
                    raise Abort(f"{t.label}: {reply}")
            runs.append((replies[0][:3], sum(1 for r in replies if t.allowed(r))))
        (first, allowed), (twin_first, twin_allowed) = runs
        if first != twin_first or abs(allowed - twin_allowed) > 1:
            problems.append(
                f"{test.label} {first}, {allowed} allowed of 101; "
                f"{twin.label} {twin_first}, {twin_allowed} allowed"
            )
    if problems:
        raise Abort("Lua twins disagree with the module:\n  " + "\n  ".join(problems))


def benchmark_argv(port, pipeline, requests, command):
    return [
        "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS),
        "-n", str(requests), "-r", str(KEYSPACE), "-P", str(pipeline), "--csv",
    ] + command


def run_benchmark(server, pipeline, requests, command, deadline):
    argv = benchmark_argv(server.port, pipeline, requests, command)
    before = server.cpu_ns()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=min(300, deadline.left()),
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
    except subprocess.TimeoutExpired as e:
        raise Abort(f"redis-benchmark did not finish in {e.timeout:.0f} s: {shlex.join(argv)}")
    after = server.cpu_ns()
    # redis-benchmark exits with 1 and prints "Error from server" on stderr
    # when a reply is an error.
    if done.returncode != 0 or "Error" in done.stderr:
        raise Abort(f"{shlex.join(argv)} failed ({done.returncode}):\n{done.stderr}{done.stdout}")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    if len(rows) != 1:
        raise Abort(f"unexpected redis-benchmark output:\n{done.stdout}")
    row = rows[0]
    return Sample(
        float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"]), requests, after - before
    )


def bench_command(test, shas):
    """The redis-benchmark command words of a test."""
    return test.command(test.prefix + RAND, shas.get(test.label))


def sample_allowed(client, test, sha):
    """The share allowed of requests on random keys of the benchmark's key
    space, sent right after the benchmark."""
    keys = [f"{test.prefix}{random.randrange(KEYSPACE):012d}" for _ in range(ALLOWED_SAMPLE)]
    replies = client.pipeline([test.command(k, sha) for k in keys])
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise Abort(f"{test.label}: {reply}")
    return sum(1 for r in replies if test.allowed(r)) / len(replies)


class Settings:
    """Requests per run: `requests` unpipelined, `requests_p32` at pipeline
    32 (half that for the Lua scripts, 5 to 10 times slower); `warmup`
    requests per key space before round 1, not counted."""

    def __init__(self, rounds, requests, requests_p32, warmup):
        self.rounds = rounds
        self.requests = requests
        self.requests_p32 = requests_p32
        self.warmup = warmup

    def count(self, test, pipeline):
        if pipeline == 1:
            return self.requests
        return self.requests_p32 // 2 if test.script else self.requests_p32


class Phase:
    """The runs on one set-up: samples[(label, pipeline)] = [(Sample, the
    INCR Sample right before)], allowed[label] = share allowed."""

    def __init__(self, name, tests):
        self.name = name
        self.tests = tests
        self.samples = {}
        self.allowed = {}


def settle_tables(client, deadline, timeout=30.0):
    """Waits until no key table of database 0 is being rehashed (`DEBUG
    HTSTATS 0` names a "rehashing target" while one is): Redis moves the
    entries of a grown table over a little at a time, in the commands that
    touch it and in its cron."""
    end = time.monotonic() + min(timeout, deadline.left())
    while time.monotonic() < end:
        stats = client.call("DEBUG", "HTSTATS", "0")
        if isinstance(stats, bytes):
            stats = stats.decode()
        if "rehashing target" not in str(stats):
            return
        time.sleep(0.1)


def run_phase(phase, server, shas, settings, deadline, log):
    """Warms every key space up, then runs the rounds of `phase` on
    `server` (the primary, for a replicated set-up)."""
    incr_words = bench_command(INCR, shas)
    # Not counted: with KEYSPACE requests, most keys of every key space
    # (63%) exist before round 1.
    log(f"{phase.name}: warm-up, {settings.warmup:,} requests a key space")
    for test in [INCR] + phase.tests:
        run_benchmark(server, 32, settings.warmup, bench_command(test, shas), deadline)
    # Then one round as the measured ones make it, not counted, and the
    # server's tables left to finish growing: the key count climbs for a
    # round after the warm-up (more keys of each space exist once a round
    # has run), and when it passes a power of two Redis doubles its key
    # table and its expiry table and moves every entry over, a second or
    # two of work charged to whichever command runs then (it made one
    # command, CL.THROTTLE, read 2-3x INCR in its first two rounds while
    # RL.GCRA, the same algorithm, read 1.5x); so does the first sweep of
    # the keys the warm-up left to expire.
    log(f"{phase.name}: a round not counted, then the key tables settle")
    for test in phase.tests:
        run_benchmark(server, 32, settings.count(test, 32), bench_command(test, shas), deadline)
    client = server.client()
    try:
        settle_tables(client, deadline)
        for round_no in range(1, settings.rounds + 1):
            for test in phase.tests:
                for pipeline in PIPELINES:
                    incr = run_benchmark(server, pipeline, settings.count(INCR, pipeline), incr_words, deadline)
                    n = settings.count(test, pipeline)
                    sample = run_benchmark(server, pipeline, n, bench_command(test, shas), deadline)
                    phase.samples.setdefault((test.label, pipeline), []).append((sample, incr))
                    log(
                        f"{phase.name} round {round_no}/{settings.rounds} P{pipeline:<2} {test.label}: "
                        f"{sample.cpu_us:.2f} us CPU a request, INCR {incr.cpu_us:.2f} "
                        f"({sample.cpu_us / incr.cpu_us:.2f}x); {sample.rps:,.0f} ops/s "
                        f"({sample.rps / incr.rps:.2f}x INCR)"
                    )
                if round_no == settings.rounds:
                    phase.allowed[test.label] = sample_allowed(client, test, shas.get(test.label))
    finally:
        client.close()
    return phase


class Figure:
    """One command at one pipeline depth on one set-up: medians over the
    rounds; `*_x` are medians of the ratios to the INCR run right before."""

    def __init__(self, pairs):
        self.rounds = len(pairs)
        self.rps = statistics.median(s.rps for s, _ in pairs)
        self.p50 = statistics.median(s.p50_ms for s, _ in pairs)
        self.p99 = statistics.median(s.p99_ms for s, _ in pairs)
        self.cpu_us = statistics.median(s.cpu_us for s, _ in pairs)
        self.rps_x = statistics.median(s.rps / i.rps for s, i in pairs)
        self.cpu_x = statistics.median(s.cpu_us / i.cpu_us for s, i in pairs if i.cpu_ns > 0)
        # The least CPU time any run of this figure measured, ms.
        self.min_cpu_ms = min(min(s.cpu_ns, i.cpu_ns) for s, i in pairs) / 1e6


def figures(phase, pipeline):
    return {t.label: Figure(phase.samples[(t.label, pipeline)]) for t in phase.tests}


def incr_figure(phase, pipeline):
    """INCR over every run of that pipelining: (ops/s, CPU us, p50, p99, runs)."""
    incr = [i for (_, p), pairs in phase.samples.items() if p == pipeline for _, i in pairs]
    return (
        statistics.median(i.rps for i in incr),
        statistics.median(i.cpu_us for i in incr),
        statistics.median(i.p50_ms for i in incr),
        statistics.median(i.p99_ms for i in incr),
        len(incr),
    )
