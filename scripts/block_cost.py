#!/usr/bin/env python3
"""What a request that waits (`BLOCK`) costs the server, with 10 or 10,000
others waiting on the same key: the figures behind the README's "Waiting on
the server" section.

    cargo build --release && python3 scripts/block_cost.py [N ...]

Starts its own redis-server with the module (RL_MODULE, default the release
build; RL_SERVER, default redis-server; maxclients raised). For each N
(default 10 1000 10000): N connections each send
`RL.TOKENBUCKET k 1 <rate> BLOCK 0` on one key, held by a penalty until
all N wait; from the penalty's end the bucket refills `rate` tokens a
second, and each connection sends its request again as soon as it is
answered, so N requests wait at every moment while the server serves one a
token. Measured:
- the server's CPU per served request (its on-CPU time from
  /proc/<pid>/schedstat, in ns, over a few seconds of serving, less the same
  time idle), which stays flat if serving one waiter does not cost in
  proportion to the queue;
- the memory of one waiting request (`used_memory` with the N waiting, less
  with the N connected and idle, divided by N), which counts Redis's
  blocked-client record and the module's waiter (the command's words and
  its parsed request);
- for comparison, the memory of a client waiting in `BLPOP` (what Redis
  keeps for any blocked client), and the CPU of an `INCR` sent one at a
  time at the same rate (a request that wakes the server up, as a served
  waiter does).
Python 3 standard library only (scripts/benchkit/).
"""

import os
import selectors
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.resp import encode  # noqa: E402
from benchkit.server import Server, Servers  # noqa: E402

RATE = 2000  # tokens a second: the serving rate
SECONDS = 4.0
ROUNDS = 3


