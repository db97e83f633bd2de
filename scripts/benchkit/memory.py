"""Memory per key: `MEMORY USAGE` of one key and the growth of `used_memory`
over many keys, for INCR, each algorithm, the Lua twins, and the sliding
logs (RL.SLIDINGLOG and a sorted set) at 100 and 1000 entries. Run on an
emptied server with active expiry off."""

import time

from . import Abort
from .cases import KEY, LUA_SL
from .resp import ReplyError

# Full logs: (entries, keys filled). A window of an hour keeps every entry.
LOG_FILLS = [(100, 1000), (1000, 200)]
LOG_WINDOW_S = "3600"
# The key whose MEMORY USAGE is reported: a 3-byte name, as in the README's
# table (a key's name counts in its MEMORY USAGE).
SAMPLE_KEY = "k:s"
FULL_LOG_LABEL = "RL.SLIDINGLOG, 1000 entries"


class Row:
    def __init__(self, label, usage, per_key, keys, encoding):
        self.label = label
        self.usage = usage
        self.per_key = per_key
        self.keys = keys
        self.encoding = encoding


def used_memory(client):
    return int(client.info("memory")["used_memory"])


def memory_names(count):
    """`count` key names: 14 bytes each for every type, so that only the
    values differ, but for the last one, SAMPLE_KEY (one key in thousands:
    no visible change to the growth per key)."""
    return [f"m:{i:012d}" for i in range(count - 1)] + [SAMPLE_KEY]


def measure_memory(client, shas, rows_to_measure, keys, log_fills, log):
    """The rows of `rows_to_measure` ((label, Lua test or None, words)),
    then the full logs of `log_fills`; and the bytes per entry of a full
    1000-entry RL.SLIDINGLOG, as the README counts them: (full - one
    request) / 999."""
    rows = []
    client.call("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    try:
        for label, lua, words in rows_to_measure:
            sha = shas[lua.label] if lua else None

            def command(key, words=words, sha=sha):
                filled = [key if w is KEY else w for w in words]
                return ["EVALSHA", sha, "1"] + filled if sha else filled

            names = memory_names(keys)
            rows.append(_memory_of(client, label, [[command(k) for k in names]], names))
            log(f"memory: {label}: {rows[-1].usage} B, {rows[-1].per_key:.1f} B a key")
        for entries, count in log_fills:
            for label, make in (
                ("RL.SLIDINGLOG", lambda k, e=entries: ["RL.SLIDINGLOG", k, str(e), LOG_WINDOW_S]),
                (LUA_SL, lambda k, e=entries: ["EVALSHA", shas[LUA_SL], "1", k, str(e), LOG_WINDOW_S]),
            ):
                names = memory_names(count)
                # One request a key a round, rounds over 1 ms apart: entries
                # at distinct milliseconds, which the module cannot merge.
                rounds = [[make(k) for k in names] for _ in range(entries)]
                row = _memory_of(client, f"{label}, {entries} entries", rounds, names, pause=0.0011)
                if label == LUA_SL:
                    cards = client.pipeline([["ZCARD", k] for k in names])
                    if any(c != entries for c in cards):
                        raise Abort(f"{label}: a sorted set does not hold {entries} entries")
                rows.append(row)
                log(f"memory: {row.label}: {row.usage} B, {row.per_key:.1f} B a key")
        names = memory_names(1)
        one = _memory_of(client, "one", [[["RL.SLIDINGLOG", names[0], "1000", LOG_WINDOW_S]]], names)
    finally:
        client.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")
        client.call("FLUSHALL", "SYNC")
    full = next((r.usage for r in rows if r.label == FULL_LOG_LABEL), None)
    per_entry = (full - one.usage) / 999 if full is not None else None
    return rows, per_entry


def _memory_of(client, label, rounds, names, pause=0.0):
    """Runs `rounds` (lists of commands, each round after the previous one's
    replies and `pause` seconds) on an empty server, every request of which
    must be allowed; the row of `label`."""
    client.call("FLUSHALL", "SYNC")
    before = used_memory(client)
    for commands in rounds:
        for reply in client.pipeline(commands):
            if isinstance(reply, ReplyError):
                raise Abort(f"{label}: {reply}")
            if isinstance(reply, list) and reply[0] != 1:
                raise Abort(f"{label}: a request was denied while filling: {reply}")
        if pause:
            time.sleep(pause)
    # Let the server's cron finish growing its hash tables (incremental
    # rehashing keeps two tables for a while).
    time.sleep(0.3)
    after = used_memory(client)
    if client.call("DBSIZE") != len(names):
        raise Abort(f"{label}: {len(names)} keys were written, the server holds {client.call('DBSIZE')}")
    sample = names[-1]  # the newest key: none has expired before it
    usage = client.call("MEMORY", "USAGE", sample, "SAMPLES", "0")
    encoding = client.call("OBJECT", "ENCODING", sample)
    if usage is None:
        raise Abort(f"{label}: the key {sample} vanished before it was measured")
    return Row(label, usage, (after - before) / len(names), len(names), encoding)
