#!/usr/bin/env python3
"""What one RL.ALL costs the server per key: the figures behind the default
of the setting `max-keys` (README, "Configuration, INFO and events").

    cargo build --release && python3 scripts/rl_all_cost.py [N ...]

Starts its own redis-server with the module (RL_MODULE, default the release
build; RL_SERVER, default redis-server; `max-keys` raised to 1000000), then,
for each N (default 1000 10000) and each kind of tier, times RL.ALL over N
keys with SLOWLOG, the server's own measure of a command's run (not the
network, not reading the arguments): the first call, which creates every
key, then two more on the stored states; 5 rounds on fresh keys, medians.
Last, the wall time of a call the setting refuses (4 arguments a key read,
nothing checked): what reading the arguments costs. Python 3 standard
library only (scripts/benchkit/).
"""

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.resp import encode  # noqa: E402
from benchkit.server import Server, Servers  # noqa: E402

TIERS = {
    "TOKENBUCKET 1000 1": ["TOKENBUCKET", "1000", "1"],
    "GCRA 100 1 1s": ["GCRA", "100", "1", "1s"],
    "SLIDINGLOG 100 1h": ["SLIDINGLOG", "100", "1h"],
    "SLIDINGCOUNTER 1000 1m PRECISION 1000": ["SLIDINGCOUNTER", "1000", "1m", "PRECISION", "1000"],
}
ROUNDS = 5


def slowlog_us(client, payload):
    """Runs one encoded command; its SLOWLOG time in microseconds."""
    client.call("SLOWLOG", "RESET")
    client.sock.sendall(payload)
    reply = client.read()
    if not isinstance(reply, list):
        raise SystemExit(f"RL.ALL failed: {reply}")
    return client.call("SLOWLOG", "GET", "1")[0][2]


def main():
    sizes = [int(n) for n in sys.argv[1:]] or [1000, 10000]
    root = Path(__file__).resolve().parent.parent
    module = os.environ.get("RL_MODULE", str(root / "target/release/libredis_ratelimit.so"))
    binary = os.environ.get("RL_SERVER", "redis-server")
    with tempfile.TemporaryDirectory() as workdir, Servers() as servers:
        server = servers.start(Server(binary, [module], workdir, extra=["max-keys", "1000000"]))
        client = server.client()
        client.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        print(f"{'keys':>6}  {'tiers':<40} {'creating':>18} {'stored':>18}")
        round_no = 0
        for n in sizes:
            for name, spec in TIERS.items():
                creating, stored = [], []
                for _ in range(ROUNDS):
                    round_no += 1
                    keys = [f"{{t}}:{round_no}:{i}" for i in range(n)]
                    payload = encode(["RL.ALL", n, *keys, *(spec * n)])
                    creating.append(slowlog_us(client, payload))
                    stored += [slowlog_us(client, payload) for _ in range(2)]
                    client.call("FLUSHALL")
                cells = [f"{statistics.median(v) / 1000:7.2f} ms {statistics.median(v) / n:4.2f} us" for v in (creating, stored)]
                print(f"{n:>6}  {name:<40} {cells[0]:>18} {cells[1]:>18}")
            client.call("CONFIG", "SET", "ratelimit.max-keys", "1")
            payload = encode(["RL.ALL", n, *[f"{{t}}:{i}" for i in range(n)], *(TIERS["TOKENBUCKET 1000 1"] * n)])
            walls = []
            for _ in range(9):
                start = time.perf_counter()
                client.sock.sendall(payload)
                client.read()
                walls.append(time.perf_counter() - start)
            wall = statistics.median(walls)
            print(f"{n:>6}  {'refused by max-keys (wall time)':<40} {wall * 1000:7.2f} ms {wall * 1e6 / n:4.2f} us")
            client.call("CONFIG", "SET", "ratelimit.max-keys", "1000000")


if __name__ == "__main__":
    main()
