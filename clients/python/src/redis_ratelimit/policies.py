"""Named policies: limits held in Redis (``RL.POLICY SET``) and checked by
name (``RL.CHECK``), so a limit is changed once, by whoever owns it, and
every service checking it follows without a redeploy.

`NamedPolicy` goes wherever a `Limit` goes (a client's ``check``, a web
`Rule`). The reply of ``RL.CHECK`` is the inline command's; the client
reads the policy's definition (``RL.POLICY GET``, kept `MAX_AGE_S`) only to
write the same headers as the inline limit would: the quota's window and
refill are not in the reply.

`sync_policies` is the worker's call: a file or a dict of policies,
validated everywhere first, then applied to every primary.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .commands import Command, Key, decision_from, option_words
from .decision import Decision
from .decision import Policy as HeaderPolicy
from .limits import ALGORITHMS, GCRA, Arg, Limit, SlidingCounter
from .units import Duration, block_ms, duration_arg

#: How long a definition read from Redis is used for the headers before it
#: is read again (seconds). A check's reply whose limit differs from the
#: definition's has it read again at once.
MAX_AGE_S = 5.0

#: What the client takes as a policy name: 1 to 128 printable ASCII
#: characters, no space (what an HTTP field can carry in ``RateLimit``).
_NAME = re.compile(r"[!-~]{1,128}")

ON_CHANGE = ("KEEP", "SCALE", "RESET")

_BY_WORD: dict[str, type[Limit]] = {cls.word: cls for cls in ALGORITHMS}


def check_name(name: object) -> str:
    """`name` if the client can use it as a policy name, else ValueError."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ValueError(
            f"policy name {name!r} must be 1 to 128 printable ASCII characters, no spaces"
        )
    return name


@dataclass(frozen=True)
class NamedPolicy:
    """A policy held in Redis, by its name: ``NamedPolicy("plan:pro")``.

    Taken wherever a `Limit` is: ``limiter.check(key, NamedPolicy(...))``
    sends ``RL.CHECK plan:pro key``; in a web `Rule`, ``name`` may also be
    a function of the request (``lambda r: "plan:" + plan_of(r)``), and then
    ``label`` names the rule's keys (they stay the same when a client moves
    from one plan to another, so its count carries over as the module's
    ON-CHANGE says). ``label`` defaults to the name.

    A policy of several tiers takes one key per tier: see `policy_keys`.
    """

    name: str | Callable[[Any], str]
    label: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if callable(self.name):
            if self.label is None:
                raise ValueError(
                    "a NamedPolicy whose name is a function of the request needs a label= "
                    "(it names the rule's keys)"
                )
        else:
            check_name(self.name)
        if self.label is not None:
            check_name(self.label)

    @property
    def key_name(self) -> str:
        """What names the rule's keys and its ``RateLimit`` item."""
        return self.label if self.label is not None else str(self.name)

    def resolve(self, request: Any = None) -> str:
        """The policy's name (for `request`, when it is a function)."""
        if not callable(self.name):
            return self.name
        name = self.name(request)
        return check_name(name)

    def static_name(self) -> str:
        if callable(self.name):
            raise TypeError(
                "a NamedPolicy whose name is a function of the request is for a web Rule; "
                'give the client a name: NamedPolicy("plan:pro")'
            )
        return self.name


def has_hash_tag(key: str) -> bool:
    """Whether `key` holds a hash tag a cluster routes by (``{...}``, non-empty)."""
    start = key.find("{")
    return start >= 0 and key.find("}", start + 2) > start + 1 and key[start + 1] != "}"


def policy_keys(key: Key, tiers: int) -> list[Key]:
    """The keys of a policy of `tiers` tiers checked for `key`: the key itself
    for one tier; for several, ``<key>:0``, ``<key>:1``, ... with the key put
    in braces first when it holds no hash tag (``{user:42}:0``), so all of a
    key's tiers are in one cluster slot."""
    if tiers <= 1:
        return [key]
    text = key.decode() if isinstance(key, bytes) else key
    base = text if has_hash_tag(text) else f"{{{text}}}"
    return [f"{base}:{i}" for i in range(tiers)]


