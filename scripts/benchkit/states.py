"""Replication bytes per check, and what a check costs on a big state.

Replication: the growth of the primary's `master_repl_offset` (INFO
replication: every byte fed to the replication stream) over a known number
of checks sent by this harness's own client, every one of which must be
allowed, divided by that number. The keys are created beforehand, so the
bytes are those of a check on an existing key; the first write after the
server starts (which also sends a SELECT) is not counted.

Big states: a sliding log of a million entries takes a million distinct
milliseconds to build through the server, and each of 100k acquires costs
O(leases held), so both are built by `examples/bench_states.rs` (the crate's
own pure code, its own encoding) and set with `RL.SETSTATE key <state>`.
Each figure is one client, unpipelined, many repetitions: the median round
trip, and the server's own time in the command (INFO commandstats
`usec_per_call`, after CONFIG RESETSTAT), which is what the goals compare.
"""

import json
import shlex
import statistics
import subprocess
import time
from pathlib import Path

from . import Abort
from .cases import INCR
from .resp import ReplyError
from .server import die_with_parent

# The parameters of the big states and of their small counterparts.
MAX_AMOUNT = "9007199254740991"
LEASE = "1h"
LEASE_MS = 3_600_000
LOG_WINDOW = "3600"
LOG_WINDOW_MS = 3_600_000
# A log of BIG_LOG entries under a limit twice that: allowed checks.
BIG_LOG_LIMIT = 2_000_000
# A full log: denied checks.
SMALL_FULL_LIMIT = 100
# The medium log of the replication figures: 1000 entries, limit 2000.
MEDIUM_LOG = 1000
MEDIUM_LOG_LIMIT = 2000
SMALL_LEASES = 10


