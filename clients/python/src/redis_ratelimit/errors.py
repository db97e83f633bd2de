"""Exceptions, named after what went wrong.

redis-py raises one ``ResponseError`` for every error reply; these subclass
it (so existing ``except redis.ResponseError`` still catches them) and say
which kind it was, with the command's name in front of the server's words.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from .decision import Decision


class RateLimitError(ResponseError):
    """The server refused a rate-limit command; nothing changed."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(f"{command}: {message}")
        self.command = command
        #: The server's words, without the command's name.
        self.server_message = message


class InvalidArgumentError(RateLimitError, ValueError):
    """A parameter or option the module does not accept (``ERR <parameter>
    must be ...``, ``ERR syntax error: ...``)."""


class PolicyNotFoundError(InvalidArgumentError):
    """``RL.CHECK`` named a policy the server does not hold (never
    defined, or deleted): ``ERR no policy 'name'``. ``policy`` is its name.
    Never answered as allowed: define it (`sync_policies`) or check another."""

    def __init__(self, command: str, message: str, policy: str) -> None:
        super().__init__(command, message)
        self.policy = policy


class WrongTypeError(RateLimitError, TypeError):
    """The key holds something else: a string, a list, or another
    algorithm's state (``WRONGTYPE``)."""


class ModuleNotLoadedError(RateLimitError):
    """The server does not know the command: the redis-ratelimit module is
    not loaded there (``--loadmodule /path/to/libredis_ratelimit.so``)."""


class UnblockedError(RateLimitError):
    """The server ended a ``BLOCK`` wait before a slot or a turn came
    (``UNBLOCKED``): a failover made the primary a replica (``CLUSTER
    FAILOVER``, Sentinel), or an operator ran ``CLIENT UNBLOCK ... ERROR``.
    Nothing was taken; ask again (on the new primary)."""


_NO_POLICY = re.compile(r"no policy '(.*)'")


def translate(error: ResponseError, command: str) -> ResponseError:
    """The exception to raise for an error reply to `command`.

    Only plain ``ResponseError``\\ s are translated: redis-py's own
    subclasses (``ReadOnlyError``, ``NoPermissionError``, ...) already say
    what they are. redis-py strips the ``ERR`` prefix; ``WRONGTYPE`` stays.
    """
    if type(error) is not ResponseError:
        return error
    message = str(error).strip()
    if message.startswith("WRONGTYPE"):
        return WrongTypeError(command, message)
    if message.startswith("UNBLOCKED"):
        return UnblockedError(command, message)
    named = _NO_POLICY.match(message)
    if named is not None:
        return PolicyNotFoundError(command, message, named.group(1))
    if message.startswith("unknown command"):
        return ModuleNotLoadedError(
            command, f"{message} (is the redis-ratelimit module loaded on this server?)"
        )
    return InvalidArgumentError(command, message)


class RateLimitExceeded(Exception):
    """A request was denied, where the caller chose to be told by an
    exception (``hold``, the Flask decorator): ``decision`` says when to
    retry and carries the headers."""

    def __init__(self, decision: Decision) -> None:
        retry = decision.retry_after
        when = "never" if retry is None else f"in {retry.total_seconds():g} s"
        super().__init__(f"rate limit exceeded: retry {when}")
        self.decision = decision
