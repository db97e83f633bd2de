"""Who a request counts against: API keys nobody issued, IPv6 addresses
and subnets, addresses that are not addresses (issue 30, items 11, 15)."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from redis_ratelimit import FixedWindow
from redis_ratelimit.web import (
    RateLimitMiddleware,
    api_key,
    client_ip,
    client_subnet,
    core,
    forwarded_ip,
    ip_identity,
)

from .apps import flask_app, wsgi

ISSUED = {"k-alice", "k-bob"}


def test_invented_api_keys_bypass_the_address_limit_without_a_validator(
    r: redis.Redis,
) -> None:
    # What the docs warn about: each invented key is a fresh identity.
    http = wsgi(flask_app(), r, limits=FixedWindow(3, "1h"), key=api_key(), scope="plain")
    codes = [http.get("/hello", headers={"X-Api-Key": f"rot{i}"}).status_code for i in range(10)]
    assert codes == [200] * 10


def test_with_a_validator_unknown_keys_are_limited_by_address(r: redis.Redis) -> None:
    key = api_key(valid=ISSUED.__contains__)
    http = wsgi(flask_app(), r, limits=FixedWindow(3, "1h"), key=key)
    invented = [http.get("/hello", headers={"X-Api-Key": f"rot{i}"}).status_code for i in range(30)]
    assert invented == [200] * 3 + [429] * 27
    # An issued key has its own limit, apart from the address's.
    issued = [http.get("/hello", headers={"X-Api-Key": "k-alice"}).status_code for _ in range(4)]
    assert issued == [200, 200, 200, 429]
    assert sorted(r.keys()) == [
        b"rl:{ip:127.0.0.1}:fixedwindow",
        b"rl:{key:" + hashlib.sha256(b"k-alice").hexdigest()[:32].encode() + b"}:fixedwindow",
    ]


def test_one_ipv6_address_is_one_identity_however_it_is_written(r: redis.Redis) -> None:
    spellings = ["2001:db8::1", "2001:db8:0:0::1", "2001:0db8::0001", "[2001:db8::1]"]
    spellings += ["[2001:db8::1]:8443", "2001:DB8::1"]
    key = forwarded_ip(ipv6_subnet=128)
    http = wsgi(flask_app(), r, limits=FixedWindow(3, "1h"), key=key)
    codes = [http.get("/hello", headers={"X-Forwarded-For": a}).status_code for a in spellings]
    assert codes == [200, 200, 200, 429, 429, 429]
    assert r.keys() == [b"rl:{ip:2001:db8::1}:fixedwindow"]


def test_ipv6_addresses_are_grouped_by_their_64_by_default(r: redis.Redis) -> None:
    one_64 = [f"2001:db8:0:7:{i:x}::{i:x}" for i in range(1, 6)]
    http = wsgi(flask_app(), r, limits=FixedWindow(3, "1h"), key=forwarded_ip())
    codes = [http.get("/hello", headers={"X-Forwarded-For": a}).status_code for a in one_64]
    assert codes == [200, 200, 200, 429, 429]
    assert http.get("/hello", headers={"X-Forwarded-For": "2001:db8:0:8::1"}).status_code == 200
    assert sorted(r.keys()) == [
        b"rl:{ip:2001:db8:0:7::/64}:fixedwindow",
        b"rl:{ip:2001:db8:0:8::/64}:fixedwindow",
    ]


@pytest.mark.parametrize(
    ("written", "subnet", "identity"),
    [
        ("2001:db8:aa:bb01::1", 56, "ip:2001:db8:aa:bb00::/56"),
        ("2001:db8:aa:bbff:1:2:3:4", 56, "ip:2001:db8:aa:bb00::/56"),
        ("::ffff:192.0.2.7", 64, "ip:192.0.2.7"),
        ("192.0.2.7:51000", 64, "ip:192.0.2.7"),
        ("fe80::1%eth0", 128, "ip:fe80::1"),
        ("not-an-ip", 64, "missing"),
        ("2001:db8::zz", 64, "missing"),
        ("[2001:db8::1", 64, "missing"),
        ("", 64, "missing"),
    ],
)
def test_ip_identity_reads_addresses_exactly(written: str, subnet: int, identity: str) -> None:
    assert ip_identity(written, subnet) == identity


def test_not_an_ip_is_never_an_identity_of_its_own(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    http = wsgi(flask_app(), r, limits=FixedWindow(3, "1h"), key=forwarded_ip())
    forged = [f"not-an-ip-{i}" for i in range(5)]
    codes = [http.get("/hello", headers={"X-Forwarded-For": f}).status_code for f in forged]
    assert codes == [200, 200, 200, 429, 429]  # one shared identity, not five
    assert r.keys() == [b"rl:{missing}:fixedwindow"]
    assert "not an IP address" in caplog.text


def test_a_subnet_other_than_the_default_is_one_argument() -> None:
    with pytest.raises(ValueError, match="ipv6_subnet must be from 1 to 128"):
        client_subnet(0)
    with pytest.raises(ValueError, match="ipv6_subnet"):
        forwarded_ip(ipv6_subnet=129)


async def hello(request: Any) -> PlainTextResponse:
    return PlainTextResponse(request.client.host)


@pytest.mark.anyio
async def test_a_server_that_trusts_every_forwarded_hop_is_warned_about(
    ar: redis.asyncio.Redis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvicorn --proxy-headers --forwarded-allow-ips='*': the client's own
    # leftmost entry becomes the peer address.
    monkeypatch.setattr(core, "_warned_trust_all", False)  # once per process
    app = Starlette(
        routes=[Route("/", hello)],
        middleware=[
            Middleware(ProxyHeadersMiddleware, trusted_hosts="*"),
            Middleware(RateLimitMiddleware, redis=ar, limits=FixedWindow(3, "1h"), key=client_ip),
        ],
    )
    transport = httpx.ASGITransport(app=app, client=("10.0.0.2", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        chosen = [
            await http.get("/", headers={"X-Forwarded-For": f"198.51.100.{i}, 10.0.0.1"})
            for i in range(5)
        ]
    assert [c.text for c in chosen] == [f"198.51.100.{i}" for i in range(5)]
    assert caplog.text.count("any client can choose its identity") == 1
