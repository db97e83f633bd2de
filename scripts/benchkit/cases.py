"""What the bench measures.

The module's algorithms come from its one registry, `src/algorithms/registry.rs`,
as the crate itself walks it: `examples/bench_states.rs cases` prints each
algorithm's name (its check command is `RL.<NAME>`) and its case, parameters
from its own `Algorithm::limit_of` (100 a minute; 100 an hour for the memory
figure). So a new algorithm is measured with nothing written here.
`BENCH_CASES` only overrides that case, by name, where the bench knows more:
parameters chosen to match a Lua twin word for word, the twin (optional),
the CPU goal, the memory row's label. A case for a name the registry does
not have stops the bench at once.

Beside them: INCR (what Redis itself does for a counter), FLOOR.CHECK (the
floor: the least a module command answering what a check answers can cost,
benches/floor/floor.c), CL.THROTTLE (redis-cell's command, served by the GCRA
state) and the Lua twins (benches/lua/*.lua).
"""

import json
import subprocess

from . import Abort

# Stands for the key in a command's words.
KEY = object()

LUA_TB = "Lua token bucket (hash)"
LUA_SC = "Lua sliding counter (hash, 2 counters)"
LUA_FW = "Lua fixed window (INCRBY + PEXPIREAT)"
LUA_SL = "Lua sliding log (sorted set)"
LUA_GCRA = "Lua GCRA (string)"


class Case:
    """The bench case of one algorithm of the registry.

    `params`: the check's parameters in the throughput and replication
    figures: realistic, and the same word for word as its Lua twin's.
    `cpu_goal`: the most server CPU a check may cost, as a ratio to the
    floor's (FLOOR.CHECK), at pipeline 32, bare and with a replica (issue
    24; the earlier goal, 1.25x INCR, lay below the floor itself). `memory`: the parameters
    of the memory figure, which keep every key for minutes so that none
    expires while it is counted, and the label of that row. `same_replies`:
    whether the twin answers exactly as the command (checked before the
    throughput runs); the leaky bucket's twin is the GCRA meter, whose
    replies differ."""

    def __init__(self, params, twin, cpu_goal, memory_params, memory_label=None, same_replies=True):
        self.params = params
        self.twin = twin
        self.cpu_goal = cpu_goal
        self.memory_params = memory_params
        self.memory_label = memory_label
        self.same_replies = same_replies


# Capacity 100 refilled at 10 a second; limit 100 a minute. At 100k keys
# even a million requests a second give each key about 10 a second, so nearly
# every request is allowed (the "allowed" column checks).
BENCH_CASES = {
    "tokenbucket": Case(["100", "10"], LUA_TB, 1.15, ["100", "0.001"]),
    "slidingcounter": Case(["100", "60"], LUA_SC, 1.25, ["100", "60"]),
    "fixedwindow": Case(["100", "60"], LUA_FW, 1.15, ["100", "3600"]),
    "slidinglog": Case(["100", "60"], LUA_SL, 1.25, ["100", "60"], "RL.SLIDINGLOG, 1 request"),
    "leakybucket": Case(["100", "10"], LUA_GCRA, 1.15, ["100", "0.001"], same_replies=False),
    "gcra": Case(["99", "10", "1"], LUA_GCRA, 1.15, ["99", "1", "1000"], "RL.GCRA / CL.THROTTLE"),
}
# The most replication bytes an allowed check may send, whatever the size of
# the key's state.
REPLICATION_GOAL_BYTES = 80
# The most a check on a big state may cost, as a ratio to the same on a
# small state.
BIG_STATE_GOAL = 2.0


class Test:
    """One command measured: a label, a key prefix, the command's words (KEY
    for the key), the Lua script for a Lua test."""

    def __init__(self, label, prefix, words, script=None, twin=None, cpu_goal=None, name=None, same_replies=False):
        self.label = label
        self.prefix = prefix
        self.words = words
        self.script = script
        self.twin = twin
        self.cpu_goal = cpu_goal
        # The registry's name, for an algorithm's own command.
        self.name = name
        # Whether its Lua twin must answer as it does.
        self.same_replies = same_replies
        # An algorithm's Case (its memory figure's parameters).
        self.case = None

    def command(self, key, sha=None):
        """The command for `key`, EVALSHA with `sha` for a Lua test."""
        words = [key if w is KEY else w for w in self.words]
        if self.script:
            return ["EVALSHA", sha, "1"] + words
        return words

    def allowed(self, reply):
        """Whether a reply of this command allowed the request."""
        if self.label == "CL.THROTTLE":
            return reply[0] == 0
        return reply[0] == 1


