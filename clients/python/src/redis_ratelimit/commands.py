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
from .units import Duration, duration_arg, ms

T = TypeVar("T")

#: A key, as redis-py takes one.
Key = str | bytes

#: The tiers of ``RL.ALL``: ``{key: limit}``, or ``(key, limit)`` pairs.
Tiers = Mapping[str, Limit] | Mapping[bytes, Limit] | Iterable[tuple[Key, Limit]]


class CheckOptions(TypedDict, total=False):
    """The options every check command and ``RL.ALL`` take, as keyword
    arguments. A new option is a line here and one in `option_words`."""

    #: How much of the limit this request uses (default 1).
    cost: int
    #: Answer what would happen, and change nothing.
    peek: bool


def option_words(cost: int = 1, peek: bool = False) -> list[Arg]:
    """The option words for `CheckOptions`, the one place they are spelled.
    A default is left out, so the server applies its own."""
    words: list[Arg] = []
    if cost != 1:
        words += ["COST", cost]
    if peek:
        words.append("PEEK")
    return words


@dataclass(frozen=True)
class Command(Generic[T]):
    """A command to send, and how to read its reply."""

    name: str
    args: tuple[Arg, ...]
    parse: Callable[[Any], T]

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

    return Command("RL.ALL", (len(keys), *keys, *specs, *option_words(**options)), parse)


def acquire(key: Key, limit: int, lease: Duration, lease_id: str | None = None) -> Command[Lease]:
    """``RL.ACQUIRE key limit lease [ID id]``."""
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
    return Command("RL.ACQUIRE", tuple(words), parse)


def release(key: Key, lease_id: str) -> Command[bool]:
    """``RL.RELEASE key id``: True if that id held a live lease."""
    return Command("RL.RELEASE", (key, lease_id), lambda reply: int(reply) == 1)


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
