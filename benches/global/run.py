"""The global-limit benchmark (issue 33): processes of each language share
one leased global limit (`GlobalLimit`) on one Redis key, at a total demand
of 0.5x, 1x, 2x and 10x the limit, and a markdown table says what it cost
and what it allowed.

Usage: target/pyenv/bin/python benches/global/run.py [--processes 4]
[--duration 20] [--quick] [--limit 20000] [--algorithm tokenbucket]

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
from dataclasses import dataclass
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


def run_one(
    server: Server, command: list[str], *, lang: str, demand: float, limit: int,
    algorithm: str, processes: int, duration: float, max_lease: float,
) -> Row:  # fmt: skip
    key = f"bench:global:{lang}:{demand}:{time.time_ns()}"
    per_worker = demand * limit / processes
    start_at = time.time() + 1.5  # every worker imported and connected by then
    args = [
        "--port", str(server.port), "--key", key, "--limit", str(limit),
        "--algorithm", algorithm, "--demand", repr(per_worker),
        "--duration", repr(duration), "--max-lease", repr(max_lease),
        "--start-at", repr(start_at),
    ]  # fmt: skip
    procs = [
        subprocess.Popen([*command, *args], stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    # The server's CPU over the run itself (not the workers' start and close).
    time.sleep(max(0.0, start_at - time.time()))
    cpu0, t0 = server.cpu(), time.monotonic()
    time.sleep(duration)
    cpu1, t1 = server.cpu(), time.monotonic()
    outs = [p.communicate(timeout=duration + 60)[0] for p in procs]
    workers = []
    for p, out in zip(procs, outs, strict=True):
        if p.returncode != 0 or not out.strip():
            raise RuntimeError(f"a {lang} worker failed (exit {p.returncode}): {out!r}")
        workers.append(json.loads(out.strip().splitlines()[-1]))
    return Row(lang, demand, workers, t1 - t0, cpu1 - cpu0)


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
    a = p.parse_args()
    duration = 3.0 if a.quick else a.duration
    if not a.module.exists():
        sys.exit(f"{a.module} is missing: `make build` first")
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
