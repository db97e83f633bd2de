#!/usr/bin/env python3
"""The guard of `make bench-profile`: no command may cost more instructions
than the figures committed in docs/benchmarks.md allow.

Usage: profile_guard.py [--write] REQUESTS DUMP...   (scripts/profile.sh runs it)

For each callgrind dump of scripts/profile.sh that the guard judges (INCR,
the floor, and the guard's own workload: "g-<command>", every check command
with parameters under which each request takes the same path whatever the
timing, and "floor-<words>", the floor with as many words as those checks):
the instructions a request inside the command, Redis's call()
inclusive (what the command costs, without the event loop and the expiry
cycle, whose share depends on timing). Compared with the committed
figure of the same name in the table between `<!-- profile-guard:begin -->`
and `<!-- profile-guard:end -->` of docs/benchmarks.md: more than 3% above
it fails (exit 1). The figures hold for the server they were measured on:
when `redis-server --version` differs from the one recorded there, the
guard says so and judges nothing (exit 0). A command measured with no
committed figure, or a figure not measured (PROFILE_ALL unset), is named.

--write replaces the committed table with this run's figures (do it on
purpose, after a change that is meant to cost more, or that saves).
"""

import argparse
import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

from callgrind_summary import calls, inclusive, summary_total, trigger  # noqa: E402
from callgrind_summary import command_of as workload_words  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- profile-guard:begin -->"
END = "<!-- profile-guard:end -->"
# The most a command's figure may grow over the committed one.
TOLERANCE = 0.03
ROW = re.compile(r"^\| `(\S+)` \| `[^`]*` \| ([\d,]+) \| ([\d,]+) \|$")
SERVER = re.compile(r"^Server: `(.*)`$", re.M)


def server_version():
    binary = os.environ.get("RL_SERVER", "redis-server")
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    # Only what names the build: version, sha, allocator.
    return " ".join(w for w in out.split() if w.split("=")[0] in ("v", "sha", "malloc", "build"))


def committed(text):
    """({name: (in the command, whole server)}, the server's version)."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"profile guard: {DOC} has no {BEGIN} ... {END} table; run with PROFILE_GUARD=write")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    figures = {}
    for line in block.splitlines():
        m = ROW.match(line.strip())
        if m:
            figures[m.group(1)] = (int(m.group(2).replace(",", "")), int(m.group(3).replace(",", "")))
    server = SERVER.search(block)
    return figures, server.group(1) if server else None


def guarded(name):
    return name in ("incr", "floor") or name.startswith(("g-", "floor-"))


def measured(requests, dumps):
    """[(name, in the command, whole server)] a request of each guarded
    dump, in the dumps' order."""
    rows = []
    for dump in dumps:
        if not guarded(trigger(dump)):
            continue
        graph = calls(dump)
        rows.append(
            (trigger(dump), round(inclusive(graph, "call") / requests), round(summary_total(dump) / requests))
        )
    return rows


def command_of(name):
    """The command words profile.sh ran for `name`, from its table."""
    words = workload_words(name)
    return " ".join(words).replace("__rand_int__", "KEY") if words else "?"


def write(requests, rows, version):
    lines = [
        BEGIN,
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by "
        f"`PROFILE_GUARD=write PROFILE_REQUESTS={requests}{' PROFILE_ALL=1' if os.environ.get('PROFILE_ALL') else ''} "
        "make bench-profile` (instructions a request).",
        "",
        f"Server: `{version}`",
        "",
        "| name | command | in the command (call()) | whole server |",
        "|---|---|---:|---:|",
    ]
    for name, inside, whole in rows:
        lines.append(f"| `{name}` | `{command_of(name)}` | {inside:,} | {whole:,} |")
    lines.append(END)
    block = "\n".join(lines)
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)
    print(f"profile guard: the committed figures in {DOC.relative_to(ROOT)} are now this run's")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true")
    p.add_argument("requests", type=int)
    p.add_argument("dumps", nargs="+")
    args = p.parse_args()
    rows = measured(args.requests, args.dumps)
    version = server_version()
    if args.write:
        write(args.requests, rows, version)
        return 0
    figures, their_server = committed(DOC.read_text())
    print()
    print(f"The guard: instructions a request in the command, against {DOC.relative_to(ROOT)} (at most +{TOLERANCE:.0%})")
    if their_server != version:
        print(f"  not judged: the committed figures are of `{their_server}`, this server is `{version}`")
        return 0
    failed = []
    print(f"  {'name':<18} {'committed':>10} {'now':>10} {'change':>8}")
    for name, inside, _ in rows:
        if name not in figures:
            print(f"  {name:<18} {'':>10} {inside:>10,} {'':>8}  no committed figure: not guarded")
            continue
        before = figures[name][0]
        change = inside / before - 1
        verdict = "ok" if change <= TOLERANCE else "TOO MANY"
        if change > TOLERANCE:
            failed.append(name)
        print(f"  {name:<18} {before:>10,} {inside:>10,} {change:>+8.1%}  {verdict}")
    missing = sorted(set(figures) - {name for name, _, _ in rows})
    if missing:
        print(f"  not measured in this run (PROFILE_ALL=1 measures them): {', '.join(missing)}")
    if failed:
        print(
            f"profile guard: {', '.join(failed)} cost more than {TOLERANCE:.0%} over the committed figures. "
            "If that is meant, commit new figures: PROFILE_GUARD=write make bench-profile",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
