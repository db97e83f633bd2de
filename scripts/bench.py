#!/usr/bin/env python3
"""`make bench`: the module's commands against INCR and Lua, on one server.

Starts its own redis-server with the module (loopback, a free port, a private
temporary directory; stopped on exit, on Ctrl-C, on any failure, and killed
with this process if it dies), then, in one run:

1. memory per key: `MEMORY USAGE` of one key and the growth of `used_memory`
   over many keys, for INCR, each RL type, the Lua twins, and the sliding
   logs (RL.SLIDINGLOG and a sorted set) at 100 and 1000 entries;
2. throughput and latency: redis-benchmark (50 clients, 100k random keys)
   for INCR, every RL check command, CL.THROTTLE and the Lua twins
   (benches/lua/*.lua, by EVALSHA), unpipelined and at pipeline 32. INCR is
   measured right before each command, in several rounds: on a shared machine
   absolute numbers drift, the ratio to the INCR run beside it holds better;
3. a check that most requests were allowed: a sample of the same keys, right
   after each command's last run.

Prints the tables and writes them into docs/benchmarks.md, between the
markers `<!-- bench:begin -->` and `<!-- bench:end -->` (the rest of that file
is written by hand). Python 3 standard library only.

Environment (each also a command-line option):
  BENCH_ROUNDS       rounds of the throughput figures (default 3; the figure
                     is the median of the rounds)
  BENCH_REQUESTS     requests per redis-benchmark run, unpipelined (default 30000)
  BENCH_REQUESTS_P32 requests per run at pipeline 32 (default 200000; half
                     that for the Lua scripts, 5 to 10 times slower)
  BENCH_MEMORY_KEYS  keys per memory figure (default 100000)
  BENCH_TIMEOUT      seconds after which the whole run gives up (default 1200)
  RL_MODULE          the module (default target/release/libredis_ratelimit.so,
                     under CARGO_TARGET_DIR when that is set)
  RL_SERVER          the server binary (default redis-server)
"""

import argparse
import csv
import ctypes
import datetime
import io
import os
import platform
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA_DIR = ROOT / "benches" / "lua"
BEGIN_MARK = "<!-- bench:begin -->"
END_MARK = "<!-- bench:end -->"

CLIENTS = 50
KEYSPACE = 100_000
PIPELINES = (1, 32)
# The pipeline depth the goals are judged at.
GOAL_PIPELINE = 32
# redis-benchmark replaces this in key names with a random 12-digit number
# below KEYSPACE.
RAND = "__rand_int__"

# The throughput tests: label, command words (KEY stands for the key), the
# Lua script (a file in benches/lua) for the Lua ones, the label of the Lua
# twin for the RL ones. Parameters are realistic and the same for a command
# and its twin: capacity 100 refilled at 10 a second; limit 100 a minute.
# At 100k keys even a million requests a second give each key about 10 a
# second, so nearly every request is allowed (step 3 checks).
KEY = object()
LUA_TB = "Lua token bucket (hash)"
LUA_SC = "Lua sliding counter (hash, 2 counters)"
LUA_FW = "Lua fixed window (INCRBY + PEXPIREAT)"
LUA_SL = "Lua sliding log (sorted set)"
LUA_GCRA = "Lua GCRA (string)"


class Test:
    def __init__(self, label, prefix, words, script=None, twin=None, goal=None):
        self.label = label
        self.prefix = prefix
        self.words = words
        self.script = script
        self.twin = twin
        # The least throughput, as a ratio to INCR at pipeline 32.
        self.goal = goal

    def command(self, key, sha=None):
        """The command for `key`, EVALSHA with `sha` for a Lua test."""
        words = [key if w is KEY else w for w in self.words]
        if self.script:
            return ["EVALSHA", sha, "1"] + words
        return words

    def allowed(self, reply):
        """Whether a reply of this command allowed the request."""
        if self.label == "CL.THROTTLE":
            return reply[0] == 0
        return reply[0] == 1


