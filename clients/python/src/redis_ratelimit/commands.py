"""Every command as its words and the reading of its reply, with no I/O.

The sync and asyncio clients differ only in how they send a command and
wait for the reply; what to send and what the reply means is written here
once, for both, and for redis-py's RESP2 and RESP3 shapes alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, TypedDict, TypeVar

from typing_extensions import Unpack

from .decision import Decision, Lease, Policy
from .info import KeyInfo, parse_info
from .limits import GCRA, Arg, Limit
from .top import TopEntry, parse_top
from .units import Duration, block_ms, duration_arg, ms

T = TypeVar("T")

#: A key, as redis-py takes one.
Key = str | bytes

#: The tiers of ``RL.ALL``: ``{key: limit}``, or ``(key, limit)`` pairs.
Tiers = Mapping[str, Limit] | Mapping[bytes, Limit] | Iterable[tuple[Key, Limit]]


class CheckOptions(TypedDict, total=False):
    """The options every check command and ``RL.ALL`` take, as keyword
    arguments. A new option is a line here and one in `option_words`.

    Some exclude others (``peek`` with ``block``, ``penalty`` or ``shadow``;
    ``block`` with ``shadow`` or ``penalty``): the server refuses those
    with ``syntax error: X and Y cannot be given together``, raised as
    `InvalidArgumentError`, so the rule is written once, in the module.
    """

    #: How much of the limit this request uses (default 1).
    cost: int
    #: Answer what would happen, and change nothing.
    peek: bool
    #: Wait on the server until the request is allowed, at most this long
    #: (``math.inf``: no limit); None: do not wait. The connection's
    #: ``socket_timeout`` must be longer (see `check_block`).
    block: Duration | None
    #: A denial locks the key for this long: every request is denied until
    #: it ends. None: no penalty.
    penalty: Duration | None
    #: Decide, but never deny: a would-be denial comes back allowed with its
    #: wait (``Decision.shadow_denied``) and takes nothing.
    shadow: bool


def option_words(
    cost: int = 1,
    peek: bool = False,
    block: Duration | None = None,
    penalty: Duration | None = None,
    shadow: bool = False,
) -> list[Arg]:
    """The option words for `CheckOptions`, the one place they are spelled.
    A default is left out, so the server applies its own."""
    words: list[Arg] = []
    if cost != 1:
        words += ["COST", cost]
    if peek:
        words.append("PEEK")
    words += block_words(block)
    if penalty is not None:
        words += ["PENALTY", duration_arg(penalty)]
    if shadow:
        words.append("SHADOW")
    return words


def block_words(block: Duration | None) -> list[Arg]:
    """``BLOCK ms``, for the checks, ``RL.ALL`` and ``RL.ACQUIRE`` alike."""
    return [] if block is None else ["BLOCK", block_ms(block)]


@dataclass(frozen=True)
class Command(Generic[T]):
    """A command to send, and how to read its reply."""

    name: str
    args: tuple[Arg, ...]
    parse: Callable[[Any], T]
    #: ``BLOCK``'s milliseconds when the server may hold the reply (0: no
    #: limit), for `check_block`; None when it answers at once.
    block_ms: int | None = None
    #: A command about the server rather than a key (``RL.TOP``): a cluster
    #: client sends it to every primary, and `parse` takes their replies
    #: by node name (a mapping) as well as one server's reply.
    every_primary: bool = False
    #: A command about the server that any one node answers (``RL.POLICY
    #: GET``): a cluster client sends it to its default node.
    any_node: bool = False
    #: A check whose denial the denial cache may answer again until its
    #: retry time: not a peek (it takes nothing), a block (it waits) or a
    #: shadow check (it never denies).
    cacheable: bool = False

    @property
    def words(self) -> tuple[Arg, ...]:
        return (self.name, *self.args)


def decision_from(reply: Any, policy: Policy | None = None) -> Decision:
    """The five integers (and the leaky bucket's `delay_ms`) as a Decision."""
    allowed, limit, remaining, retry_ms, reset_ms = (int(x) for x in reply[:5])
    delay = reply[5] if len(reply) > 5 and isinstance(reply[5], int) else 0
    return Decision(
        allowed=allowed == 1,
        limit=limit,
        remaining=remaining,
        retry_after=None if retry_ms < 0 else ms(retry_ms),
        reset_after=ms(reset_ms),
        delay=ms(delay),
        policy=policy,
    )


def check(key: Key, limit: Limit, **options: Unpack[CheckOptions]) -> Command[Decision]:
    """``RL.<ALGORITHM> key <params> [options]``."""
    policy = limit.policy()
    return Command(
        limit.command,
        (key, *limit.params(), *option_words(**options)),
        lambda reply: decision_from(reply, policy),
        block_ms=_blocks(options.get("block")),
        cacheable=_cacheable(options),
    )


def peek(key: Key, limit: Limit, cost: int = 1) -> Command[Decision]:
    """``RL.PEEK key <ALGORITHM params> [COST n]``: what a check would answer
    now, changing nothing; read-only, so a read-only replica answers it."""
    policy = limit.policy()
    return Command(
        "RL.PEEK",
        (key, limit.word, *limit.params(), *option_words(cost=cost)),
        lambda reply: decision_from(reply, policy),
    )


def check_all(tiers: Tiers, **options: Unpack[CheckOptions]) -> Command[Decision]:
    """``RL.ALL numkeys key... <ALGORITHM params>... [options]``: every tier
    or none."""
    pairs: list[tuple[Key, Limit]] = list(tiers.items() if isinstance(tiers, Mapping) else tiers)
    if not pairs:
        raise ValueError("RL.ALL needs at least one (key, limit) tier")
    keys = [key for key, _ in pairs]
    limits = [limit for _, limit in pairs]
    specs = [word for limit in limits for word in (limit.word, *limit.params())]
    policies = [limit.policy() for limit in limits]

    def parse(reply: Any) -> Decision:
        parts = tuple(decision_from(r, p) for r, p in zip(reply[5], policies, strict=True))
        # The combined five carry no delay: wait for the slowest tier's.
        return replace(decision_from(reply), delay=max(d.delay for d in parts), tiers=parts)

    return Command(
        "RL.ALL",
        (len(keys), *keys, *specs, *option_words(**options)),
        parse,
        block_ms=_blocks(options.get("block")),
        cacheable=_cacheable(options),
    )


def _cacheable(options: CheckOptions) -> bool:
    return not (options.get("peek") or options.get("shadow") or options.get("block") is not None)


def _blocks(block: Duration | None) -> int | None:
    return None if block is None else block_ms(block)


def acquire(
    key: Key,
    limit: int,
    lease: Duration,
    lease_id: str | None = None,
    block: Duration | None = None,
) -> Command[Lease]:
    """``RL.ACQUIRE key limit lease [ID id] [BLOCK ms]``."""
    policy = Policy("concurrency", limit, unit="concurrent-requests")

    def parse(reply: Any) -> Lease:
        d = decision_from(reply[:5], policy)
        taken = reply[5]  # the lease's id, or nil when refused
        if isinstance(taken, bytes):
            taken = taken.decode()
        return Lease(
            d.allowed,
            d.limit,
            d.remaining,
            d.retry_after,
            d.reset_after,
            policy=policy,
            id=taken,
        )

    words: list[Arg] = [key, limit, duration_arg(lease)]
    if lease_id is not None:
        words += ["ID", lease_id]
    words += block_words(block)
    return Command("RL.ACQUIRE", tuple(words), parse, block_ms=_blocks(block))


def release(key: Key, lease_id: str) -> Command[bool]:
    """``RL.RELEASE key id``: True if that id held a live lease."""
    return Command("RL.RELEASE", (key, lease_id), lambda reply: int(reply) == 1)


def top(count: int = 10, with_error: bool = False) -> Command[list[TopEntry]]:
    """``RL.TOP count [WITHERROR]``: the keys denied most, most first; in a
    cluster, every primary's lists merged (`top.merge_top`)."""
    words: list[Arg] = [count, "WITHERROR"] if with_error else [count]
    return Command(
        "RL.TOP",
        tuple(words),
        lambda reply: parse_top(reply, count, with_error),
        every_primary=True,
    )


def top_reset() -> Command[None]:
    """``RL.TOP RESET``: forget every count (on every primary of a cluster)."""
    return Command("RL.TOP", ("RESET",), lambda reply: None, every_primary=True)


def check_block(command: Command[Any], socket_timeout: float | None) -> None:
    """Refuses to send a ``BLOCK`` the connection would not wait for.

    The server holds a blocked request's reply for up to ``block_ms``; a
    connection whose ``socket_timeout`` (seconds) ends first raises redis-py's
    ``TimeoutError`` (and redis-py may send the command again) while the
    request is still queued on the server. So a block of no limit needs no
    timeout, and any other one a longer timeout: leave room for the round
    trip, e.g. a timeout of the block plus a second.
    """
    wait = command.block_ms
    if wait is None or socket_timeout is None:
        return
    if wait == 0 or socket_timeout * 1000 <= wait:
        shown = "no limit" if wait == 0 else f"{wait} ms"
        raise ValueError(
            f"{command.name} with BLOCK ({shown}) needs a connection that waits longer, but "
            f"its socket_timeout is {socket_timeout:g} s: the client would give up (TimeoutError) "
            "before the server answers. Give the Redis client a longer socket_timeout "
            "(or None), or block for less."
        )


def info(key: Key) -> Command[KeyInfo | None]:
    """``RL.INFO key``: None for a missing key."""
    return Command("RL.INFO", (key,), parse_info)


def cl_throttle(
    key: Key, max_burst: int, count: int, period: int, quantity: int = 1
) -> Command[Decision]:
    """``CL.THROTTLE``, redis-cell's command (``period`` in whole seconds),
    read into a Decision: its reply is in seconds, rounded up, and says 0
    for allowed."""
    policy = GCRA(max_burst, count, period).policy()

    def parse(reply: Any) -> Decision:
        limited, limit, remaining, retry_s, reset_s = (int(x) for x in reply[:5])
        allowed = limited == 0
        return Decision(
            allowed=allowed,
            limit=limit,
            remaining=remaining,
            retry_after=ms(0) if allowed else (None if retry_s < 0 else ms(retry_s * 1000)),
            reset_after=ms(reset_s * 1000),
            policy=policy,
        )

    words: list[Arg] = [key, max_burst, count, period]
    if quantity != 1:
        words.append(quantity)
    return Command("CL.THROTTLE", tuple(words), parse)
