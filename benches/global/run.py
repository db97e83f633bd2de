"""The global-limit benchmark (issue 33): processes of each language share
one leased global limit (`GlobalLimit`) on one Redis key, at a total demand
of 0.5x, 1x, 2x and 10x the limit, and a markdown table says what it cost
and what it allowed.

Usage: target/pyenv/bin/python benches/global/run.py [--processes 4]
[--duration 20] [--quick] [--limit 20000] [--algorithm tokenbucket]
[--saturate [--saturate-processes 1,2,3] [--saturate-limits 1000000000,1000000]]

With --saturate (make bench-global-saturate), the workers check in a closed
loop instead, as fast as they can, 1, 2 and 3 processes per language against
each limit of --saturate-limits; the table then says what they were served,
the server's calls (INFO commandstats) and CPU per call, and the ceiling
projected from that cost (`saturation_table`, docs/benchmarks.md).

It starts its own redis-server with the release build of the module
(target/release, `make build`), runs the Python workers (worker.py) and,
when clients/node/dist and worker.mjs exist, the Node workers (worker.mjs),
each language on its own, the workers of the contract in
/work/briefs/bench-contract.md (docs/benchmarks.md, "Global limit").

Columns:
- checks/s: checks the workers made a second (below the demand when
  they could not keep up: a worker behind its schedule catches up without
  sleeping).
- ns/check: mean wall time inside allow(), over every worker.
- calls/1k: Redis calls (grants) per 1,000 checks.
- allowed/limit: allowed per second over the limit's rate; "ideal" is a
  plain key's most over the run ((capacity + rate x T) / T for the token
  bucket, whose capacity is spent once), "bound" the published bound
  ((capacity + rate x (T + 2 x max_lease)) / T).
- under-use: at demand <= 1x, the share of attempted checks denied.
- fairness: min/max of the processes' allowed counts (1.0: equal), and in
  brackets min/max of their checks: processes that could not keep up with
  their demand are not equal, and each is served by its own demand.
- failed: requests answered by the fail mode (the workers fail closed), a
  call to Redis having failed or timed out (100 ms): a loaded machine.
- server CPU: INFO used_cpu_sys + used_cpu_user of the server, over wall time.
- ceiling: checks/s at which the server would be 10% busy: checks/s measured
  / CPU fraction x 0.10.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODULE = REPO / "target/release/libredis_ratelimit.so"
PYTHON = REPO / "target/pyenv/bin/python"
DEMANDS = (0.5, 1.0, 2.0, 10.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    def __init__(self, module: Path) -> None:
        self.dir = tempfile.mkdtemp(prefix="rl-bench-global-")
        self.port = free_port()
        self.process = subprocess.Popen(
            [
                os.environ.get("RL_SERVER", "redis-server"),
                "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no", "--loadmodule", str(module),
            ],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def commands(self) -> dict[str, tuple[int, int]]:
        """INFO commandstats (since the last CONFIG RESETSTAT): command ->
        (calls, usec), the commands of the run (INFO and CONFIG left out)."""
        out = {}
        for name, stat in self.client.info("commandstats").items():
            command = name.removeprefix("cmdstat_")
            if command not in ("info", "config"):
                out[command] = (int(stat["calls"]), int(stat["usec"]))
        return out

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def languages() -> dict[str, list[str]]:
    """The worker command of each language that can run here."""
    found = {"python": [str(PYTHON), str(HERE / "worker.py")]}
    node = shutil.which("node")
    if node and (REPO / "clients/node/dist").is_dir() and (HERE / "worker.mjs").exists():
        found["node"] = [node, str(HERE / "worker.mjs")]
    return found


@dataclass
class Row:
    lang: str
    demand: float
    workers: list[dict[str, Any]]
    wall: float
    cpu: float
    #: INFO commandstats over the run: command -> (calls, usec).
    commands: dict[str, tuple[int, int]] = field(default_factory=dict)
    limit: int = 0
    processes: int = 0


def run_one(
    server: Server, command: list[str], *, lang: str, demand: float, limit: int,
    algorithm: str, processes: int, duration: float, max_lease: float,
    saturate: bool = False,
) -> Row:  # fmt: skip
    key = f"bench:global:{lang}:{demand}:{time.time_ns()}"
    per_worker = demand * limit / processes
    start_at = time.time() + 1.5  # every worker imported and connected by then
    args = [
        "--port", str(server.port), "--key", key, "--limit", str(limit),
        "--algorithm", algorithm,
        "--duration", repr(duration), "--max-lease", repr(max_lease),
        "--start-at", repr(start_at),
    ]  # fmt: skip
    args += ["--saturate", "1"] if saturate else ["--demand", repr(per_worker)]
    procs = [
        subprocess.Popen([*command, *args], stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    # The server's CPU over the run itself (not the workers' start and close).
    time.sleep(max(0.0, start_at - time.time()))
    server.client.config_resetstat()
    cpu0, t0 = server.cpu(), time.monotonic()
    time.sleep(duration)
    cpu1, t1 = server.cpu(), time.monotonic()
    commands = server.commands()
    outs = [p.communicate(timeout=duration + 60)[0] for p in procs]
    workers = []
    for p, out in zip(procs, outs, strict=True):
        if p.returncode != 0 or not out.strip():
            raise RuntimeError(f"a {lang} worker failed (exit {p.returncode}): {out!r}")
        workers.append(json.loads(out.strip().splitlines()[-1]))
    return Row(lang, demand, workers, t1 - t0, cpu1 - cpu0, commands, limit, processes)


def table(
    rows: list[Row], *, limit: int, duration: float, algorithm: str, lease: float, idle: float
) -> str:
    # The published bound over the run (docs/clients.md): token bucket,
    # capacity + rate x (T + 2 x max_lease); fixed window, the limit per window.
    if algorithm == "tokenbucket":
        bound = (limit + limit * (duration + 2 * lease)) / duration
        ideal = (limit + limit * duration) / duration
    else:
        bound = ideal = float(limit)
    out = [
        "| lang | demand | checks/s | ns/check | calls/1k checks | allowed/s "
        + "| allowed/limit (ideal; bound) | under-use | fairness min/max (checks min/max) "
        + "| failed | refunds lost | server CPU | one-key ceiling, checks/s | net of idle |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ws = row.workers
        attempted = sum(int(w["attempted"]) for w in ws)
        allowed = [int(w["allowed"]) for w in ws]
        tried = [int(w["attempted"]) for w in ws]
        calls = sum(int(w["redis_calls"]) for w in ws)
        lost = sum(int(w["refunds_lost"]) for w in ws)
        # Requests answered by the fail mode (Redis too slow): not part of the bound.
        failed = sum(int(w.get("failed_closed", 0)) + int(w.get("failed_open", 0)) for w in ws)
        ns = sum(float(w["local_ns_per_check"]) * int(w["attempted"]) for w in ws)
        ns /= max(1, attempted)
        per_s = sum(allowed) / duration
        expected = min(row.demand * limit, ideal)
        served = sum(allowed) / (expected * duration)
        under = f"{max(0.0, 1 - served):.1%}" if row.demand <= 1 else "-"
        fair = min(allowed) / max(allowed) if max(allowed) else 1.0
        even = min(tried) / max(tried) if max(tried) else 1.0
        cpu = row.cpu / row.wall
        checks_s = attempted / duration
        ceiling = checks_s / cpu * 0.10 if cpu > 0 else float("inf")
        # The same with the idle server's own CPU taken out: what the checks'
        # calls cost the server (still linear in checks/s, so cautious).
        busy = cpu - idle
        net = checks_s / busy * 0.10 if busy > 0 else float("inf")
        per_1k = 1000 * calls / max(1, attempted)
        out.append(
            f"| {row.lang} | {row.demand:g}x | {checks_s:,.0f} | {ns:,.0f} | {per_1k:.1f} "
            + f"| {per_s:,.0f} | {per_s / limit:.3f} ({ideal / limit:.3f}; {bound / limit:.3f}) "
            + f"| {under} | {fair:.2f} ({even:.2f}) | {failed} | {lost} | {cpu:.1%} "
            + f"| {ceiling:,.0f} | {net:,.0f} |"
        )
    return "\n".join(out)


def calibrate(server: Server, *, limit: int, algorithm: str, seconds: float, idle: float) -> float:
    """The server's CPU seconds per grant call (net of idle), calls made back
    to back by one unpipelined client: enough calls that the CPU is measured
    well above the idle server's. A call comes with its reply's write and
    the next read (networking included), but a server kept busy does each
    with warm caches and no wake-up from epoll: a floor for the cost of a
    call that comes alone, as a leasing process's do."""
    key = "bench:global:calibrate"
    words = (
        ["RL.TOKENBUCKET", key, limit, limit]
        if algorithm == "tokenbucket"
        else ["RL.FIXEDWINDOW", key, limit, 1000]
    )
    calls = 0
    cpu0, t0 = server.cpu(), time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        for _ in range(100):
            server.client.execute_command(*words, "COST", 100, "UPTO")
        calls += 100
    cpu1, t1 = server.cpu(), time.monotonic()
    return max(0.0, cpu1 - cpu0 - idle * (t1 - t0)) / calls