INCR = Test("INCR", "b:incr:", ["INCR", KEY])
TESTS = [
    Test("RL.TOKENBUCKET", "b:tb:", ["RL.TOKENBUCKET", KEY, "100", "10"], twin=LUA_TB, goal=0.85),
    Test("RL.SLIDINGCOUNTER", "b:sc:", ["RL.SLIDINGCOUNTER", KEY, "100", "60"], twin=LUA_SC, goal=0.85),
    Test("RL.FIXEDWINDOW", "b:fw:", ["RL.FIXEDWINDOW", KEY, "100", "60"], twin=LUA_FW, goal=0.7),
    Test("RL.SLIDINGLOG", "b:sl:", ["RL.SLIDINGLOG", KEY, "100", "60"], twin=LUA_SL, goal=0.7),
    Test("RL.LEAKYBUCKET", "b:lb:", ["RL.LEAKYBUCKET", KEY, "100", "10"], twin=LUA_GCRA, goal=0.7),
    Test("RL.GCRA", "b:gcra:", ["RL.GCRA", KEY, "99", "10", "1"], twin=LUA_GCRA, goal=0.7),
    Test("CL.THROTTLE", "b:cl:", ["CL.THROTTLE", KEY, "99", "10", "1"], twin=LUA_GCRA, goal=0.7),
    Test(LUA_TB, "b:lua:tb:", [KEY, "100", "10"], script="token_bucket.lua"),
    Test(LUA_SC, "b:lua:sc:", [KEY, "100", "60"], script="sliding_counter.lua"),
    Test(LUA_FW, "b:lua:fw:", [KEY, "100", "60"], script="fixed_window.lua"),
    Test(LUA_SL, "b:lua:sl:", [KEY, "100", "60"], script="sliding_log.lua"),
    Test(LUA_GCRA, "b:lua:gcra:", [KEY, "99", "10", "1"], script="gcra.lua"),
]
BY_LABEL = {t.label: t for t in TESTS}

# Memory per key: the same commands, with parameters that keep every key for
# minutes (a slow refill, a long window) so none expires while it is counted.
# They change no byte of the state: every number is stored at a fixed size,
# and the Lua states hold the same values after one request.
MEMORY_TESTS = [
    ("INCR counter", INCR.label, ["INCR", KEY]),
    ("RL.TOKENBUCKET", None, ["RL.TOKENBUCKET", KEY, "100", "0.001"]),
    ("RL.SLIDINGCOUNTER", None, ["RL.SLIDINGCOUNTER", KEY, "100", "60"]),
    ("RL.FIXEDWINDOW", None, ["RL.FIXEDWINDOW", KEY, "100", "3600"]),
    ("RL.SLIDINGLOG, 1 request", None, ["RL.SLIDINGLOG", KEY, "100", "60"]),
    ("RL.LEAKYBUCKET", None, ["RL.LEAKYBUCKET", KEY, "100", "0.001"]),
    ("RL.GCRA / CL.THROTTLE", None, ["RL.GCRA", KEY, "99", "1", "1000"]),
    (LUA_TB, LUA_TB, [KEY, "100", "0.001"]),
    (LUA_SC, LUA_SC, [KEY, "100", "60"]),
    (LUA_FW, LUA_FW, [KEY, "100", "3600"]),
    (LUA_SL + ", 1 request", LUA_SL, [KEY, "100", "60"]),
    (LUA_GCRA, LUA_GCRA, [KEY, "99", "1", "1000"]),
]
# Full logs: (entries, keys filled). A window of an hour keeps every entry.
LOG_FILLS = [(100, 1000), (1000, 200)]
LOG_WINDOW_S = "3600"
# Requests sampled per command to check that most were allowed.
ALLOWED_SAMPLE = 2000


class Abort(Exception):
    """The run cannot go on; the message says why and what to do."""


class ReplyError(Exception):
    """An error reply from the server."""


# ---------------------------------------------------------------------------
# Processes that die with this one.