def on_cpu_ns(pid):
    """Nanoseconds process `pid`'s threads spent on a CPU (schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        total += int((task / "schedstat").read_text().split()[0])
    return total


def wait_until(what, seconds, done):
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def measure(server, client, n, key):
    command = encode(["RL.TOKENBUCKET", key, "1", str(RATE), "BLOCK", "0"])
    sockets = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", server.port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sockets.append(s)
    time.sleep(0.2)
    idle_memory = int(client.info("memory")["used_memory"])
    idle_start = on_cpu_ns(server.pid)
    time.sleep(1.0)
    idle_ns_per_s = on_cpu_ns(server.pid) - idle_start

    # Hold the key a while (its only token taken at a slow rate, then a
    # penalty), so that all N are waiting at once; then the penalty ends and
    # each waiter's request (at RATE a second) is served in turn.
    client.call("RL.TOKENBUCKET", key, "1", "0.001")
    client.call("RL.TOKENBUCKET", key, "1", "0.001", "PENALTY", "5s")
    selector = selectors.DefaultSelector()
    for s in sockets:
        s.setblocking(False)
        selector.register(s, selectors.EVENT_READ)
        s.sendall(command)

    def blocked():
        return int(client.info("ratelimit").get("ratelimit_blocked_clients", 0))

    wait_until("the clients to wait", 60, lambda: blocked() >= n)
    waiting_memory = int(client.info("memory")["used_memory"])
    info = client.call("RL.INFO", key)
    until_ms = int(info[info.index("penalty_until_ms") + 1])
    seconds, micros = client.call("TIME")
    time.sleep(max(0.0, until_ms / 1000 - (int(seconds) + int(micros) / 1e6)) + 0.05)

    served = 0
    start_ns = on_cpu_ns(server.pid)
    started = time.monotonic()
    while time.monotonic() - started < SECONDS:
        for event, _ in selector.select(timeout=0.05):
            s = event.fileobj
            data = s.recv(65536)
            # Each reply is one array of five integers: count them by arrays.
            replies = data.count(b"*5\r\n")
            served += replies
            if replies:
                s.sendall(command * replies)
    elapsed = time.monotonic() - started
    cpu_ns = on_cpu_ns(server.pid) - start_ns - idle_ns_per_s * elapsed
    for s in sockets:
        selector.unregister(s)
        s.close()
    wait_until("the clients to leave", 60, lambda: blocked() == 0)
    return {
        "served_per_s": served / elapsed,
        "cpu_us_per_served": cpu_ns / max(served, 1) / 1000,
        "bytes_per_waiter": (waiting_memory - idle_memory) / n,
    }


def paced_incr(server, client, per_s):
    """The same server's CPU per `INCR` sent one at a time, `per_s` a
    second, each after the last reply: a request that finds the server
    asleep, as a served waiter does (a timer's wake-up, its reply, the
    client's next request), which costs far more than one in a busy
    pipeline."""
    idle_start = on_cpu_ns(server.pid)
    time.sleep(1.0)
    idle_ns_per_s = on_cpu_ns(server.pid) - idle_start
    sent = 0
    start_ns = on_cpu_ns(server.pid)
    started = time.monotonic()
    while time.monotonic() - started < SECONDS:
        client.call("INCR", "paced")
        sent += 1
        next_at = started + sent / per_s
        time.sleep(max(0.0, next_at - time.monotonic()))
    elapsed = time.monotonic() - started
    cpu_ns = on_cpu_ns(server.pid) - start_ns - idle_ns_per_s * elapsed
    return sent / elapsed, cpu_ns / sent / 1000


def blpop_bytes(server, client, n):
    """`used_memory` per client waiting in `BLPOP` on an empty list:
    what Redis itself keeps for a blocked client (its query buffer, its
    arguments, its place among the blocked), for comparison."""
    sockets = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(n)]
    time.sleep(0.2)
    idle = int(client.info("memory")["used_memory"])
    for s in sockets:
        s.sendall(encode(["BLPOP", "nothing", "0"]))
    wait_until(
        "the BLPOP clients to wait",
        60,
        lambda: int(client.info("clients")["blocked_clients"]) >= n,
    )
    waiting = int(client.info("memory")["used_memory"])
    for s in sockets:
        s.close()
    wait_until(
        "the BLPOP clients to leave",
        60,
        lambda: int(client.info("clients")["connected_clients"]) <= 1,
    )
    return (waiting - idle) / n


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [10, 1000, 10000]
    root = Path(__file__).resolve().parent.parent
    module = os.environ.get("RL_MODULE", str(root / "target/release/libredis_ratelimit.so"))
    binary = os.environ.get("RL_SERVER", "redis-server")
    with tempfile.TemporaryDirectory() as workdir, Servers() as servers:
        server = servers.start(
            Server(binary, [module], workdir, extra=["--maxclients", str(max(sizes) + 100)])
        )
        client = server.client()
        print(f"serving {RATE} a second for {SECONDS:.0f} s with N waiting on one key")
        print(f"{'N waiting':>10} {'served/s':>10} {'CPU us/served':>14} {'bytes/waiter':>13}")
        rates = []
        for n in sizes:
            rounds = [measure(server, client, n, f"k{n}.{i}") for i in range(ROUNDS)]
            r = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
            rates.append(r["served_per_s"])
            print(
                f"{n:>10} {r['served_per_s']:>10.0f} {r['cpu_us_per_served']:>14.1f}"
                f" {r['bytes_per_waiter']:>13.0f}"
            )
        print(
            f"for comparison, a client waiting in BLPOP: {blpop_bytes(server, client, max(sizes)):.0f} bytes"
        )
        paced = [paced_incr(server, client, statistics.median(rates)) for _ in range(ROUNDS)]
        per_s = statistics.median(p[0] for p in paced)
        us = statistics.median(p[1] for p in paced)
        print(f"for comparison, INCR one at a time, {per_s:.0f} a second: {us:.1f} us of CPU each")
        print(f"(medians of {ROUNDS} rounds)")


if __name__ == "__main__":
    main()