def saturation_table(
    rows: list[Row], *, duration: float, algorithm: str, lease: float, idle: float,
    floor_s: float,
) -> str:  # fmt: skip
    """One row per language, processes and limit: what processes checking
    in a closed loop were served, what the server did, and the projected
    ceiling from the server's CPU per grant call."""
    out = [
        "| lang | processes | limit/s | checks/s | ns/check | allowed/s | allowed/limit "
        + "(ideal; bound) | starved | failed | fairness min/max | Redis calls/s (grants) "
        + "| checks per call | server CPU | usec_per_call (grant) | CPU per call, net of idle "
        + "| ceiling at 10%, from CPU per call | from the floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ws = row.workers
        limit = row.limit
        checks = sum(int(w["attempted"]) for w in ws)
        allowed = [int(w["allowed"]) for w in ws]
        ns = sum(float(w["local_ns_per_check"]) * int(w["attempted"]) for w in ws)
        ns /= max(1, checks)
        grant = "rl.tokenbucket" if algorithm == "tokenbucket" else "rl.fixedwindow"
        grants, grant_usec = row.commands.get(grant, (0, 0))
        calls = sum(c for c, _ in row.commands.values())  # grants and refunds
        per_s = sum(allowed) / duration
        if algorithm == "tokenbucket":
            ideal = (limit + limit * duration) / duration
            bound = (limit + limit * (duration + 2 * lease)) / duration
        else:
            ideal = bound = float(limit)
        fair = min(allowed) / max(allowed) if max(allowed) else 1.0
        # Denied with nothing held although the limit had some: under-use.
        starved = sum(int(w.get("starved", 0)) for w in ws) / max(1, checks)
        # Answered by the fail mode (closed: denied), a call having timed out.
        failed = sum(int(w.get("failed_closed", 0)) + int(w.get("failed_open", 0)) for w in ws)
        cpu = row.cpu / row.wall
        # The server's CPU per call: what the run added to the idle server's,
        # over every command of the run (grants and refunds).
        per_call = max(0.0, row.cpu - idle * row.wall) / max(1, calls)
        per_call_checks = checks / max(1, calls)
        ceiling = 0.10 / per_call * per_call_checks if per_call > 0 else float("inf")
        floor = 0.10 / floor_s * per_call_checks if floor_s > 0 else float("inf")
        usec = grant_usec / grants if grants else 0.0
        out.append(
            f"| {row.lang} | {row.processes} | {limit:,} | {checks / duration:,.0f} | {ns:,.0f} "
            + f"| {per_s:,.0f} | {per_s / limit:.3f} ({ideal / limit:.3f}; {bound / limit:.3f}) "
            + f"| {starved:.2%} | {failed} | {fair:.2f} "
            + f"| {calls / row.wall:,.0f} ({grants / row.wall:,.0f}) "
            + f"| {per_call_checks:,.0f} | {cpu:.2%} | {usec:.1f} µs | {per_call * 1e6:.1f} µs "
            + f"| {ceiling:,.0f} | {floor:,.0f} |"
        )
    return "\n".join(out)


def saturate(a: argparse.Namespace, duration: float) -> None:
    """--saturate: closed-loop workers, 1..N processes per language, each
    limit of --saturate-limits; then the table (see docs/benchmarks.md)."""
    server = Server(a.module)
    rows: list[Row] = []
    idle_s = 1.0 if a.quick else 5.0
    load = os.getloadavg()
    try:
        cpu0, t0 = server.cpu(), time.monotonic()
        time.sleep(idle_s)
        idle = (server.cpu() - cpu0) / (time.monotonic() - t0)
        floor_s = calibrate(server, limit=10**9, algorithm=a.algorithm, seconds=3.0, idle=idle)
        for lang, command in languages().items():
            for limit in (int(x) for x in a.saturate_limits.split(",")):
                for n in (int(x) for x in a.saturate_processes.split(",")):
                    row = run_one(
                        server, command, lang=lang, demand=0.0, limit=limit,
                        algorithm=a.algorithm, processes=n, duration=duration,
                        max_lease=a.max_lease, saturate=True,
                    )  # fmt: skip
                    rows.append(row)
                    print(f"{lang} {n} x {limit} done", file=sys.stderr, flush=True)
    finally:
        server.stop()
    after = os.getloadavg()
    print(
        f"Closed loop (--saturate), {duration:g} s each, {a.algorithm}, max_lease "
        f"{a.max_lease:g} s; the server idle used {idle:.2%} of a CPU (taken out of 'net of "
        f"idle'); one client's back-to-back grant calls cost the server {floor_s * 1e6:.1f} µs "
        f"each (the floor); load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}\n"
    )
    print(
        saturation_table(
            rows,
            duration=duration,
            algorithm=a.algorithm,
            lease=a.max_lease,
            idle=idle,
            floor_s=floor_s,
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=4, help="workers per language (4)")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per run (20)")
    p.add_argument("--quick", action="store_true", help="3-second runs")
    p.add_argument("--limit", type=int, default=20000, help="the limit per second (20000)")
    p.add_argument("--algorithm", choices=("tokenbucket", "fixedwindow"), default="tokenbucket")
    p.add_argument("--max-lease", type=float, default=1.0)
    p.add_argument("--demands", default=",".join(map(str, DEMANDS)))
    p.add_argument("--module", type=Path, default=MODULE)
    p.add_argument(
        "--saturate", action="store_true",
        help="closed-loop workers (as fast as they go) instead of paced demands",
    )  # fmt: skip
    p.add_argument("--saturate-processes", default="1,2,3", help="with --saturate (1,2,3)")
    p.add_argument(
        "--saturate-limits", default="1000000000,1000000",
        help="with --saturate: limits a second, one never reached and one reached",
    )  # fmt: skip
    a = p.parse_args()
    duration = 3.0 if a.quick else a.duration
    if not a.module.exists():
        sys.exit(f"{a.module} is missing: `make build` first")
    if a.saturate:
        saturate(a, duration)
        return
    server = Server(a.module)
    rows: list[Row] = []
    # The server's own CPU with no client (its cron): part of every row's.
    idle_s = 1.0 if a.quick else 5.0
    cpu0, t0 = server.cpu(), time.monotonic()
    time.sleep(idle_s)
    idle = (server.cpu() - cpu0) / (time.monotonic() - t0)
    try:
        for lang, command in languages().items():
            for demand in (float(d) for d in a.demands.split(",")):
                row = run_one(
                    server, command, lang=lang, demand=demand, limit=a.limit,
                    algorithm=a.algorithm, processes=a.processes, duration=duration,
                    max_lease=a.max_lease,
                )  # fmt: skip
                rows.append(row)
                print(f"{lang} {demand:g}x done", file=sys.stderr, flush=True)
    finally:
        server.stop()
    print(
        f"{a.processes} processes per language, {duration:g} s each, "
        f"{a.algorithm} {a.limit}/s (capacity {a.limit}), max_lease {a.max_lease:g} s; "
        f"the server idle (no client) used {idle:.1%} of a CPU, included below\n"
    )
    print(
        table(
            rows,
            limit=a.limit,
            duration=duration,
            algorithm=a.algorithm,
            lease=a.max_lease,
            idle=idle,
        )
    )


if __name__ == "__main__":
    main()