def _die_with_parent():
    """In a child before exec: be killed when this process dies, however it
    dies (Linux; elsewhere the `finally` blocks are the only guard)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _raise_overtime(_signum, _frame):
    raise Abort("the run took longer than BENCH_TIMEOUT; stopped")


class Deadline:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self):
        left = self.end - time.monotonic()
        if left <= 0:
            raise Abort(f"the run took longer than {self.seconds} s (BENCH_TIMEOUT)")
        return left


# ---------------------------------------------------------------------------
# A minimal RESP2 client, for set-up, memory figures and checks.


def _encode(args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Client:
    def __init__(self, port, timeout=60):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def close(self):
        self.reader.close()
        self.sock.close()

    def _read(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise Abort("the server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return ReplyError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.reader.read(size + 2)
            return data[:-2].decode(errors="replace")
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._read() for _ in range(size)]
        raise Abort(f"unexpected reply from the server: {line!r}")

    def pipeline(self, commands, batch=1000):
        """Sends `commands` in batches; the replies, errors as ReplyError."""
        replies = []
        for start in range(0, len(commands), batch):
            chunk = commands[start : start + batch]
            self.sock.sendall(b"".join(_encode(c) for c in chunk))
            replies.extend(self._read() for _ in chunk)
        return replies

    def call(self, *args):
        reply = self.pipeline([args])[0]
        if isinstance(reply, ReplyError):
            raise ReplyError(f"{' '.join(map(str, args))}: {reply}")
        return reply

    def info(self, section):
        text = self.call("INFO", section)
        return dict(
            line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#")
        )


# ---------------------------------------------------------------------------
# The server.


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, module, workdir):
        self.binary = binary
        self.module = module
        self.workdir = Path(workdir)
        self.process = None
        self.port = None

    def start(self):
        log_path = self.workdir / "server.log"
        for _attempt in range(5):
            self.port = _free_port()
            args = [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--protected-mode", "yes",
                "--dir", str(self.workdir),
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                # DEBUG SET-ACTIVE-EXPIRE, for the memory figures.
                "--enable-debug-command", "local",
                "--loadmodule", str(self.module),
            ]
            with open(log_path, "wb") as log:
                self.process = subprocess.Popen(
                    args,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent,
                )
            if self._wait_ready(10):
                return
            self.stop()
            text = log_path.read_text(errors="replace")
            if "Address already in use" not in text:
                raise Abort(f"redis-server did not start:\n{text[-2000:]}")
        raise Abort("redis-server found no free port in 5 tries")

    def _wait_ready(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.process.poll() is not None:
                return False
            try:
                client = Client(self.port, timeout=2)
                try:
                    if client.call("PING") == "PONG":
                        return True
                finally:
                    client.close()
            except (OSError, ReplyError, Abort):
                time.sleep(0.05)
        return False

    def stop(self):
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


# ---------------------------------------------------------------------------
# redis-benchmark.


class Sample:
    def __init__(self, rps, p50_ms, p99_ms):
        self.rps = rps
        self.p50_ms = p50_ms
        self.p99_ms = p99_ms


def benchmark_argv(port, pipeline, requests, command):
    return [
        "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(CLIENTS),
        "-n", str(requests), "-r", str(KEYSPACE), "-P", str(pipeline), "--csv",
    ] + command


def run_benchmark(port, pipeline, requests, command, deadline):
    argv = benchmark_argv(port, pipeline, requests, command)
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=min(300, deadline.left()),
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
    except subprocess.TimeoutExpired as e:
        raise Abort(f"redis-benchmark did not finish in {e.timeout:.0f} s: {shlex.join(argv)}")
    # redis-benchmark exits with 1 and prints "Error from server" on stderr
    # when a reply is an error.
    if done.returncode != 0 or "Error" in done.stderr:
        raise Abort(f"{shlex.join(argv)} failed ({done.returncode}):\n{done.stderr}{done.stdout}")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    if len(rows) != 1:
        raise Abort(f"unexpected redis-benchmark output:\n{done.stdout}")
    row = rows[0]
    return Sample(float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"]))


# ---------------------------------------------------------------------------
# The phases.


def load_scripts(client):
    shas = {}
    for test in TESTS:
        if test.script:
            source = (LUA_DIR / test.script).read_text()
            shas[test.label] = client.call("SCRIPT", "LOAD", source)
    return shas


def check_twins(client, shas):
    """Each RL command and its Lua twin answer the same on fresh keys: the
    same first reply (allowed, limit, remaining), and the same number allowed
    of limit + 1 requests at once. A mismatch means the comparison would not
    be like with like."""
    problems = []
    for test in TESTS:
        if not test.twin or test.label in ("RL.LEAKYBUCKET", "CL.THROTTLE"):
            continue
        twin = BY_LABEL[test.twin]
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


def used_memory(client):
    return int(client.info("memory")["used_memory"])


# The key whose MEMORY USAGE is reported: a 3-byte name, as in the README's
# table (a key's name counts in its MEMORY USAGE).
SAMPLE_KEY = "k:s"


def memory_names(count):
    """`count` key names: 14 bytes each for every type, so that only the
    values differ, but for the last one, SAMPLE_KEY (one key in thousands:
    no visible change to the growth per key)."""
    return [f"m:{i:012d}" for i in range(count - 1)] + [SAMPLE_KEY]


def measure_memory(client, shas, keys, log):
    """Rows: (label, MEMORY USAGE of one key, used_memory growth per key,
    keys, encoding)."""
    rows = []
    client.call("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    try:
        for label, twin, words in MEMORY_TESTS:
            test = BY_LABEL.get(twin) if twin else None
            sha = shas.get(twin) if twin else None

            def command(key, test=test, words=words, sha=sha):
                if test is not None and test.script:
                    return ["EVALSHA", sha, "1"] + [key if w is KEY else w for w in words]
                return [key if w is KEY else w for w in words]

            names = memory_names(keys)
            rows.append(_memory_of(client, label, [[command(k) for k in names]], names))
            log(f"memory: {label}: {rows[-1][1]} B, {rows[-1][2]:.1f} B a key")
        for entries, count in LOG_FILLS:
            for label, make in (
                ("RL.SLIDINGLOG", lambda k, e=entries: ["RL.SLIDINGLOG", k, str(e), LOG_WINDOW_S]),
                (LUA_SL, lambda k, e=entries: ["EVALSHA", shas[LUA_SL], "1", k, str(e), LOG_WINDOW_S]),
            ):
                names = memory_names(count)
                # One request a key a round, rounds over 1 ms apart: entries
                # at distinct milliseconds, which the module cannot merge.
                rounds = [[make(k) for k in names] for _ in range(entries)]
                row = _memory_of(client, f"{label}, {entries} entries", rounds, names, pause=0.0011)
                if label == LUA_SL:
                    cards = client.pipeline([["ZCARD", k] for k in names])
                    if any(c != entries for c in cards):
                        raise Abort(f"{label}: a sorted set does not hold {entries} entries")
                rows.append(row)
                log(f"memory: {row[0]}: {row[1]} B, {row[2]:.1f} B a key")
        # The one-request log at limit 1000, for bytes per entry as the README
        # counts them: (full - one request) / 999.
        names = memory_names(1)
        one = _memory_of(client, "one", [[["RL.SLIDINGLOG", names[0], "1000", LOG_WINDOW_S]]], names)
    finally:
        client.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        client.call("FLUSHALL", "SYNC")
    return rows, one[1]


def _memory_of(client, label, rounds, names, pause=0.0):
    """Runs `rounds` (lists of commands, each round after the previous one's
    replies and `pause` seconds) on an empty server, every request of which
    must be allowed; the row of `label`."""
    client.call("FLUSHALL", "SYNC")
    before = used_memory(client)
    for commands in rounds:
        for reply in client.pipeline(commands):
            if isinstance(reply, ReplyError):
                raise Abort(f"{label}: {reply}")
            if isinstance(reply, list) and reply[0] != 1:
                raise Abort(f"{label}: a request was denied while filling: {reply}")
        if pause:
            time.sleep(pause)
    # Let the server's cron finish growing its hash tables (incremental
    # rehashing keeps two tables for a while).
    time.sleep(0.3)
    after = used_memory(client)
    if client.call("DBSIZE") != len(names):
        raise Abort(f"{label}: {len(names)} keys were written, the server holds {client.call('DBSIZE')}")
    sample = names[-1]  # the newest key: none has expired before it
    usage = client.call("MEMORY", "USAGE", sample, "SAMPLES", "0")
    encoding = client.call("OBJECT", "ENCODING", sample)
    if usage is None:
        raise Abort(f"{label}: the key {sample} vanished before it was measured")
    return (label, usage, (after - before) / len(names), len(names), encoding)


def sample_allowed(client, test, sha):
    """The share allowed of requests on random keys of the benchmark's key
    space, sent right after the benchmark."""
    keys = [f"{test.prefix}{random.randrange(KEYSPACE):012d}" for _ in range(ALLOWED_SAMPLE)]
    replies = client.pipeline([test.command(k, sha) for k in keys])
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise Abort(f"{test.label}: {reply}")
    return sum(1 for r in replies if test.allowed(r)) / len(replies)


def bench_command(test, shas):
    """The redis-benchmark command words of a test."""
    return test.command(test.prefix + RAND, shas.get(test.label))


def requests(args, test, pipeline):
    """Requests in one redis-benchmark run of `test`."""
    if pipeline == 1:
        return args.requests
    return args.requests_p32 // 2 if test.script else args.requests_p32


def run_throughput(port, client, shas, args, deadline, log):
    """samples[(label, pipeline)] = [(Sample, the INCR Sample right before)]."""
    samples = {}
    allowed = {}
    incr_words = bench_command(INCR, shas)
    # Warm-up, not counted: most keys of every key space (63%) exist before
    # round 1.
    log("warm-up: creating most keys of each key space")
    for test in [INCR] + TESTS:
        run_benchmark(port, 32, KEYSPACE, bench_command(test, shas), deadline)
    for round_no in range(1, args.rounds + 1):
        for test in TESTS:
            for pipeline in PIPELINES:
                incr = run_benchmark(port, pipeline, requests(args, INCR, pipeline), incr_words, deadline)
                n = requests(args, test, pipeline)
                sample = run_benchmark(port, pipeline, n, bench_command(test, shas), deadline)
                samples.setdefault((test.label, pipeline), []).append((sample, incr))
                log(
                    f"round {round_no}/{args.rounds} P{pipeline:<2} {test.label}: "
                    f"{sample.rps:,.0f} ops/s, INCR {incr.rps:,.0f} ({sample.rps / incr.rps:.2f}x)"
                )
            if round_no == args.rounds:
                allowed[test.label] = sample_allowed(client, test, shas.get(test.label))
    return samples, allowed


# ---------------------------------------------------------------------------
# Figures and the report.


class Figure:
    """One command at one pipeline depth: medians over the rounds."""

    def __init__(self, pairs):
        self.rounds = len(pairs)
        self.rps = statistics.median(s.rps for s, _ in pairs)
        self.p50 = statistics.median(s.p50_ms for s, _ in pairs)
        self.p99 = statistics.median(s.p99_ms for s, _ in pairs)
        self.rps_x = statistics.median(s.rps / i.rps for s, i in pairs)
        self.p50_x = statistics.median(s.p50_ms / i.p50_ms for s, i in pairs if i.p50_ms > 0)
        self.p99_x = statistics.median(s.p99_ms / i.p99_ms for s, i in pairs if i.p99_ms > 0)


def incr_figure(samples, pipeline):
    incr = [i for (label, p), pairs in samples.items() if p == pipeline for _, i in pairs]
    return (
        statistics.median(i.rps for i in incr),
        statistics.median(i.p50_ms for i in incr),
        statistics.median(i.p99_ms for i in incr),
        len(incr),
    )


def throughput_table(samples, allowed, pipeline):
    figures = {t.label: Figure(samples[(t.label, pipeline)]) for t in TESTS}
    rps, p50, p99, runs = incr_figure(samples, pipeline)
    lines = [
        "| command | ops/s | x INCR | p50 ms | x INCR | p99 ms | x INCR | x its Lua twin | allowed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| INCR (median of {runs} runs) | {rps:,.0f} | 1 | {p50:.3f} | 1 | {p99:.3f} | 1 | | |",
    ]
    for test in TESTS:
        f = figures[test.label]
        twin = ""
        if test.twin:
            twin = f"{f.rps_x / figures[test.twin].rps_x:.1f}x"
        share = f"{allowed[test.label]:.1%}" if test.label in allowed else ""
        lines.append(
            f"| {test.label} | {f.rps:,.0f} | {f.rps_x:.2f} | {f.p50:.3f} | {f.p50_x:.2f} "
            f"| {f.p99:.3f} | {f.p99_x:.2f} | {twin} | {share} |"
        )
    return lines, figures


def goals_table(figures, memory_rows, log_bytes_per_entry):
    lines = ["| goal (pipeline 32) | measured | |", "|---|---:|---|"]
    met_all = True

    def row(goal, measured, met):
        nonlocal met_all
        met_all = met_all and met
        lines.append(f"| {goal} | {measured} | {'met' if met else '**not met**'} |")

    for test in TESTS:
        if test.goal is None:
            continue
        f = figures[test.label]
        row(f"{test.label} >= {test.goal}x INCR", f"{f.rps_x:.2f}x", f.rps_x >= test.goal)
    for test in TESTS:
        if test.twin is None:
            continue
        ratio = figures[test.label].rps_x / figures[test.twin].rps_x
        row(f"{test.label} >= 5x {test.twin}", f"{ratio:.1f}x", ratio >= 5)
    usage = {label: u for label, u, *_ in memory_rows}
    tb = usage["RL.TOKENBUCKET"]
    row("MEMORY USAGE of an RL.TOKENBUCKET key <= 64 B", f"{tb} B", tb <= 64)
    row(
        "RL.SLIDINGLOG <= 4 B an entry at limit 1000 (full)",
        f"{log_bytes_per_entry:.2f} B",
        log_bytes_per_entry <= 4,
    )
    return lines, met_all


def memory_table(rows):
    lines = [
        "| key | MEMORY USAGE, B (3-byte name) | used_memory growth per key, B | per 100k keys, MB | keys measured | encoding |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, usage, per_key, keys, encoding in rows:
        lines.append(
            f"| {label} | {usage:,} | {per_key:,.1f} | {per_key * 100_000 / 1e6:,.1f} | {keys:,} | {encoding} |"
        )
    return lines


def machine():
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores, {model}, {platform.system()} {platform.machine()}; load average at the start {load}"


def command_line(args):
    """The command that made this run, with every setting spelled out."""
    settings = (
        f"BENCH_ROUNDS={args.rounds} BENCH_REQUESTS={args.requests} "
        f"BENCH_REQUESTS_P32={args.requests_p32} BENCH_MEMORY_KEYS={args.memory_keys}"
    )
    if os.environ.get("MAKELEVEL"):
        return f"{settings} make bench"
    return f"{settings} {shlex.join(['scripts/bench.py'] + sys.argv[1:])}"


def report(args, info, samples, allowed, memory_rows, log_bytes_per_entry, started, seconds):
    out = []
    out.append(
        f"Measured {started:%Y-%m-%d %H:%M} UTC by `{command_line(args)}` "
        f"(scripts/bench.py, {seconds / 60:.1f} min)."
    )
    out.append("")
    out.append(f"- Redis {info['redis_version']} ({info.get('mem_allocator', '?')}), the release build of the module")
    out.append(f"- Machine: {machine()}")
    out.append(
        f"- Each throughput figure: `redis-benchmark -h 127.0.0.1 -p PORT -c {CLIENTS} "
        f"-r {KEYSPACE} -n N -P P --csv <command>` with N = {args.requests:,} unpipelined and "
        f"{args.requests_p32:,} at pipeline 32 ({args.requests_p32 // 2:,} for Lua); "
        f"the median of {args.rounds} rounds. Each \"x INCR\" "
        f"is the median over the rounds of the ratio to the INCR run made right before it; "
        f"\"x its Lua twin\" divides the two \"x INCR\" figures. \"allowed\" is the share "
        f"allowed of {ALLOWED_SAMPLE} requests on random keys right after the last round."
    )
    out.append("")
    lines, figures = throughput_table(samples, allowed, 32)
    out += ["### Throughput and latency, pipeline 32", ""] + lines + [""]
    lines, _ = throughput_table(samples, allowed, 1)
    out += ["### Throughput and latency, unpipelined", ""] + lines + [""]
    lines, met_all = goals_table(figures, memory_rows, log_bytes_per_entry)
    out += [f"### Goals: {'all met' if met_all else 'not all met'}", ""] + lines + [""]
    out += ["### Memory per key", ""] + memory_table(memory_rows) + [""]
    out.append(
        f"RL.SLIDINGLOG at limit 1000, full: {log_bytes_per_entry:.2f} B an entry "
        "(MEMORY USAGE of the full key less that of a one-request key, over 999)."
    )
    out.append("")
    out += ["### The commands measured", "", "| label | command (KEY: the key) |", "|---|---|"]
    for test in [INCR] + TESTS:
        words = test.command("KEY", "<sha of benches/lua/" + test.script + ">" if test.script else None)
        out.append(f"| {test.label} | `{' '.join(words)}` |")
    return "\n".join(out), met_all


def write_report(path, body):
    block = f"{BEGIN_MARK}\n{body}\n{END_MARK}"
    if path.exists():
        text = path.read_text()
        if BEGIN_MARK in text and END_MARK in text:
            head, rest = text.split(BEGIN_MARK, 1)
            _, tail = rest.split(END_MARK, 1)
            path.write_text(head + block + tail)
            return
        path.write_text(text.rstrip("\n") + "\n\n## Results\n\n" + block + "\n")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# Benchmarks\n\n## Results\n\n{block}\n")


# ---------------------------------------------------------------------------


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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 3))
    p.add_argument("--requests", type=int, default=env_int("BENCH_REQUESTS", 30_000))
    p.add_argument("--requests-p32", type=int, default=env_int("BENCH_REQUESTS_P32", 200_000))
    p.add_argument("--memory-keys", type=int, default=env_int("BENCH_MEMORY_KEYS", 100_000))
    p.add_argument("--timeout", type=int, default=env_int("BENCH_TIMEOUT", 1200))
    p.add_argument("--module", default=default_module())
    p.add_argument("--server", default=os.environ.get("RL_SERVER", "redis-server"))
    p.add_argument("--output", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = p.parse_args()
    if min(args.rounds, args.requests, args.requests_p32, args.memory_keys, args.timeout) < 1:
        p.error("counts and the timeout must be at least 1")
    return args


def main():
    args = parse_args()
    for tool in (args.server, "redis-benchmark"):
        if not any((Path(d) / tool).is_file() for d in os.environ.get("PATH", "").split(":")) and not Path(tool).is_file():
            raise Abort(f"{tool} not found: run scripts/ensure-deps.sh (installs redis-server and redis-tools)")
    if not Path(args.module).is_file():
        raise Abort(f"{args.module} is missing: build it with `make build` (or set RL_MODULE)")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    # The hard stop, should a step hang where the deadline is not checked.
    signal.signal(signal.SIGALRM, _raise_overtime)
    signal.alarm(args.timeout + 30)
    deadline = Deadline(args.timeout)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()

    def log(message):
        print(f"[{time.monotonic() - t0:6.1f}s] {message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="rl-bench-") as workdir:
        server = Server(args.server, args.module, workdir)
        try:
            server.start()
            log(f"redis-server on 127.0.0.1:{server.port}, module {args.module}")
            client = Client(server.port)
            info = client.info("server")
            info.update(client.info("memory"))
            shas = load_scripts(client)
            check_twins(client, shas)
            client.call("FLUSHALL", "SYNC")
            memory_rows, one_entry = measure_memory(client, shas, args.memory_keys, log)
            full = next(u for label, u, *_ in memory_rows if label == "RL.SLIDINGLOG, 1000 entries")
            log_bytes_per_entry = (full - one_entry) / 999
            deadline.left()
            samples, allowed = run_throughput(server.port, client, shas, args, deadline, log)
            client.close()
        finally:
            server.stop()
    body, met_all = report(
        args, info, samples, allowed, memory_rows, log_bytes_per_entry, started, time.monotonic() - t0
    )
    print(body)
    if not args.no_write:
        write_report(Path(args.output), body)
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
        print("bench: interrupted; the server is stopped", file=sys.stderr)
        sys.exit(130)
