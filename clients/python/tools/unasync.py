"""Writes ``async_client.py`` from ``client.py``: the asyncio client is the
sync one with ``async def`` methods that ``await`` what they call, over
redis-py's asyncio classes. Run ``python tools/unasync.py`` after changing
``client.py``; ``tests/test_generated.py`` fails until it is run.

Lines between ``# sync only: begin`` and ``# sync only: end`` are left out.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "redis_ratelimit"

#: Whole-text replacements, in order: what differs besides async and await.
REPLACE = [
    (
        '"""The sync client: one method per command, over ``redis.Redis`` or\n'
        "``redis.cluster.RedisCluster``.",
        '"""The asyncio client: one method per command, over ``redis.asyncio.Redis``\n'
        "or ``redis.asyncio.cluster.RedisCluster``.",
    ),
    (
        "class only sends it. The asyncio client, `async_client`, is generated from\n"
        "this file (``python tools/unasync.py``; a test checks it is up to date), so\n"
        "a method written here once is in both.",
        "class only sends it and awaits the reply. Generated from ``client.py`` by\n"
        "``tools/unasync.py``: change that file, then run the tool.",
    ),
    ("from collections.abc import Iterator", "from collections.abc import AsyncIterator"),
    ("from contextlib import contextmanager", "from contextlib import asynccontextmanager"),
    ("from redis.cluster import RedisCluster", "from redis.asyncio.cluster import RedisCluster"),
    ("    from redis import Redis", "    from redis.asyncio import Redis"),
    ("from .kinds import require_sync", "from .kinds import require_async"),
    ("class RateLimiter:", "class AsyncRateLimiter:"),
    (
        '    """Rate-limit commands over a redis-py sync client: ``redis.Redis`` or\n'
        "    ``redis.cluster.RedisCluster``.",
        '    """Rate-limit commands over a redis-py asyncio client:\n'
        "    ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``.",
    ),
    (
        'require_sync(redis, type(self).__name__, "AsyncRateLimiter")',
        'require_async(redis, type(self).__name__, "RateLimiter")',
    ),
    ("    # redis-py leaves the sync execute_command unannotated.\n", ""),
    ("  # type: ignore[no-untyped-call]", ""),
    ("@contextmanager", "@asynccontextmanager"),
    ("-> Iterator[", "-> AsyncIterator["),
]

#: The calls that are coroutines in the asyncio client.
AWAITED = re.compile(r"(?<![\w.])(self\.(?:run|check|acquire|release|redis\.execute_command))\(")
METHOD = re.compile(r"^    def (?!__init__|_socket_timeout)", re.M)
SYNC_ONLY = re.compile(r"\n *# sync only: begin\n.*?# sync only: end\n", re.S)


def unasync(text: str) -> str:
    """The asyncio client's source, from the sync client's."""
    text = SYNC_ONLY.sub("\n", text)
    for old, new in REPLACE:
        if old not in text:
            raise SystemExit(f"tools/unasync.py: {old!r} is no longer in client.py")
        text = text.replace(old, new)
    text = METHOD.sub("    async def ", text)
    text = AWAITED.sub(r"await \1(", text)
    # Statements that end up longer than the line limit are wrapped by ruff
    # format, which the Makefile runs on the result.
    return text


def main() -> None:
    source = (PACKAGE / "client.py").read_text()
    target = PACKAGE / "async_client.py"
    target.write_text(unasync(source))
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
