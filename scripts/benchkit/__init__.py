"""The pieces of `make bench` (scripts/bench.py is the entry point).

- `resp`: a minimal RESP2 client, binary-safe, for set-up and the
  measurements made without redis-benchmark;
- `server`: redis-server processes on free loopback ports (alone, or a
  primary with one replica), each in a private directory and killed with this
  process; the server's CPU time from /proc;
- `cases`: what is measured: the module's algorithms, read from its registry,
  each with its one bench case, the Lua twins, INCR and CL.THROTTLE;
- `throughput`: redis-benchmark runs with the server CPU they cost;
- `memory`: memory per key;
- `states`: replication bytes per check, and the cost of a check on big
  states (a 1M-entry sliding log, 100k leases) against small ones;
- `report`: the tables, the goals, and docs/benchmarks.md.

Python 3 standard library only.
"""


class Abort(Exception):
    """The run cannot go on; the message says why and what to do."""
