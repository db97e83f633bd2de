"""The examples in the documentation, run as they are written: the
FastAPI app of clients/python/README.md and the Flask service of
docs/http-example.md, each against the test server (its port put in place
of 6379) and driven as their walkthroughs say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from redis_ratelimit.web.core import QUOTA_EXCEEDED

from .servers import REPO, Server


def example(path: Path, marker: str, port: int) -> dict[str, Any]:
    """Runs the Python block after `<!-- marker -->` in `path`, connected to
    the test server; returns its globals."""
    match = re.search(rf"<!-- {marker} -->\s*```python\n(.*?)```", path.read_text(), re.S)
    assert match, f"the {marker} example is missing from {path}"
    code = match.group(1)
    assert "port=6379" in code
    namespace: dict[str, Any] = {"__name__": marker}
    exec(compile(code.replace("port=6379", f"port={port}"), str(path), "exec"), namespace)
    return namespace


@pytest.mark.anyio
async def test_the_readmes_fastapi_example_limits_as_it_says(
    server: Server, r: redis.Redis
) -> None:
    readme = REPO / "clients/python/README.md"
    app = example(readme, "fastapi-example", server.port)["app"]
    code = re.search(r"<!-- fastapi-example -->\s*```python\n(.*?)```", readme.read_text(), re.S)
    assert code and len([line for line in code.group(1).splitlines() if line.strip()]) <= 10
    transport = httpx.ASGITransport(app=app, client=("10.0.0.7", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        responses = [await http.get("/hello", headers={"X-Api-Key": "demo"}) for _ in range(11)]
        other = await http.get("/hello", headers={"X-Api-Key": "another"})
    assert [r.status_code for r in responses] == [200] * 10 + [429]
    assert responses[0].json() == {"hello": "world"}
    assert (
        responses[0].headers["ratelimit-policy"]
        == '"tokenbucket";q=10;w=10, "per-minute";q=100;w=60'
    )
    assert re.fullmatch(
        r'"tokenbucket";r=9;t=1, "per-minute";r=99;t=\d+', responses[0].headers["ratelimit"]
    )
    denied = responses[-1]
    assert (denied.headers["retry-after"], denied.headers["x-ratelimit-remaining"]) == ("1", "0")
    # t is each limit's time until more quota: a token in 1 s. Retry-After
    # and X-RateLimit-* speak for the bucket, which denied.
    assert re.fullmatch(
        r'"tokenbucket";r=0;t=1, "per-minute";r=90;t=\d+', denied.headers["ratelimit"]
    )
    assert denied.headers["x-ratelimit-reset"] == "1"
    assert denied.headers["content-type"] == "application/problem+json"
    assert denied.json()["detail"] == "Too many requests: retry in 1 s."
    assert other.status_code == 200


def test_the_http_examples_flask_service_answers_as_its_walkthrough_shows(
    server: Server, r: redis.Redis
) -> None:
    app = example(REPO / "docs/http-example.md", "flask-service", server.port)["app"]
    http = app.test_client()
    hello = [http.get("/api/hello", headers={"X-Api-Key": "demo"}) for _ in range(4)]
    assert [h.status_code for h in hello] == [200, 200, 200, 429]
    assert [h.headers["X-RateLimit-Remaining"] for h in hello] == ["2", "1", "0", "0"]
    assert [h.headers["RateLimit"] for h in hello[:3]] == [
        '"hello";r=2;t=1',
        '"hello";r=1;t=1',
        '"hello";r=0;t=1',
    ]
    denied = hello[3]
    assert denied.status == "429 Too Many Requests"
    assert dict(denied.headers) == {
        "Content-Type": "application/problem+json",
        "Content-Length": str(len(denied.data)),
        "X-RateLimit-Limit": "3",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "1",
        "RateLimit-Policy": '"hello";q=3;w=3',
        "RateLimit": '"hello";r=0;t=1',
        "Retry-After": "1",
    }
    assert denied.json["type"] == QUOTA_EXCEEDED
    assert r.keys() == [b"rl:{key:2a97516c354b68848cdbd8f54a226a0a}:flask-service.hello:hello"]

    report = [http.get("/api/report") for _ in range(4)]
    assert [p.status_code for p in report] == [200, 200, 200, 429]
    assert report[3].headers["RateLimit-Policy"] == '"second";q=3;w=1, "minute";q=6;w=60'
    assert re.fullmatch(r'"second";r=0;t=1, "minute";r=3;t=\d+', report[3].headers["RateLimit"])
    assert re.fullmatch(r'"second";r=2;t=1, "minute";r=5;t=\d+', report[0].headers["RateLimit"])
