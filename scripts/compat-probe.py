#!/usr/bin/env python3
"""What differs between the servers of the compatibility matrix, as the
module sees it: starts each given server (name=binary) with the module on a
free loopback port, asks it the same questions and prints one table, a row a
question, a column a server (docs/install.md quotes it).

    scripts/compat-probe.py [--module PATH] redis-7.0=redis-server \\
        redis-8.2=target/redis8/redis-server valkey-8.1=target/valkey/valkey-server

Questions: the INFO server fields that name the server and its version; the
other modules it loads by itself; what MODULE UNLOAD answers; whether
COMMAND DOCS and COMMAND INFO describe RL.TOKENBUCKET identically; the reply
types of a check and of RL.INFO under RESP3, and how a RESP3 double is
written; whether a check invalidates a key a tracking client read
(client-side caching); MEMORY USAGE and OBJECT ENCODING of one token bucket
key. Python 3 standard library only; RESP2 from scripts/benchkit, a small
RESP3 reader here.
"""

import argparse
import hashlib
import socket
import sys
import tempfile
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import Abort  # noqa: E402
from benchkit.resp import ReplyError, encode  # noqa: E402
from benchkit.server import Server, Servers  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class Resp3:
    """Replies as (type character, value): enough to see the shapes."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.reader = self.sock.makefile("rb")

    def close(self):
        self.reader.close()
        self.sock.close()

    def read(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise Abort("the server closed the connection")
        kind, rest = chr(line[0]), line[1:-2].decode()
        if kind in "$=!":
            size = int(rest)
            if size < 0:
                return (kind, None)
            return (kind, self.reader.read(size + 2)[:-2].decode(errors="replace"))
        if kind in "*~>":
            return (kind, [self.read() for _ in range(int(rest))])
        if kind == "%":
            return (kind, [(self.read(), self.read()) for _ in range(int(rest))])
        return (kind, rest)

    def call(self, *args):
        self.sock.sendall(encode(args))
        return self.read()


def digest(value):
    return hashlib.sha256(repr(value).encode()).hexdigest()[:10]


def probe(server):
    answers = {}
    c = server.client(timeout=10)
    info = c.info("server")
    for field in ("redis_version", "server_name", "valkey_version", "redis_mode", "server_mode"):
        answers[f"INFO server `{field}`"] = info.get(field, "(absent)")
    modules = c.call("MODULE", "LIST")
    others = sorted(m[1] for m in modules if m[1] != "ratelimit")
    answers["modules loaded besides ours"] = ", ".join(others) or "none"
    for when in ("no keys", "a key of its type"):
        if when != "no keys":
            c.call("RL.TOKENBUCKET", "k", 10, 1)
        unload = c.pipeline([["MODULE", "UNLOAD", "ratelimit"]])[0]
        answers[f"MODULE UNLOAD ratelimit ({when})"] = (
            str(unload) if isinstance(unload, ReplyError) else f"accepted: {unload}"
        )
    docs = c.call("COMMAND", "DOCS", "rl.tokenbucket")
    answers["COMMAND DOCS rl.tokenbucket (digest of the reply)"] = digest(docs)
    fields = sorted({arg[i] for arg in docs[1][docs[1].index("arguments") + 1] for i in range(0, len(arg), 2)})
    answers["COMMAND DOCS rl.tokenbucket: fields of an argument"] = " ".join(fields)
    cinfo = c.call("COMMAND", "INFO", "rl.tokenbucket")
    answers["COMMAND INFO rl.tokenbucket (digest of the reply)"] = digest(cinfo)
    answers["COMMAND INFO rl.tokenbucket: flags; ACL categories"] = (
        f"{' '.join(cinfo[0][2])}; {' '.join(cinfo[0][6]) or 'none'}"
    )
    answers["OBJECT ENCODING / TYPE of a token bucket key"] = (
        f"{c.call('OBJECT', 'ENCODING', 'k')} / {c.call('TYPE', 'k')}"
    )
    c.call("SET", "s", "x")
    answers["MEMORY USAGE: token bucket key `k` (SET s x beside it)"] = (
        f"{c.call('MEMORY', 'USAGE', 'k')} B ({c.call('MEMORY', 'USAGE', 's')} B)"
    )
    c.close()

    r = Resp3(server.port)
    hello = r.call("HELLO", "3")
    answers["HELLO 3"] = "map" if hello[0] == "%" else hello[0]
    check = r.call("RL.TOKENBUCKET", "k", 10, 1)
    answers["RESP3 reply of a check"] = check[0] + "[" + "".join(k for k, _ in check[1]) + "]"
    rlinfo = r.call("RL.INFO", "k")
    tokens = next((v for (_, name), v in rlinfo[1] if name == "tokens"), None) if rlinfo[0] == "%" else None
    answers["RESP3 reply of RL.INFO"] = "map" if rlinfo[0] == "%" else rlinfo[0]
    answers["RESP3 double `tokens` of RL.INFO as written"] = f"{tokens[0]} {tokens[1]}" if tokens else "?"

    # Client-side caching: a RESP3 client reads the key with a read-only
    # command, then another client's check changes it.
    r.call("CLIENT", "TRACKING", "ON")
    r.call("RL.INFO", "k")
    w = server.client(timeout=10)
    w.call("RL.TOKENBUCKET", "k", 10, 1)
    w.close()
    r.sock.settimeout(2)
    try:
        push = r.read()
        answers["tracking: RL.INFO k, then a check on k from another client"] = (
            f"invalidation pushed ({push[1][0][1]})" if push[0] == ">" else f"got {push[0]}"
        )
    except (TimeoutError, socket.timeout):
        answers["tracking: RL.INFO k, then a check on k from another client"] = "no invalidation in 2 s"
    r.close()
    return answers


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--module", default=str(ROOT / "target" / "debug" / "libredis_ratelimit.so"))
    p.add_argument("servers", nargs="+", help="name=binary")
    args = p.parse_args()
    columns = []
    with tempfile.TemporaryDirectory(prefix="rl-probe-") as workdir, Servers() as servers:
        for spec in args.servers:
            name, _, binary = spec.partition("=")
            server = servers.start(
                Server(binary, [args.module], workdir, name, ["--enable-module-command", "yes"])
            )
            columns.append((name, probe(server)))
            server.stop()
    rows = list(columns[0][1])
    print("| | " + " | ".join(name for name, _ in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in rows:
        print(f"| {row} | " + " | ".join(str(a.get(row, "")).replace("|", "\\|") for _, a in columns) + " |")


if __name__ == "__main__":
    try:
        main()
    except Abort as e:
        print(f"compat-probe: {e}", file=sys.stderr)
        sys.exit(1)