@dataclass(frozen=True)
class PolicyDefinition:
    """What ``RL.POLICY SET`` takes after the name: the tiers, and the
    policy's own PENALTY, SHADOW and ON-CHANGE."""

    tiers: tuple[Limit, ...]
    penalty: Duration | None = None
    shadow: bool = False
    #: KEEP, SCALE or RESET; None: the module's default (KEEP).
    on_change: str | None = None

    def words(self) -> list[Arg]:
        out: list[Arg] = []
        for tier in self.tiers:
            out += [tier.word, *tier.params()]
        if self.penalty is not None:
            out += ["PENALTY", duration_arg(self.penalty)]
        if self.shadow:
            out.append("SHADOW")
        if self.on_change is not None:
            out += ["ON-CHANGE", self.on_change]
        return out


def _text(word: Any) -> str:
    return word.decode() if isinstance(word, bytes) else str(word)


def _number(word: str) -> int | float:
    try:
        return int(word)
    except ValueError:
        return float(word)


def parse_definition(words: Sequence[Any]) -> PolicyDefinition:
    """The definition from its words (``RL.POLICY GET``'s, or a file's);
    ValueError naming the word it cannot read. The module is the judge of
    the values: this reading is for the headers and the file's forms."""
    ws = [_text(w) for w in words]
    tiers: list[Limit] = []
    penalty: str | None = None
    shadow = False
    on_change: str | None = None
    i = 0
    while i < len(ws):
        word = ws[i].upper()
        cls = _BY_WORD.get(word)
        if cls is not None:
            arity = 3 if cls is GCRA else 2
            args = ws[i + 1 : i + 1 + arity]
            if len(args) < arity:
                raise ValueError(f"{word} needs {arity} parameters, got {args}")
            i += 1 + arity
            if cls is GCRA:
                tiers.append(GCRA(int(args[0]), int(args[1]), args[2]))
            elif word in ("TOKENBUCKET", "LEAKYBUCKET"):
                tiers.append(cls(int(args[0]), _number(args[1])))  # type: ignore[call-arg,arg-type]
            elif cls is SlidingCounter and i + 1 < len(ws) and ws[i].upper() == "PRECISION":
                tiers.append(SlidingCounter(int(args[0]), args[1], int(ws[i + 1])))
                i += 2
            else:
                tiers.append(cls(int(args[0]), args[1]))  # type: ignore[call-arg,arg-type]
        elif word == "PENALTY" and i + 1 < len(ws):
            penalty, i = ws[i + 1], i + 2
        elif word == "SHADOW":
            shadow, i = True, i + 1
        elif word == "ON-CHANGE" and i + 1 < len(ws):
            on_change, i = ws[i + 1].upper(), i + 2
        else:
            raise ValueError(f"cannot read {ws[i]!r} in the policy definition {' '.join(ws)!r}")
    if not tiers:
        raise ValueError(f"the policy definition {' '.join(ws)!r} has no tier")
    return PolicyDefinition(tuple(tiers), penalty, shadow, on_change)


def definition_words(definition: Any) -> list[Arg]:
    """The words for ``RL.POLICY SET`` from a definition in one of the
    forms a policy file takes:

    - the words as ``RL.POLICY SET`` takes them, as a list
      (``["TOKENBUCKET", 10, 1, "PENALTY", "30s"]``) or one string
      (``"TOKENBUCKET 10 1 PENALTY 30s"``), sent as they are;
    - the structured form: ``{"tiers": [{"algorithm": "tokenbucket",
      "capacity": 10, "rate": 1}], "penalty": "30s", "shadow": false,
      "on_change": "keep"}``, each tier's fields those of the client's
      limit class of that algorithm (`TokenBucket`'s ``capacity`` and
      ``rate``, `FixedWindow`'s ``limit`` and ``window``, ...);
    - a `PolicyDefinition`, or one `Limit`.

    Raises ValueError or TypeError saying what is wrong."""
    if isinstance(definition, PolicyDefinition):
        return definition.words()
    if isinstance(definition, Limit):
        return PolicyDefinition((definition,)).words()
    if isinstance(definition, str):
        words: list[Arg] = list(definition.split())
        if not words:
            raise ValueError("the definition is empty")
        return words
    if isinstance(definition, (list, tuple)):
        if not definition:
            raise ValueError("the definition is empty")
        for word in definition:
            if isinstance(word, bool) or not isinstance(word, (str, int, float)):
                raise TypeError(f"a definition's words are strings or numbers, not {word!r}")
        return [w if isinstance(w, (str, int)) else repr(w) for w in definition]
    if isinstance(definition, Mapping):
        return _structured(definition).words()
    raise TypeError(
        "a definition is a list of words, a string, or a mapping with 'tiers' "
        f"(and 'penalty', 'shadow', 'on_change'); not {type(definition).__name__}"
    )


