#!/usr/bin/env python3
"""Summarises the callgrind dumps of scripts/profile.sh, per request.

Usage: callgrind_summary.py REQUESTS BASELINE_DUMP DUMP...

For each dump: the instructions of the whole server per request (the event
loop, reading and parsing the request, the command, the reply), as a ratio
to the baseline's (INCR) and to the floor's (the dump named "floor", when
there is one); the whole command (Redis's `call`); for a check command
(RL.* or CL.*), both ratios again against the floor with as many words as
its workload ("floor" for 3, "floor-4" for 4, "floor-5" for 5: Redis's own
work per argument, outside the command, is then the same on both sides),
when that floor was measured in the same run; then what the
module's command handler spends, inclusive, per request, callee by callee
(the module API functions, RM_*, and the module's own functions the compiler
did not inline), two levels deep (the second in proportion, when a callee
is called from elsewhere too); what is left is the handler's own code,
with everything inlined into it (argument parsing, the algorithm, ...). Last,
the expiry of keys, which runs outside commands. After all dumps, when a
floor with the same words was measured for any check: a table of each
check against it.

Reads `callgrind_annotate --tree=calling` output, where one function may
appear in several blocks (one per source file inlined into it): callees are
added up over them. Python 3 standard library only.
"""

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

PROFILE_SH = Path(__file__).resolve().parent / "profile.sh"

ROW = re.compile(
    r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+([*>])\s+(?:\?\?\?|[^:]+):(.+?)"
    r"(?: \(([\d,]+)x\))?(?: \[(?:/[^\]]*|\?\?\?)\])?\s*$"
)
# Callees shown, at each level: those above this share of their caller.
SHOW_SHARE = 0.02


def number(text):
    return int(text.replace(",", ""))


def short(name):
    name = re.sub(r"redis_ratelimit::algorithms::\w+::(\w+)", r"\1", name)
    name = name.replace("redis_ratelimit::", "").replace("redis_module::alloc::", "")
    return name.replace("::<", "<")


def calls(dump):
    """{caller: {callee: inclusive cost}}, added up over the caller's blocks."""
    text = subprocess.run(
        ["callgrind_annotate", "--tree=calling", "--inclusive=yes", "--auto=no", "--threshold=100", dump],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    graph = defaultdict(lambda: defaultdict(int))
    caller = None
    for line in text.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cost, kind, function = number(m.group(1)), m.group(2), m.group(3)
        if kind == "*":
            caller = function
        elif caller is not None and function != caller:
            graph[caller][function] += cost
    return graph


def summary_total(dump):
    with open(dump) as f:
        for line in f:
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit(f"{dump}: no summary line")


def trigger(dump):
    with open(dump) as f:
        for line in f:
            if line.startswith("desc: Trigger:"):
                return line.split("dump", 1)[-1].strip()
    return dump


def command_of(name):
    """The command words scripts/profile.sh runs for the workload `name`,
    from its table ("name|WORDS"), or None."""
    m = re.search(rf'"{re.escape(name)}\|([^"]*)"', PROFILE_SH.read_text())
    return m.group(1).split() if m else None


def floor_with_words(words):
    """The floor workload with as many words as `words` (scripts/profile.sh:
    "floor" has three, "floor-N" has N), or None for a command that is not a
    check (RL.* or CL.*)."""
    if not words or not words[0].upper().startswith(("RL.", "CL.")):
        return None
    return "floor" if len(words) == 3 else f"floor-{len(words)}"


def inclusive(graph, function):
    """What all callers spend in `function`."""
    return sum(callees.get(function, 0) for callees in graph.values())


def handler(graph):
    """The command's implementation: what Redis's dispatcher of module
    commands calls, or the native command `call` runs."""
    for dispatcher in ("RedisModuleCommandDispatcher", "call"):
        callees = graph.get(dispatcher, {})
        if callees:
            name = max(callees, key=callees.get)
            return name, callees[name]
    return None, 0


def main():
    requests = int(sys.argv[1])
    baseline, dumps = sys.argv[2], sys.argv[3:]
    base = summary_total(baseline) / requests
    graphs = {dump: calls(dump) for dump in [baseline] + dumps}
    # The floor module's dump (scripts/profile.sh names it "floor"): what
    # each command costs as a ratio to it, whole server and in call().
    floor = next((d for d in [baseline] + dumps if trigger(d) == "floor"), None)
    if floor:
        floor_total = summary_total(floor) / requests
        floor_call = inclusive(graphs[floor], "call") / requests
    # Every floor measured ("floor", "floor-4", ...): (whole server, in call())
    # a request, for the checks with the same number of words.
    floors = {
        trigger(d): (summary_total(d) / requests, inclusive(graphs[d], "call") / requests)
        for d in [baseline] + dumps
        if trigger(d) == "floor" or trigger(d).startswith("floor-")
    }
    same_words = []
    for dump in [baseline] + dumps:
        graph = graphs[dump]
        total = summary_total(dump) / requests
        in_call = inclusive(graph, "call") / requests
        print()
        vs_floor = f", {total / floor_total:.2f}x the floor" if floor else ""
        print(f"{trigger(dump)}: {total:,.0f} instructions a request (whole server), {total / base:.2f}x INCR{vs_floor}")
        vs_floor = f", {in_call / floor_call:.2f}x the floor's" if floor else ""
        print(f"  {in_call:9,.0f}  the command (Redis's call()){vs_floor}")
        words = command_of(trigger(dump))
        alike = floor_with_words(words)
        if alike in floors:
            alike_total, alike_call = floors[alike]
            same_words.append((trigger(dump), len(words), alike, total, total / alike_total, in_call / alike_call))
            print(
                f"  against {alike} (as many words, {len(words)}): {total / alike_total:.2f}x whole server, "
                f"{in_call / alike_call:.2f}x in the command"
            )
        name, cost = handler(graph)
        if name is None:
            continue
        print(f"  {cost / requests:9,.0f}  {short(name)}, of which:")
        callees = sorted(graph.get(name, {}).items(), key=lambda kv: -kv[1])
        for callee, callee_cost in callees:
            if callee_cost < SHOW_SHARE * cost:
                continue
            print(f"  {callee_cost / requests:9,.0f}    {short(callee)}")
            # The callee's own callees, in the share of its calls that come
            # from this handler (callgrind keeps one level of callers only).
            share = callee_cost / max(inclusive(graph, callee), 1)
            inner = sorted(graph.get(callee, {}).items(), key=lambda kv: -kv[1])
            for sub, sub_cost in inner:
                sub_cost *= share
                if sub_cost >= max(SHOW_SHARE * cost, 0.1 * callee_cost):
                    print(f"  {sub_cost / requests:9,.0f}      {short(sub)}")
        own = cost - sum(graph.get(name, {}).values())
        print(f"  {own / requests:9,.0f}    its own code, with what was inlined into it")
        expiry = inclusive(graph, "activeExpireCycle")
        print(f"  {expiry / requests:9,.0f}  outside commands: activeExpireCycle (deleting expired keys)")
    if same_words:
        print()
        print("Against the floor with as many words (whole server and in the command, x its):")
        print(f"  {'name':<18} {'words':>5}  {'floor':<8} {'whole server':>12} {'x':>6} {'in call()':>10}")
        for name, count, alike, total, whole_ratio, call_ratio in same_words:
            print(f"  {name:<18} {count:>5}  {alike:<8} {total:>12,.0f} {whole_ratio:>5.2f}x {call_ratio:>9.2f}x")


if __name__ == "__main__":
    main()
