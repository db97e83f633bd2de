"""Writes the clients' generated code, then formats it with ruff:

- in ``client.py``, between ``# algorithms: begin`` and ``# algorithms: end``,
  one method per class of ``limits.ALGORITHMS`` (``token_bucket(key,
  capacity, rate, **options)`` from ``TokenBucket``'s fields and docstring),
  so a new algorithm is its class and its line in ``ALGORITHMS``;
- ``async_client.py``, from ``client.py``: the asyncio client is the sync
  one with ``async def`` methods that ``await`` what they call, over
  redis-py's asyncio classes; lines between ``# sync only: begin`` and
  ``# sync only: end`` are left out.

Run ``python tools/unasync.py`` (from ``clients/python``, with the package
importable) after changing either; ``tests/test_generated.py`` fails until
it is run.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import subprocess
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
        "this file, and the methods per algorithm in this file from `limits`\n"
        "(``python tools/unasync.py``; a test checks both are up to date), so a\n"
        "method written here once is in both, and an algorithm is its class.",
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


ALGORITHMS_BLOCK = re.compile(
    r"(    # algorithms: begin\n(?:    #[^\n]*\n)*)(.*?)(    # algorithms: end\n)", re.S
)


def method_name(cls: type) -> str:
    """``TokenBucket`` -> ``token_bucket``, ``GCRA`` -> ``gcra``."""
    return re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", cls.__name__).lower()


def algorithm_method(cls: type) -> str:
    """The sync client's method for one algorithm's class."""
    params = [f for f in dataclasses.fields(cls) if f.init and not f.kw_only]
    signature = ["self", "key: Key"]
    for f in params:
        default = "" if f.default is dataclasses.MISSING else f" = {f.default!r}"
        signature.append(f"{f.name}: {f.type}{default}")
    signature.append("**options: Unpack[CheckOptions]")
    doc = inspect.cleandoc(cls.__doc__ or "").replace("\n", "\n        ")
    args = ", ".join(f.name for f in params)
    return (
        f"    def {method_name(cls)}({', '.join(signature)}) -> Decision:\n"
        f'        """{doc}"""\n'
        f"        return self.check(key, limits.{cls.__name__}({args}), **options)\n\n"
    )


def with_algorithms(client: str) -> str:
    """``client.py`` with its methods per algorithm made anew."""
    from redis_ratelimit.limits import ALGORITHMS

    methods = "".join(algorithm_method(cls) for cls in ALGORITHMS)
    made, count = ALGORITHMS_BLOCK.subn(lambda m: m.group(1) + methods + m.group(3), client)
    if count != 1:
        raise SystemExit("tools/unasync.py: client.py lost its '# algorithms:' markers")
    return made


def ruff_format(text: str, name: str) -> str:
    ruff = Path(sys.executable).parent / "ruff"
    return subprocess.run(
        [str(ruff), "format", "--stdin-filename", name, "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parents[1],
    ).stdout


def generated() -> tuple[str, str]:
    """What ``client.py`` and ``async_client.py`` should hold."""
    client = ruff_format(with_algorithms((PACKAGE / "client.py").read_text()), "client.py")
    return client, ruff_format(unasync(client), "async_client.py")


def main() -> None:
    client, async_client = generated()
    (PACKAGE / "client.py").write_text(client)
    (PACKAGE / "async_client.py").write_text(async_client)
    print(f"wrote {PACKAGE / 'client.py'} and {PACKAGE / 'async_client.py'}", file=sys.stderr)


if __name__ == "__main__":
    main()