def _structured(form: Mapping[str, Any]) -> PolicyDefinition:
    unknown = set(form) - {"tiers", "penalty", "shadow", "on_change"}
    if unknown:
        raise ValueError(
            f"unknown field(s) {sorted(unknown)}: a policy has tiers, penalty, shadow, on_change"
        )
    tiers_in = form.get("tiers")
    if not isinstance(tiers_in, list) or not tiers_in:
        raise ValueError("'tiers' must be a non-empty list of {'algorithm': ..., ...}")
    tiers: list[Limit] = []
    for n, tier in enumerate(tiers_in):
        if not isinstance(tier, Mapping) or not isinstance(tier.get("algorithm"), str):
            raise ValueError(f"tier {n} must be a mapping with an 'algorithm'")
        fields = dict(tier)
        word = str(fields.pop("algorithm")).upper()
        cls = _BY_WORD.get(word)
        if cls is None:
            raise ValueError(
                f"tier {n}: unknown algorithm {tier['algorithm']!r} "
                f"(one of {', '.join(w.lower() for w in _BY_WORD)})"
            )
        if "name" in fields:
            raise ValueError(f"tier {n}: a policy's tier has no name")
        try:
            tiers.append(cls(**fields))
        except TypeError as error:
            raise ValueError(f"tier {n} ({word.lower()}): {error}") from None
    shadow = form.get("shadow", False)
    if not isinstance(shadow, bool):
        raise ValueError(f"'shadow' must be true or false, not {shadow!r}")
    on_change = form.get("on_change")
    if on_change is not None:
        if not isinstance(on_change, str) or on_change.upper() not in ON_CHANGE:
            raise ValueError(f"'on_change' must be keep, scale or reset, not {on_change!r}")
        on_change = on_change.upper()
    penalty = form.get("penalty")
    if penalty is not None and (
        isinstance(penalty, bool) or not isinstance(penalty, (str, int, float))
    ):
        raise ValueError(f"'penalty' must be a duration (30, '30s', '1m'), not {penalty!r}")
    return PolicyDefinition(tuple(tiers), penalty, shadow, on_change)


@dataclass(frozen=True)
class PolicyInfo:
    """``RL.POLICY GET``'s answer: the policy's version and definition."""

    name: str
    version: int
    #: The words after the name, as the module normalised them.
    words: tuple[str, ...]

    @property
    def definition(self) -> PolicyDefinition | None:
        """The words read (None if this client cannot read them)."""
        try:
            return parse_definition(self.words)
        except (ValueError, TypeError):
            return None


def _parse_get(reply: Any) -> PolicyInfo | None:
    if reply is None:
        return None
    name, version, words = reply[0], reply[1], reply[2]
    return PolicyInfo(_text(name), int(version), tuple(_text(w) for w in words))


