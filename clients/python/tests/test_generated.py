"""Generated code is up to date: the clients' methods per algorithm come
from `limits.ALGORITHMS`, and the asyncio client from the sync one
(`tools/unasync.py`), so an algorithm is its class and a method is written
once. Each test fails until the tool is run after a change."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import redis_ratelimit
from redis_ratelimit import AsyncRateLimiter, RateLimiter
from redis_ratelimit.limits import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src/redis_ratelimit"


def tool() -> Any:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "tools/unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_clients_are_what_the_tool_makes() -> None:
    client, async_client = tool().generated()
    hint = "out of date: run `python tools/unasync.py` in clients/python"
    assert client == (PACKAGE / "client.py").read_text(), "client.py is " + hint
    assert async_client == (PACKAGE / "async_client.py").read_text(), "async_client.py is " + hint


def test_every_algorithm_has_its_method_in_both_clients_and_is_exported() -> None:
    unasync = tool()
    for cls in ALGORITHMS:
        name = unasync.method_name(cls)
        assert callable(getattr(RateLimiter, name)) and callable(getattr(AsyncRateLimiter, name))
        assert getattr(redis_ratelimit, cls.__name__) is cls
        assert cls.__name__ in redis_ratelimit.__all__