class StateBuilder:
    """Runs examples/bench_states (built once, release) to get encoded
    states; remembers the lease sets it built, which take a while."""

    def __init__(self, root, workdir, deadline, log):
        self.root = Path(root)
        self.workdir = Path(workdir)
        self.deadline = deadline
        self.log = log
        self.executable = None
        self.cache = {}
        # Builds running in the background: count -> (process, argv, out, started).
        self.pending = {}

    def build(self):
        """Compiles the example (the first time also the dev-dependencies,
        in release: a few minutes)."""
        argv = ["cargo", "build", "--release", "--example", "bench_states", "--message-format=json"]
        self.log(f"building examples/bench_states ({shlex.join(argv)}; the first time a few minutes)")
        try:
            done = subprocess.run(
                argv, cwd=self.root, capture_output=True, text=True, timeout=self.deadline.left(),
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise Abort("building examples/bench_states took longer than the run's BENCH_TIMEOUT")
        if done.returncode != 0:
            raise Abort(f"{shlex.join(argv)} failed:\n{done.stderr[-3000:]}")
        for line in done.stdout.splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "bench_states":
                self.executable = message.get("executable")
        if not self.executable:
            raise Abort(f"{shlex.join(argv)} named no executable for bench_states")

    def _argv(self, args, out):
        return [self.executable] + [str(a) for a in args] + ["--out", str(out)]

    def _finish(self, argv, done_returncode, stderr, out):
        if done_returncode != 0:
            raise Abort(f"{shlex.join(argv)} failed:\n{stderr[-2000:]}")
        data = out.read_bytes()
        out.unlink()
        return data

    def _run(self, args):
        out = self.workdir / "state.bin"
        argv = self._argv(args, out)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=self.deadline.left(), stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        except subprocess.TimeoutExpired:
            raise Abort(f"{shlex.join(argv)} took longer than the run's BENCH_TIMEOUT")
        return self._finish(argv, done.returncode, done.stderr, out)

    def sliding_log(self, now_ms, entries, limit):
        """A log of `entries` requests, one a millisecond, the last at
        `now_ms`, under `limit` and a window of an hour."""
        return self._run(
            ["sliding-log", "--now-ms", now_ms, "--entries", entries, "--limit", limit, "--window-ms", LOG_WINDOW_MS]
        )

    @staticmethod
    def _lease_args(now_ms, count):
        return ["leases", "--now-ms", now_ms, "--entries", count, "--limit", MAX_AMOUNT, "--lease-ms", LEASE_MS]

    def start_leases(self, count):
        """Starts building the set of `count` leases in the background, taken
        now: it takes a minute at 100k (O(count^2) through the pure API), so
        it runs while the memory figures, which do not depend on the CPU
        left to the server, are measured. `leases` collects it."""
        out = self.workdir / f"leases-{count}.bin"
        argv = self._argv(self._lease_args(int(time.time() * 1000), count), out)
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        self.pending[count] = (process, argv, out, time.monotonic())

    def stop(self):
        """Ends a background build still running (on a failure)."""
        for process, *_ in self.pending.values():
            if process.poll() is None:
                process.kill()
                process.wait()

    def leases(self, now_ms, count):
        """`count` leases of an hour, ids lease-0 ..., taken at `now_ms` (or
        when `start_leases` started); built once a run."""
        if count in self.pending:
            process, argv, out, started = self.pending.pop(count)
            if process.poll() is None:
                self.log(f"waiting for the state of {count:,} leases")
            try:
                _, stderr = process.communicate(timeout=self.deadline.left())
            except subprocess.TimeoutExpired:
                raise Abort(f"{shlex.join(argv)} took longer than the run's BENCH_TIMEOUT")
            self.cache[count] = self._finish(argv, process.returncode, stderr, out)
            self.log(f"the state of {count:,} leases is ready (started {time.monotonic() - started:.1f} s ago)")
        if count not in self.cache:
            self.cache[count] = self._run(self._lease_args(now_ms, count))
        return self.cache[count]


def server_now_ms(client):
    seconds, micros = client.call("TIME")
    return int(seconds) * 1000 + int(micros) // 1000


def allowed(reply):
    return reply[0] == 1


def denied(reply):
    return reply[0] == 0


def released(reply):
    return reply == 1


def _expect(replies, what, check):
    """Stops on an error reply, or on a reply `check` (when given) refuses."""
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise Abort(f"{what}: {reply}")
        if check is not None and not check(reply):
            raise Abort(f"{what}: unexpected reply {reply}")


def set_state(client, key, state):
    client.call("RL.SETSTATE", key, state)


# ---------------------------------------------------------------------------
# Replication bytes.


class ReplicationRow:
    def __init__(self, label, state, checks, bytes_per_check, goal):
        self.label = label
        self.state = state
        self.checks = checks
        self.bytes_per_check = bytes_per_check
        # Whether the goal of REPLICATION_GOAL_BYTES applies.
        self.goal = goal


def repl_offset(client):
    return int(client.info("replication")["master_repl_offset"])


def bytes_per_check(client, commands, what, check=allowed):
    """Replication bytes per command of `commands`, every reply of which
    `check` must accept."""
    before = repl_offset(client)
    replies = client.pipeline(commands)
    after = repl_offset(client)
    _expect(replies, what, check)
    return (after - before) / len(commands)


# The length of every key name in the replication figures: a key's name is
# part of what each check replicates.
REPL_KEY_BYTES = 16


def repl_key(group, i):
    """A key name of REPL_KEY_BYTES bytes, distinct for each (group, i)."""
    return f"r{group:02d}:{i:012d}"


def measure_replication(primary, algorithms, extra, lua, shas, builder, counts, deadline, log):
    """Rows of replication bytes per allowed check: INCR, each check command
    and Lua twin on small states, then a sliding log of 1000 and of
    `counts.big_log` entries, then an acquire on 10 and `counts.leases`
    leases."""
    client = primary.client(timeout=300)
    rows = []
    try:
        # The first write after start-up also sends SELECT: not counted.
        client.call("SET", "b:repl:first", "1")
        keys, per_key = counts.repl_keys, counts.repl_checks_per_key
        for index, test in enumerate([INCR] + algorithms + extra + lua):
            deadline.left()
            sha = shas.get(test.label)
            names = [repl_key(index, i) for i in range(keys)]
            _expect(client.pipeline([test.command(k, sha) for k in names]), test.label, None)
            commands = [test.command(k, sha) for _ in range(per_key) for k in names]
            figure = bytes_per_check(client, commands, test.label, None if test is INCR else test.allowed)
            goal = test is not INCR and not test.script
            rows.append(ReplicationRow(test.label, f"small: {keys} keys", len(commands), figure, goal))
            log(f"replication: {test.label}: {figure:.1f} B a check")
        for entries, limit, checks in (
            (MEDIUM_LOG, MEDIUM_LOG_LIMIT, counts.repl_medium_checks),
            (counts.big_log, BIG_LOG_LIMIT, counts.repl_big_checks),
        ):
            deadline.left()
            key = repl_key(90, entries)
            set_state(client, key, builder.sliding_log(server_now_ms(client), entries, limit))
            commands = [["RL.SLIDINGLOG", key, str(limit), LOG_WINDOW]] * checks
            figure = bytes_per_check(client, commands, f"RL.SLIDINGLOG on {entries:,} entries")
            rows.append(
                ReplicationRow("RL.SLIDINGLOG", f"{entries:,} entries, limit {limit:,}, window 1 h", checks, figure, True)
            )
            log(f"replication: RL.SLIDINGLOG on {entries:,} entries: {figure:,.1f} B a check")
        # Renewals (acquiring again with a held id) leave the key's size as
        # it is.
        for count, checks in ((SMALL_LEASES, counts.repl_medium_checks), (counts.leases, counts.repl_big_checks)):
            deadline.left()
            key = repl_key(91, count)
            set_state(client, key, builder.leases(server_now_ms(client), count))
            commands = [["RL.ACQUIRE", key, MAX_AMOUNT, LEASE, "ID", "lease-1"]] * checks
            figure = bytes_per_check(client, commands, f"RL.ACQUIRE on {count:,} leases")
            rows.append(ReplicationRow("RL.ACQUIRE (renew)", f"{count:,} leases", checks, figure, False))
            log(f"replication: RL.ACQUIRE renewing on {count:,} leases: {figure:,.1f} B a check")
        client.call("FLUSHALL", "SYNC")
    finally:
        client.close()
    return rows


# ---------------------------------------------------------------------------
# Big states.


class CostRow:
    """One command on a small state and on a big one."""

    def __init__(self, label, small_state, big_state, small, big):
        self.label = label
        self.small_state = small_state
        self.big_state = big_state
        # (median round trip us, server us in the command)
        self.small = small
        self.big = big

    @property
    def ratio(self):
        return self.big[1] / self.small[1] if self.small[1] > 0 else float("inf")

    @property
    def latency_ratio(self):
        return self.big[0] / self.small[0]


def timed(client, command_name, commands, what, check, setup=None):
    """Sends `commands` one at a time (each after `setup[i]`, not timed,
    when given): (median round trip us, the server's usec_per_call of
    `command_name`)."""
    client.call("CONFIG", "RESETSTAT")
    times = []
    for i, command in enumerate(commands):
        if setup:
            _expect([client.pipeline([setup[i]])[0]], what + " (set-up)", allowed)
        started = time.perf_counter()
        client.send(command)
        reply = client.read()
        times.append(time.perf_counter() - started)
        _expect([reply], what, check)
    stats = client.info("commandstats").get(f"cmdstat_{command_name.lower()}", "")
    fields = dict(f.split("=", 1) for f in stats.split(",") if "=" in f)
    if int(fields.get("calls", "0")) != len(commands):
        raise Abort(f"{what}: INFO commandstats counts {fields.get('calls')} calls of {command_name}, not {len(commands)}")
    return statistics.median(times) * 1e6, float(fields["usec_per_call"])


def measure_big_states(server, builder, counts, deadline, log):
    """Rows: a check on a sliding log (allowed on 1 entry vs on
    `counts.big_log`; denied on a small full log vs a full `counts.big_log`
    one), and RL.ACQUIRE new, RL.ACQUIRE renew, RL.RELEASE on 10 leases vs
    on `counts.leases`."""
    client = server.client(timeout=300)
    reps = counts.big_reps
    big = counts.big_log
    rows = []
    try:
        client.call("FLUSHALL", "SYNC")
        now = server_now_ms(client)
        # Allowed: `reps` logs of one entry, each checked once; one log of
        # `big` entries checked `reps` times. Same parameters.
        params = [str(BIG_LOG_LIMIT), LOG_WINDOW]
        small_keys = [f"b:big:sl:one:{i}" for i in range(reps)]
        _expect(client.pipeline([["RL.SLIDINGLOG", k] + params for k in small_keys]), "filling", allowed)
        small = timed(client, "rl.slidinglog", [["RL.SLIDINGLOG", k] + params for k in small_keys], "allowed, 1 entry", allowed)
        set_state(client, "b:big:sl:big", builder.sliding_log(now, big, BIG_LOG_LIMIT))
        deadline.left()
        # The first allowed check after the state is set grows the log's
        # buffer (decoded to its exact size) by an eighth: a copy of the
        # whole log, once per eighth of growth, O(1) amortised. Not timed
        # with the rest, which measure the steady state; logged.
        started = time.perf_counter()
        _expect([client.pipeline([["RL.SLIDINGLOG", "b:big:sl:big"] + params])[0]], "first check", allowed)
        first_ms = (time.perf_counter() - started) * 1e3
        log(f"big states: the first allowed check on {big:,} entries, growing the log's buffer: {first_ms:.1f} ms")
        large = timed(client, "rl.slidinglog", [["RL.SLIDINGLOG", "b:big:sl:big"] + params] * reps, f"allowed, {big:,} entries", allowed)
        rows.append(CostRow("RL.SLIDINGLOG, allowed", "1 entry", f"{big:,} entries", small, large))
        log(f"big states: allowed check: {small[1]:.1f} us on 1 entry, {large[1]:.1f} us on {big:,}")
        client.call("DEL", "b:big:sl:big")
        # Denied: full logs, limit SMALL_FULL_LIMIT and `big`.
        deadline.left()
        full_small = ["RL.SLIDINGLOG", "b:big:sl:full:small", str(SMALL_FULL_LIMIT), LOG_WINDOW]
        _expect(client.pipeline([full_small] * SMALL_FULL_LIMIT), "filling", allowed)
        small = timed(client, "rl.slidinglog", [full_small] * reps, "denied, small full log", denied)
        set_state(client, "b:big:sl:full:big", builder.sliding_log(server_now_ms(client), big, big))
        deadline.left()
        full_big = ["RL.SLIDINGLOG", "b:big:sl:full:big", str(big), LOG_WINDOW]
        large = timed(client, "rl.slidinglog", [full_big] * reps, f"denied, {big:,} entries", denied)
        rows.append(
            CostRow("RL.SLIDINGLOG, denied", f"full, limit {SMALL_FULL_LIMIT}", f"full, {big:,} entries", small, large)
        )
        log(f"big states: denied check: {small[1]:.1f} us on a small full log, {large[1]:.1f} us on {big:,}")
        client.call("DEL", "b:big:sl:full:big")
        # Leases: a key of SMALL_LEASES leases taken by RL.ACQUIRE, one of
        # `counts.leases` from the builder; the same parameters.
        deadline.left()
        lease_keys = {}
        small_key = "b:big:leases:small"
        acquire = ["RL.ACQUIRE", small_key, MAX_AMOUNT, LEASE, "ID"]
        _expect(client.pipeline([acquire + [f"lease-{i}"] for i in range(SMALL_LEASES)]), "filling", allowed)
        lease_keys[SMALL_LEASES] = small_key
        big_key = "b:big:leases:big"
        set_state(client, big_key, builder.leases(server_now_ms(client), counts.leases))
        lease_keys[counts.leases] = big_key
        results = {}
        for count, key in lease_keys.items():
            deadline.left()
            acquire = ["RL.ACQUIRE", key, MAX_AMOUNT, LEASE, "ID"]
            new = timed(client, "rl.acquire", [acquire + [f"new-{i}"] for i in range(reps)], "acquire", allowed)
            # Back to `count` leases.
            _expect(client.pipeline([["RL.RELEASE", key, f"new-{i}"] for i in range(reps)]), "releasing", released)
            renew = timed(client, "rl.acquire", [acquire + ["lease-1"]] * reps, "renew", allowed)
            # Each release after an acquire (not timed) of the id it gives
            # back: the key keeps `count` leases.
            ids = [f"rel-{i}" for i in range(reps)]
            release = timed(
                client, "rl.release", [["RL.RELEASE", key, i] for i in ids], "release", released,
                setup=[acquire + [i] for i in ids],
            )
            results[count] = (new, renew, release)
        for i, label in enumerate(("RL.ACQUIRE, new lease", "RL.ACQUIRE, renew (existing ID)", "RL.RELEASE")):
            row = CostRow(
                label, f"{SMALL_LEASES} leases", f"{counts.leases:,} leases",
                results[SMALL_LEASES][i], results[counts.leases][i],
            )
            rows.append(row)
            log(f"big states: {label}: {row.small[1]:.1f} us on {SMALL_LEASES} leases, {row.big[1]:.1f} us on {counts.leases:,}")
        client.call("FLUSHALL", "SYNC")
    finally:
        client.close()
    return rows

