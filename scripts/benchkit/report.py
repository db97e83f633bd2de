"""The report: goals, tables, and docs/benchmarks.md.

The tables go between the markers `<!-- bench:begin -->` and
`<!-- bench:end -->` of docs/benchmarks.md; the rest of that file is
written by hand."""

import os
import platform
from pathlib import Path

from .cases import BIG_STATE_GOAL, FLOOR, FLOOR_LABEL, INCR, REPLICATION_GOAL_BYTES
from .memory import FULL_LOG_LABEL
from .states import REPL_KEY_BYTES
from .throughput import ALLOWED_SAMPLE, CLIENTS, GOAL_PIPELINE, KEYSPACE, figures, incr_figure

BEGIN_MARK = "<!-- bench:begin -->"
END_MARK = "<!-- bench:end -->"


class Results:
    """Everything one run measured; a part not run stays None."""

    def __init__(self):
        self.info = {}
        self.algorithms = []  # the registry's, as cases.Test
        self.memory = None  # (rows, bytes per entry of a full 1000-entry log)
        self.bare = None  # throughput.Phase
        self.replica = None
        self.cell = None
        self.cell_skipped = None  # why redis-cell was not measured
        self.cell_module = None
        self.replication = None  # [states.ReplicationRow]
        self.big = None  # [states.CostRow]


class Goals:
    def __init__(self):
        self.lines = ["| goal | measured | |", "|---|---:|---|"]
        self.met_all = True
        self.missing = []

    def row(self, goal, measured, met):
        self.met_all = self.met_all and met
        self.lines.append(f"| {goal} | {measured} | {'met' if met else '**not met**'} |")

    def not_measured(self, what):
        self.missing.append(what)


def goals(results, algorithms, extra):
    """The product's goals, each met or not with the measured figure."""
    g = Goals()
    checks = algorithms + extra
    for phase, setup in ((results.bare, "bare"), (results.replica, "one replica, primary's CPU")):
        if not phase:
            g.not_measured(f"server CPU, {setup}")
            continue
        f = figures(phase, GOAL_PIPELINE)
        for test in checks:
            if test.cpu_goal is not None:
                x = floor_x(f, test.label)
                g.row(
                    f"{test.label}: server CPU a check <= {test.cpu_goal}x the floor's ({setup}, P{GOAL_PIPELINE})",
                    f"{x:.2f}x",
                    x <= test.cpu_goal,
                )
    if results.replication:
        for row in results.replication:
            if row.goal:
                g.row(
                    f"{row.label} ({row.state}): replication <= {REPLICATION_GOAL_BYTES} B a check",
                    f"{row.bytes_per_check:,.1f} B",
                    row.bytes_per_check <= REPLICATION_GOAL_BYTES,
                )
    else:
        g.not_measured("replication bytes")
    if results.big:
        for row in results.big:
            g.row(
                f"{row.label}: on {row.big_state} <= {BIG_STATE_GOAL:g}x on {row.small_state} (server time in the command)",
                f"{row.ratio:,.2f}x ({row.big[1]:,.1f} vs {row.small[1]:,.1f} us)",
                row.ratio <= BIG_STATE_GOAL,
            )
    else:
        g.not_measured("big states")
    if results.memory:
        rows, per_entry = results.memory
        by_label = {r.label: r for r in rows}
        tb, lua = by_label.get("RL.TOKENBUCKET"), by_label.get("Lua token bucket (hash)")
        if tb:
            g.row("MEMORY USAGE of an RL.TOKENBUCKET key <= 64 B", f"{tb.usage} B", tb.usage <= 64)
        if tb and lua:
            g.row(
                "used_memory growth per RL.TOKENBUCKET key <= a Lua hash token bucket's",
                f"{tb.per_key:.1f} B vs {lua.per_key:.1f} B",
                tb.per_key <= lua.per_key,
            )
        if per_entry is not None:
            g.row("RL.SLIDINGLOG <= 4 B an entry at limit 1000 (full)", f"{per_entry:.2f} B", per_entry <= 4)
    else:
        g.not_measured("memory per key")
    return g


