"""One benchmark worker (benches/global/bench-contract): one process sharing
one global limit with the others through `GlobalLimit`, at a paced
open-loop demand, or with ``--saturate`` in a closed loop as fast as it can
(no pacing); prints one JSON line at the end (see run.py)."""

from __future__ import annotations

import argparse
import json
import time

from redis_ratelimit import FixedWindow, GlobalLimit, TokenBucket

import redis

#: Checks between two reads of the clock in a closed loop (--saturate).
BLOCK = 256


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--limit", type=int, required=True)
    p.add_argument("--algorithm", choices=("tokenbucket", "fixedwindow"), required=True)
    p.add_argument("--demand", type=float, default=0.0)
    p.add_argument("--saturate", type=int, default=0, help="1: a closed loop, no pacing")
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--max-lease", type=float, default=1.0)
    p.add_argument("--start-at", type=float, required=True)
    a = p.parse_args()
    limit = (
        TokenBucket(a.limit, a.limit) if a.algorithm == "tokenbucket" else FixedWindow(a.limit, 1)
    )
    client = redis.Redis(port=a.port)
    # Fail closed: what is allowed is then only what was leased, so the
    # overage measured is the lease's, never the fail mode's.
    gl = GlobalLimit(client, a.key, limit, max_lease=a.max_lease, fail_open=False)
    seconds = max(1, int(a.duration + 0.999))
    per_second = [0] * seconds
    attempted = allowed = 0
    inside_ns = 0
    period = 1.0 / a.demand if a.demand > 0 else 0.0
    # Every worker's schedule starts at --start-at, even one that got there
    # late (it catches up), so that all count over the same seconds.
    start = a.start_at
    delay = start - time.time()
    if delay > 0:
        time.sleep(delay)
    end = start + a.duration
    clock = time.perf_counter_ns
    while a.saturate:
        # Closed loop: blocks of checks back to back, the clock read once a
        # block (a clock read per check would cost more than the check).
        now = time.time()
        if now >= end:
            break
        ok = 0
        before = clock()
        for _ in range(BLOCK):
            if gl.allow():
                ok += 1
        inside_ns += clock() - before
        attempted += BLOCK
        allowed += ok
        per_second[min(seconds - 1, int(now - start))] += ok
    while not a.saturate:
        now = time.time()
        if now >= end:
            break
        due = start + attempted * period
        if due > now:
            time.sleep(due - now)  # ahead of schedule; when behind, no sleep: catch up
            continue
        before = clock()
        ok = gl.allow()
        inside_ns += clock() - before
        attempted += 1
        if ok:
            allowed += 1
            per_second[min(seconds - 1, int(now - start))] += 1
    gl.close()
    stats = gl.stats()
    print(
        json.dumps(
            {
                "lang": "python",
                "attempted": attempted,
                "allowed": allowed,
                "redis_calls": stats.calls,
                "granted": stats.granted,
                "refunded": stats.refunded,
                "refunds_lost": stats.refunds_lost,
                # Beyond the contract (optional): requests the fail mode answered.
                "failed_closed": stats.failed_closed,
                "starved": stats.starved,
                "denied": stats.denied,
                "local_ns_per_check": inside_ns / attempted if attempted else 0.0,
                "allowed_per_second": per_second,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