INCR = Test("INCR", "b:incr:", ["INCR", KEY])
# The floor (benches/floor/floor.c): open the key, read and write a 32-byte
# value of its own type, set an expiry (a minute: its keys stay, as the
# windows' do), reply five integers, replicate verbatim.
FLOOR_LABEL = "FLOOR.CHECK (the floor)"
FLOOR = Test(FLOOR_LABEL, "b:floor:", ["FLOOR.CHECK", KEY, "60000"])
# redis-cell's command, on the GCRA state: the same goal as RL.GCRA.
CL_THROTTLE = Test("CL.THROTTLE", "b:cl:", ["CL.THROTTLE", KEY, "99", "10", "1"], twin=LUA_GCRA, cpu_goal=1.15)
LUA_TESTS = [
    Test(LUA_TB, "b:lua:tb:", [KEY, "100", "10"], script="token_bucket.lua"),
    Test(LUA_SC, "b:lua:sc:", [KEY, "100", "60"], script="sliding_counter.lua"),
    Test(LUA_FW, "b:lua:fw:", [KEY, "100", "60"], script="fixed_window.lua"),
    Test(LUA_SL, "b:lua:sl:", [KEY, "100", "60"], script="sliding_log.lua"),
    Test(LUA_GCRA, "b:lua:gcra:", [KEY, "99", "10", "1"], script="gcra.lua"),
]
# The Lua twins' memory figures: the parameters of the command each is the
# twin of (RL.GCRA's for the GCRA script).
LUA_MEMORY = [
    (LUA_TB, LUA_TB, ["100", "0.001"]),
    (LUA_SC, LUA_SC, ["100", "60"]),
    (LUA_FW, LUA_FW, ["100", "3600"]),
    (LUA_SL + ", 1 request", LUA_SL, ["100", "60"]),
    (LUA_GCRA, LUA_GCRA, ["99", "1", "1000"]),
]

# The CPU goal of an algorithm the bench has no case for: the looser one,
# the sliding algorithms' (see PRODUCT.md).
DEFAULT_CPU_GOAL = 1.4


def registry_cases(root):
    """Each algorithm of the registry, in its order, with the case it gives
    itself: `{"name", "params", "memory_params"}` (examples/bench_states.rs)."""
    argv = ["cargo", "run", "--release", "--quiet", "--example", "bench_states", "--", "cases"]
    try:
        done = subprocess.run(
            argv, cwd=root, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Abort(f"cannot list the registry's algorithms ({' '.join(argv)}): {e}")
    if done.returncode != 0:
        raise Abort(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    found = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    if not found:
        raise Abort(f"{' '.join(argv)} listed no algorithm")
    return found


def algorithm_tests(root):
    """One Test per algorithm of the registry, in its order, from its case
    (`BENCH_CASES`, or the one the algorithm gives); stops on a case for no
    algorithm."""
    found = registry_cases(root)
    names = [c["name"] for c in found]
    unknown = [n for n in BENCH_CASES if n not in names]
    if unknown:
        raise Abort(
            f"BENCH_CASES in scripts/benchkit/cases.py has a case for {', '.join(unknown)}, "
            "which the registry (src/algorithms/registry.rs) does not name: remove or rename it"
        )
    tests = []
    for given in found:
        name = given["name"]
        case = BENCH_CASES.get(name) or Case(given["params"], None, DEFAULT_CPU_GOAL, given["memory_params"])
        command = f"RL.{name.upper()}"
        test = Test(
            command,
            f"b:{name}:",
            [command, KEY] + case.params,
            twin=case.twin,
            cpu_goal=case.cpu_goal,
            name=name,
            same_replies=case.twin is not None and case.same_replies,
        )
        test.case = case
        tests.append(test)
    return tests


def memory_tests(algorithms):
    """(label, the Lua test or None, words) of each memory-per-key row but
    the full logs: INCR, each algorithm, each Lua twin."""
    rows = [("INCR counter", None, ["INCR", KEY])]
    for test in algorithms:
        case = test.case
        rows.append((case.memory_label or test.label, None, [test.words[0], KEY] + case.memory_params))
    by_label = {t.label: t for t in LUA_TESTS}
    for label, lua, params in LUA_MEMORY:
        rows.append((label, by_label[lua], [KEY] + params))
    return rows