def floor_x(figs, label):
    """A command's CPU as a ratio to the floor's: the ratio of their ratios
    to the INCR runs beside them, same server, same rounds."""
    return figs[label].cpu_x / figs[FLOOR_LABEL].cpu_x


def throughput_table(phase, pipeline):
    figs = figures(phase, pipeline)
    rps, cpu, p50, p99, runs = incr_figure(phase, pipeline)
    has_floor = FLOOR_LABEL in figs
    lines = [
        "| command | server CPU us a request | x INCR | x the floor | ops/s | x INCR | p50 ms | p99 ms | CPU x its Lua twin's | allowed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| INCR (median of {runs} runs) | {cpu:.3f} | 1 | "
        f"{f'{1 / figs[FLOOR_LABEL].cpu_x:.2f}' if has_floor else ''} | {rps:,.0f} | 1 | {p50:.3f} | {p99:.3f} | | |",
    ]
    for test in phase.tests:
        f = figs[test.label]
        twin = f"{f.cpu_x / figs[test.twin].cpu_x:.2f}" if test.twin in figs else ""
        share = f"{phase.allowed[test.label]:.1%}" if test.label in phase.allowed else ""
        fx = f"{floor_x(figs, test.label):.2f}" if has_floor else ""
        lines.append(
            f"| {test.label} | {f.cpu_us:.3f} | {f.cpu_x:.2f} | {fx} | {f.rps:,.0f} | {f.rps_x:.2f} "
            f"| {f.p50:.3f} | {f.p99:.3f} | {twin} | {share} |"
        )
    return lines


def min_cpu_ms(phase):
    return min(f.min_cpu_ms for p in (1, 32) for f in figures(phase, p).values())