class PolicyBook:
    """The definitions a client has read, each used for `max_age_s`
    seconds; thread-safe. A missing policy is asked for again each time."""

    def __init__(self, max_age_s: float = MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._known: dict[str, tuple[PolicyDefinition | None, float]] = {}

    def stale(self, name: str) -> bool:
        with self._lock:
            known = self._known.get(name)
        return known is None or known[0] is None or time.monotonic() - known[1] >= self.max_age_s

    def get(self, name: str) -> PolicyDefinition | None:
        with self._lock:
            known = self._known.get(name)
        return None if known is None else known[0]

    def put(self, name: str, info: PolicyInfo | None) -> None:
        definition = None if info is None else info.definition
        with self._lock:
            self._known[name] = (definition, time.monotonic())

    def forget(self, name: str | None = None) -> None:
        with self._lock:
            if name is None:
                self._known.clear()
            else:
                self._known.pop(name, None)


def header_policies(name: str, definition: PolicyDefinition | None) -> list[HeaderPolicy | None]:
    """Each tier's ``RateLimit-Policy`` item: the inline limit's, named
    after the policy (``plan:pro``; ``plan:pro:0``, ``plan:pro:1``... for
    several tiers)."""
    if definition is None:
        return [None]
    tiers = definition.tiers
    if len(tiers) == 1:
        return [replace(tiers[0].policy(), name=name)]
    return [replace(t.policy(), name=f"{name}:{i}") for i, t in enumerate(tiers)]


def check_command(
    key: Key,
    name: str,
    book: PolicyBook,
    label: str | None = None,
    **options: Any,
) -> Command[Decision]:
    """``RL.CHECK name key... [options]``, its keys from `key` (`policy_keys`)
    by the tiers of the definition in `book`, its reply read as the inline
    command's would be. A reply whose limits differ from the definition's
    has the definition read again on the next check."""
    definition = book.get(name)
    tiers = 1 if definition is None else len(definition.tiers)
    keys = policy_keys(key, tiers)
    policies = header_policies(label or name, definition)
    expected = None if definition is None else [t.quota for t in definition.tiers]

    def parse(reply: Any) -> Decision:
        if len(reply) > 5 and isinstance(reply[5], (list, tuple)):  # several tiers: RL.ALL's reply
            parts = tuple(
                decision_from(r, p)
                for r, p in zip(reply[5], policies + [None] * len(reply[5]), strict=False)
            )
            whole = decision_from(reply)
            decision = replace(whole, delay=max(d.delay for d in parts), tiers=parts)
            limits = [d.limit for d in parts]
        else:
            decision = decision_from(reply, policies[0])
            limits = [decision.limit]
        if expected is not None and limits != expected:
            book.forget(name)  # the policy changed: read it again
        return decision

    block = options.get("block")
    return Command(
        "RL.CHECK",
        (name, *keys, *option_words(**options)),
        parse,
        block_ms=None if block is None else block_ms(block),
        cacheable=not (options.get("peek") or options.get("shadow") or block is not None),
    )


def get_command(name: str) -> Command[PolicyInfo | None]:
    """``RL.POLICY GET name``."""
    return Command("RL.POLICY", ("GET", check_name(name)), _parse_get, any_node=True)


# The sync of a set of policies -------------------------------------------------


class PolicySyncError(Exception):
    """`sync_policies` applied nothing (``errors``) or found the primaries
    disagreeing after applying (``report.digests``)."""

    def __init__(self, message: str, report: SyncReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class PolicyChange:
    """What `sync_policies` did (or, with ``dry_run``, would do) to one
    policy on one primary: ``created``, ``changed`` (``old_version`` ->
    ``new_version``), ``unchanged``, or ``deleted`` (``prune``)."""

    name: str
    node: str
    status: str
    old_version: int | None
    new_version: int | None

    def __str__(self) -> str:
        if self.status == "changed":
            what = f"changed (version {self.old_version} -> {self.new_version})"
        elif self.status == "created":
            what = f"created (version {self.new_version})"
        elif self.status == "deleted":
            what = f"deleted (was version {self.old_version})"
        else:
            what = f"unchanged (version {self.old_version})"
        return f"{self.name} on {self.node}: {what}"


@dataclass
class SyncReport:
    """The outcome of `sync_policies`: each policy's change per primary,
    every error found by validation, and each primary's ``RL.POLICY
    DIGEST`` after applying."""

    dry_run: bool
    changes: list[PolicyChange] = field(default_factory=list)
    #: ``(policy name, node, message)``: every definition refused.
    errors: list[tuple[str, str, str]] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)

    @property
    def agreed(self) -> bool:
        """True when every primary answered the same digest."""
        return len(set(self.digests.values())) <= 1

    def by_status(self, status: str) -> list[str]:
        return sorted({c.name for c in self.changes if c.status == status})

    def __str__(self) -> str:
        lines = [str(c) for c in self.changes]
        lines += [f"{name} on {node}: refused: {message}" for name, node, message in self.errors]
        lines += [f"digest of {node}: {digest}" for node, digest in self.digests.items()]
        return "\n".join(lines)


#: A primary: its name, and how to send it one command.
Node = tuple[str, Callable[..., Any]]


def load_policies(source: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """The policies of a file (``.json``; ``.yaml``/``.yml`` when PyYAML is
    installed) or a mapping: ``{name: definition}`` (`definition_words`
    says which forms a definition takes)."""
    if isinstance(source, Mapping):
        data: Any = dict(source)
    else:
        path = Path(source)
        text = path.read_text()
        if path.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml  # type: ignore[import-untyped,unused-ignore]
            except ImportError:
                raise ValueError(
                    f"{path} is YAML, and PyYAML is not installed: pip install pyyaml, "
                    "or write the policies as JSON"
                ) from None
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError("policies must be a mapping of name -> definition")
    return data


def _nodes(redis: Any) -> list[Node]:
    from redis.cluster import RedisCluster

    from .client import RateLimiter

    if isinstance(redis, (list, tuple)):  # several servers, each applied alike
        return [node for client in redis for node in _nodes(client)]
    if isinstance(redis, RateLimiter):
        redis = redis.redis
    if isinstance(redis, RedisCluster):
        out: list[Node] = []
        for node in redis.get_primaries():  # type: ignore[no-untyped-call]

            def send(*words: Any, node: Any = node) -> Any:
                return redis.execute_command(*words, target_nodes=node)  # type: ignore[no-untyped-call]

            out.append((f"{node.host}:{node.port}", send))
        return out
    kwargs = redis.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
    return [(str(where), redis.execute_command)]


def _listing(reply: Iterable[Any]) -> dict[str, int]:
    return {_text(pair[0]): int(pair[1]) for pair in reply}


def sync_policies(
    redis: Any,
    policies: Mapping[str, Any] | str | Path,
    *,
    dry_run: bool = False,
    prune: bool = False,
) -> SyncReport:
    """Makes the policies in Redis those of `policies` (a mapping, or a
    JSON or YAML file of ``name: definition``), on every primary of a
    cluster (`redis`: a sync ``redis.Redis``, ``RedisCluster`` or
    `RateLimiter`, or a list of them: servers that each need the policies,
    such as shards a client picks between).

    First every definition is validated on every primary (``RL.POLICY SET
    ... DRYRUN``): if any is refused, none is applied and `PolicySyncError`
    lists every error. Then each is applied, and the report says, per
    policy and primary, whether it was created, changed (old -> new
    version) or unchanged. ``prune=True`` deletes the policies the source
    does not name. ``dry_run=True`` validates and reports what would
    change, changing nothing. Last, each primary's ``RL.POLICY DIGEST`` is
    read: if they differ, `PolicySyncError` (``report.digests`` has them).
    """
    from redis.exceptions import ResponseError

    report = SyncReport(dry_run=dry_run)
    data = load_policies(policies)
    nodes = _nodes(redis)
    words: dict[str, list[Arg]] = {}
    for name, definition in data.items():
        try:
            check_name(name)
            words[name] = definition_words(definition)
        except (ValueError, TypeError) as error:
            report.errors.append((name, "client", str(error)))
    current: dict[str, dict[str, int]] = {}
    would: dict[tuple[str, str], int] = {}
    for node, send in nodes:
        current[node] = _listing(send("RL.POLICY", "LIST"))
        for name, ws in words.items():
            try:
                would[(node, name)] = int(send("RL.POLICY", "SET", name, *ws, "DRYRUN"))
            except ResponseError as error:
                report.errors.append((name, node, str(error)))
    if report.errors:
        raise PolicySyncError(
            "no policy applied: "
            + "; ".join(f"{n} ({where}): {m}" for n, where, m in report.errors),
            report,
        )
    for node, send in nodes:
        for name, ws in words.items():
            old = current[node].get(name)
            new = would[(node, name)] if dry_run else int(send("RL.POLICY", "SET", name, *ws))
            status = "created" if old is None else "unchanged" if new == old else "changed"
            report.changes.append(PolicyChange(name, node, status, old, new))
        if prune:
            for name, old in sorted(current[node].items()):
                if name not in words:
                    if not dry_run:
                        send("RL.POLICY", "DEL", name)
                    report.changes.append(PolicyChange(name, node, "deleted", old, None))
    for node, send in nodes:
        report.digests[node] = _text(send("RL.POLICY", "DIGEST"))
    if not dry_run and not report.agreed:
        raise PolicySyncError(
            "the primaries hold different policies after the sync: digests "
            + ", ".join(f"{n}={d}" for n, d in report.digests.items()),
            report,
        )
    return report