def cell_table(results):
    ours, cell = results.bare, results.cell
    lines = [
        "| pipeline | ours: CL.THROTTLE CPU x INCR | redis-cell: CL.THROTTLE CPU x INCR | ours: CPU us a request | redis-cell: CPU us a request | ours: ops/s x INCR | redis-cell: ops/s x INCR |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pipeline in (32, 1):
        o = figures(ours, pipeline)["CL.THROTTLE"] if ours else None
        c = figures(cell, pipeline)["CL.THROTTLE"]
        lines.append(
            f"| {pipeline} | {f'{o.cpu_x:.2f}' if o else ''} | {c.cpu_x:.2f} | {f'{o.cpu_us:.2f}' if o else ''} "
            f"| {c.cpu_us:.2f} | {f'{o.rps_x:.2f}' if o else ''} | {c.rps_x:.2f} |"
        )
    return lines


def replication_table(rows):
    lines = ["| command | state | checks | replication bytes a check |", "|---|---|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.label} | {row.state} | {row.checks:,} | {row.bytes_per_check:,.1f} |")
    return lines


def big_table(rows):
    lines = [
        "| command | small state | big state | server us in the command, small | big | x | round trip us (median), small | big | x |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.label} | {r.small_state} | {r.big_state} | {r.small[1]:,.1f} | {r.big[1]:,.1f} | {r.ratio:,.2f} "
            f"| {r.small[0]:,.1f} | {r.big[0]:,.1f} | {r.latency_ratio:,.2f} |"
        )
    return lines


def memory_table(rows):
    lines = [
        "| key | MEMORY USAGE, B (3-byte name) | used_memory growth per key, B | per 100k keys, MB | keys measured | encoding |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.label} | {r.usage:,} | {r.per_key:,.1f} | {r.per_key * 100_000 / 1e6:,.1f} | {r.keys:,} | {r.encoding} |"
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


def report(run, results, algorithms, extra, lua, shas):
    """The Markdown of the results block, and whether every goal measured
    was met. `run`: started, seconds, command, module, settings."""
    out = [
        f"Measured {run.started:%Y-%m-%d %H:%M} UTC by `{run.command}` (scripts/bench.py, {run.seconds / 60:.1f} min).",
        "",
        f"- Redis {results.info.get('redis_version', '?')} ({results.info.get('mem_allocator', '?')}); "
        f"module under test: `{run.module}` ({run.module_id})",
        f"- Machine: {machine()}",
        "- Server CPU: the time on a CPU of the server's main thread (the one that runs every command), in "
        "nanoseconds from /proc/<pid>/schedstat, read right before and after each redis-benchmark run, over its "
        "requests"
        + (f"; the least CPU time any run measured: {run.min_cpu_ms:,.1f} ms" if run.min_cpu_ms is not None else "")
        + ". Each \"x INCR\" is the median over the rounds of the ratio to the INCR run made right before it "
        "on the same server; \"x the floor\" is a command's \"x INCR\" over the floor's (`FLOOR.CHECK`, "
        "benches/floor/floor.c: open the key, read and write a 32-byte value of its own type, set an expiry, "
        "reply five integers, replicate verbatim), measured in the same rounds.",
        f"- Each run: `redis-benchmark -h 127.0.0.1 -p PORT -c {CLIENTS} -r {KEYSPACE} -n N -P P --csv <command>` "
        f"with N = {run.settings.requests:,} unpipelined and {run.settings.requests_p32:,} at pipeline 32 "
        f"({run.settings.requests_p32 // 2:,} for Lua); {run.settings.rounds} round(s), after a warm-up that creates "
        f"most keys and one round at pipeline 32 not counted, the server's key tables then left to finish growing "
        f"(`DEBUG HTSTATS 0`). \"allowed\": the share allowed of {ALLOWED_SAMPLE} requests on random keys after the last round.",
        "",
    ]
    g = goals(results, algorithms, extra)
    title = "all met" if g.met_all else "not all met"
    if g.missing:
        title += f" (not measured: {', '.join(g.missing)})"
    out += [f"### Goals: {title}", ""] + g.lines + [""]
    for phase, name in ((results.bare, "bare (one server)"), (results.replica, "one replica attached (the primary's CPU)")):
        if phase is None:
            continue
        for pipeline in (32, 1):
            depth = f"pipeline {pipeline}" if pipeline > 1 else "unpipelined"
            out += [f"### Server CPU and throughput, {name}, {depth}", ""] + throughput_table(phase, pipeline) + [""]
    out += ["### CL.THROTTLE against redis-cell", ""]
    if results.cell:
        out += [
            f"redis-cell ({results.cell_module}) on its own server (it defines CL.THROTTLE too), INCR run before each "
            "CL.THROTTLE run there as here; same parameters, same rounds.",
            "",
        ] + cell_table(results) + [""]
    else:
        out += [f"Not measured: {results.cell_skipped}", ""]
    if results.replication:
        out += [
            "### Replication bytes a check",
            "",
            "Growth of the primary's `master_repl_offset` over checks sent by one client (every one allowed), "
            f"on keys created beforehand, divided by the checks. Every key name is {REPL_KEY_BYTES} bytes long "
            "(a name is part of what a check replicates); a small state is a key checked a few times.",
            "",
        ] + replication_table(results.replication) + [""]
    if results.big:
        out += [
            "### Checks on big states",
            "",
            "One client, unpipelined, on one server without replica. Server us in the command: INFO commandstats "
            "`usec_per_call` of that command over the repetitions (the goals compare it); round trip: the median "
            "seen by the client (Python), which adds a constant of its own. RL.RELEASE is measured after an "
            "RL.ACQUIRE (not counted) of the id it releases, so the key keeps its size.",
            "",
        ] + big_table(results.big) + [""]
    if results.memory:
        rows, per_entry = results.memory
        out += ["### Memory per key", ""] + memory_table(rows) + [""]
        if per_entry is not None:
            out += [
                f"{FULL_LOG_LABEL.split(',')[0]} at limit 1000, full: {per_entry:.2f} B an entry "
                "(MEMORY USAGE of the full key less that of a one-request key, over 999).",
                "",
            ]
    out += ["### The commands measured", "", "| label | command (KEY: the key) |", "|---|---|"]
    for test in [INCR, FLOOR] + algorithms + extra + lua:
        sha = f"<sha of benches/lua/{test.script}>" if test.script else None
        out.append(f"| {test.label} | `{' '.join(test.command('KEY', sha))}` |")
    return "\n".join(out), g.met_all


def write_report(path, body):
    block = f"{BEGIN_MARK}\n{body}\n{END_MARK}"
    path = Path(path)
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
