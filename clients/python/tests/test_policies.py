"""Named policies (issue 32): checked by name as inline, in the middleware,
and synced from a file or a dict by `sync_policies`, against real servers
(the file's first tests need none)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import flask
import httpx
import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster
from redis.crc import key_slot
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from redis_ratelimit import (
    GCRA,
    AsyncRateLimiter,
    Decision,
    FixedWindow,
    LeakyBucket,
    Limit,
    NamedPolicy,
    PolicyNotFoundError,
    PolicySyncError,
    RateLimiter,
    SlidingCounter,
    SlidingLog,
    TokenBucket,
    load_policies,
    policy_keys,
    sync_policies,
)
from redis_ratelimit.policies import definition_words, parse_definition
from redis_ratelimit.web import RateLimitMiddleware, RateLimitWSGIMiddleware, Rule

from .servers import Cluster, Server, wait_for
from .test_frameworks import django_settings

__all__ = ["django_settings"]

INLINE: list[Limit] = [
    TokenBucket(3, 1),
    SlidingCounter(3, "1m", 4),
    FixedWindow(3, "1h"),
    SlidingLog(3, 60),
    LeakyBucket(3, 1),
    GCRA(2, 1, "1s"),
]

PLANS: dict[str, Any] = {
    "plan:free": {"tiers": [{"algorithm": "fixedwindow", "limit": 100, "window": "1h"}]},
    "plan:pro": {
        "tiers": [
            {"algorithm": "tokenbucket", "capacity": 20, "rate": 5},
            {"algorithm": "fixedwindow", "limit": 10000, "window": "1d"},
        ]
    },
    "plan:enterprise": "TOKENBUCKET 200 50 SLIDINGCOUNTER 1000000 1d PRECISION 24",
}


# Without a server ---------------------------------------------------------------


@pytest.mark.parametrize("limit", INLINE, ids=[type(x).__name__ for x in INLINE])
def test_a_definitions_words_read_back_to_the_inline_limit(limit: Limit) -> None:
    words = [limit.word, *limit.params(), "PENALTY", "30s", "SHADOW", "ON-CHANGE", "reset"]
    definition = parse_definition([str(w).encode() for w in words])
    (tier,) = definition.tiers
    assert (tier.word, tier.policy()) == (limit.word, limit.policy())
    assert [str(p) for p in tier.params()] == [str(p) for p in limit.params()]
    assert (definition.penalty, definition.shadow, definition.on_change) == ("30s", True, "RESET")
    assert parse_definition(definition.words()) == definition


def test_the_structured_form_is_the_limit_classes_fields() -> None:
    assert definition_words(PLANS["plan:pro"]) == [
        "TOKENBUCKET", 20, "5", "FIXEDWINDOW", 10000, "1d",
    ]  # fmt: skip
    assert definition_words("TOKENBUCKET 1 2") == ["TOKENBUCKET", "1", "2"]

    def window(w: Any) -> Any:
        tier = {"algorithm": "fixedwindow", "limit": 1, "window": w}
        return definition_words({"tiers": [tier]})[2]

    # Durations in a file are the server's: a number, or a string without a unit, is seconds.
    assert [window(60), window("60"), window("1m")] == ["60", "60", "1m"]
    assert definition_words(["GCRA", 1, 2, "1s"]) == ["GCRA", 1, 2, "1s"]


@pytest.mark.parametrize(
    ("definition", "says"),
    [
        ({"tiers": []}, "'tiers' must be a non-empty list"),
        ({"tiers": [{"algorithm": "bucket"}]}, "unknown algorithm 'bucket'"),
        ({"tiers": [{"algorithm": "tokenbucket", "capacity": 1}]}, "tier 0 (tokenbucket)"),
        ({"tiers": [{"algorithm": "fixedwindow", "limit": 0, "window": 1}]}, "limit"),
        ({"tiers": [{"algorithm": "gcra", "burst": 1, "count": 1, "period": 1}], "x": 1}, "'x'"),
        ({"tiers": [{"algorithm": "slidinglog", "limit": 1, "window": 1}], "on_change": "y"}, "y"),
        ({"tiers": [{"algorithm": "slidinglog", "limit": 1, "window": 1}], "shadow": 1}, "shadow"),
        ([], "empty"),
        ([["nested"]], "strings or numbers"),
    ],
)
def test_a_bad_structured_definition_says_what_is_wrong(definition: Any, says: str) -> None:
    with pytest.raises((ValueError, TypeError), match=None) as raised:
        definition_words(definition)
    assert says in str(raised.value)


def test_a_policy_of_several_tiers_keys_each_tier_in_one_slot() -> None:
    assert policy_keys("user:42", 1) == ["user:42"]
    assert policy_keys("user:42", 3) == ["{user:42}:0", "{user:42}:1", "{user:42}:2"]
    tagged = policy_keys("rl:{ip:10.0.0.7}:api", 2)
    assert tagged == ["rl:{ip:10.0.0.7}:api:0", "rl:{ip:10.0.0.7}:api:1"]
    for keys in (policy_keys("user:42", 3), tagged):
        assert len({key_slot(str(k).encode()) for k in keys}) == 1


def test_a_rule_leaves_penalty_and_shadow_to_its_policy() -> None:
    for option in ({"penalty": "1h"}, {"shadow": True}):
        with pytest.raises(ValueError, match="the policy's own"):
            Rule([FixedWindow(1, 60), NamedPolicy("plan:free")], **option)


def test_a_named_policys_name_is_checked_when_made() -> None:
    for bad in ("", "a b", "x" * 129, "tab\there", "é"):
        with pytest.raises(ValueError, match="policy name"):
            NamedPolicy(bad)
    with pytest.raises(ValueError, match="label="):
        NamedPolicy(lambda request: "plan:free")
    with pytest.raises(TypeError, match="web Rule"):
        NamedPolicy(lambda request: "plan:free", label="plan").static_name()


def test_policies_load_from_json_and_yaml_files(tmp_path: Path) -> None:
    (tmp_path / "plans.json").write_text(json.dumps(PLANS))
    assert load_policies(tmp_path / "plans.json") == PLANS
    (tmp_path / "plans.yaml").write_text(
        "plan:free:\n  tiers:\n    - {algorithm: fixedwindow, limit: 100, window: 1h}\n"
    )
    assert load_policies(str(tmp_path / "plans.yaml")) == {"plan:free": PLANS["plan:free"]}
    with pytest.raises(ValueError, match="mapping of name"):
        load_policies({1: "x"})  # type: ignore[dict-item]


def test_yaml_without_pyyaml_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plans.yml").write_text("a: b\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
    with pytest.raises(ValueError, match="PyYAML is not installed"):
        load_policies(tmp_path / "plans.yml")


# Against a server ----------------------------------------------------------------


def cmd(client: Any, *words: Any, **route: Any) -> Any:
    """A command through redis-py (whose execute_command is unannotated)."""
    return client.execute_command(*words, **route)


def primaries(client: RedisCluster) -> list[Any]:
    return client.get_primaries()  # type: ignore[no-untyped-call,no-any-return]


def drop_policies(client: Any) -> None:
    nodes = primaries(client) if isinstance(client, RedisCluster) else [None]
    for node in nodes:
        route = {} if node is None else {"target_nodes": node}
        for name, _ in cmd(client, "RL.POLICY", "LIST", **route):
            cmd(client, "RL.POLICY", "DEL", name, **route)


@pytest.fixture
def clean(r: redis.Redis) -> Iterator[redis.Redis]:
    """The server without policies (FLUSHALL leaves them), before and after."""
    drop_policies(r)
    yield r
    drop_policies(r)


def define(r: redis.Redis, name: str, *words: Any) -> int:
    return int(cmd(r, "RL.POLICY", "SET", name, *words))


def same_but_name(by_name: Decision, inline: Decision, name: str) -> None:
    """`by_name` is `inline` but for its policy's name (and the few
    milliseconds between the two checks)."""
    fields = ("allowed", "limit", "remaining")
    assert [getattr(by_name, f) for f in fields] == [getattr(inline, f) for f in fields]
    assert (by_name.retry_after is None) == (inline.retry_after is None)
    assert inline.policy is not None
    assert by_name.policy == replace(inline.policy, name=name)
    assert by_name.policy.refill == inline.policy.refill
    assert by_name.headers().keys() == inline.headers().keys()


@pytest.mark.parametrize("limit", INLINE, ids=[type(x).__name__ for x in INLINE])
def test_a_check_by_name_answers_as_the_inline_limit(clean: redis.Redis, limit: Limit) -> None:
    limiter = RateLimiter(clean)
    assert define(clean, "p", limit.word, *limit.params()) >= 1
    for _ in range(limit.quota + 1):
        same_but_name(limiter.check("a", NamedPolicy("p")), limiter.check("b", limit), "p")
    same_but_name(limiter.peek("a", NamedPolicy("p")), limiter.peek("b", limit), "p")


def test_a_policy_of_three_tiers_answers_as_rl_all(clean: redis.Redis) -> None:
    limiter = RateLimiter(clean)
    tiers = [TokenBucket(5, 1), FixedWindow(3, "1h"), SlidingLog(4, 60)]
    define(clean, "three", *(w for t in tiers for w in (t.word, *t.params())))
    inline_keys = policy_keys("b", 3)
    for _ in range(4):
        by_name = limiter.check("a", NamedPolicy("three"), cost=1)
        inline = limiter.check_all(list(zip(inline_keys, tiers, strict=True)))
        assert [(t.allowed, t.limit, t.remaining) for t in by_name.tiers] == [
            (t.allowed, t.limit, t.remaining) for t in inline.tiers
        ]
        assert (by_name.allowed, by_name.remaining) == (inline.allowed, inline.remaining)
        assert [t.policy.name for t in by_name.tiers if t.policy] == [
            "three:0",
            "three:1",
            "three:2",
        ]
    assert not by_name.allowed  # the fixed window's 3 bound
    assert sorted(clean.keys("{a}:*")) == [b"{a}:0", b"{a}:1", b"{a}:2"]


def test_a_replica_answers_a_peek_by_name(clean: redis.Redis) -> None:
    port = clean.connection_pool.connection_kwargs["port"]
    replica = Server(args=("--replicaof", "127.0.0.1", str(port)))
    try:
        follower = redis.Redis(port=replica.port)
        define(clean, "plan:read", "FIXEDWINDOW", 5, "1h")
        limiter = RateLimiter(clean)
        limiter.check("k", NamedPolicy("plan:read"), cost=2)
        wait_for("the replica to hold the key", 10, lambda: bool(follower.exists("k")))
        peeked = RateLimiter(follower).peek("k", NamedPolicy("plan:read"))
        assert (peeked.allowed, peeked.limit, peeked.remaining) == (True, 5, 3)
        assert peeked.policy is not None and peeked.policy.window is not None
        follower.close()
    finally:
        replica.stop()


def test_a_check_by_a_deleted_policy_raises_naming_it(clean: redis.Redis) -> None:
    limiter = RateLimiter(clean)
    define(clean, "plan:gone", "FIXEDWINDOW", 5, "1h")
    assert limiter.check("a", NamedPolicy("plan:gone")).allowed
    cmd(clean, "RL.POLICY", "DEL", "plan:gone")
    with pytest.raises(PolicyNotFoundError, match="plan:gone") as raised:
        limiter.check("a", NamedPolicy("plan:gone"))
    assert raised.value.policy == "plan:gone"
    with pytest.raises(PolicyNotFoundError, match="plan:never"):
        limiter.check("a", NamedPolicy("plan:never"))


def test_a_changed_policy_is_followed_without_a_new_client(clean: redis.Redis) -> None:
    limiter = RateLimiter(clean)
    define(clean, "plan", "FIXEDWINDOW", 2, "1h")
    assert limiter.check("a", NamedPolicy("plan")).limit == 2
    define(clean, "plan", "FIXEDWINDOW", 5, "1h")
    first = limiter.check("a", NamedPolicy("plan"))
    assert first.limit == 5  # the server's answer: at once
    second = limiter.check("a", NamedPolicy("plan"))
    assert second.policy is not None and second.policy.quota == 5  # the headers: next check


# The middleware -------------------------------------------------------------------


def flask_app(r: redis.Redis, rule: Rule) -> flask.Flask:
    app = flask.Flask(__name__)
    app.add_url_rule("/", "hello", lambda: "hello")
    app.wsgi_app = RateLimitWSGIMiddleware(app.wsgi_app, redis=r, rule=rule)  # type: ignore[method-assign]
    return app


def test_the_wsgi_middleware_limits_by_a_policy_name(clean: redis.Redis) -> None:
    define(clean, "plan:free", "FIXEDWINDOW", 2, "1h")
    app = flask_app(clean, Rule(NamedPolicy("plan:free")))
    env = {"REMOTE_ADDR": "10.0.0.7"}
    codes = [app.test_client().get("/", environ_base=env) for _ in range(3)]
    assert [c.status_code for c in codes] == [200, 200, 429]
    denied = codes[2]
    assert denied.headers["RateLimit-Policy"] == '"plan:free";q=2;w=3600'
    assert denied.headers["X-RateLimit-Limit"] == "2"
    assert denied.headers["RateLimit"].startswith('"plan:free";r=0;t=')
    assert int(denied.headers["Retry-After"]) > 0
    inline = flask_app(clean, Rule(FixedWindow(2, "1h", name="plan:free"), prefix="inline"))
    same = [inline.test_client().get("/", environ_base=env) for _ in range(3)][2]
    assert same.headers["RateLimit-Policy"] == denied.headers["RateLimit-Policy"]
    assert clean.exists("rl:{ip:10.0.0.7}:plan:free")


def test_a_rule_follows_a_policy_changed_in_redis(clean: redis.Redis) -> None:
    define(clean, "plan:free", "FIXEDWINDOW", 1, "1h")
    app = flask_app(clean, Rule(NamedPolicy("plan:free"), denial_cache=False))
    client, env = app.test_client(), {"REMOTE_ADDR": "10.0.0.7"}
    assert [client.get("/", environ_base=env).status_code for _ in range(2)] == [200, 429]
    define(clean, "plan:free", "FIXEDWINDOW", 3, "1h")  # raised, the app untouched
    after = [client.get("/", environ_base=env) for _ in range(3)]
    assert [a.status_code for a in after] == [200, 200, 429]
    assert after[1].headers["RateLimit-Policy"] == '"plan:free";q=3;w=3600'


@pytest.mark.anyio
async def test_the_asgi_middleware_checks_the_plan_of_each_request(clean: redis.Redis) -> None:
    """A policy per request (the plan its API key is on), of several tiers:
    one key per tier, all in the identity's slot; the rule's keys carry the
    label, so a client moved to another plan keeps its keys."""
    define(clean, "plan:free", "FIXEDWINDOW", 1, "1h")
    define(clean, "plan:pro", "TOKENBUCKET", 3, 1, "FIXEDWINDOW", 1000, "1d")
    plans = {"k1": "free", "k2": "pro"}
    rule = Rule(
        NamedPolicy(lambda req: "plan:" + plans[req.headers["x-api-key"]], label="plan"),
        key=lambda req: "key:" + req.headers["x-api-key"],
    )
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("hi"))])
    port = clean.connection_pool.connection_kwargs["port"]
    async with redis.asyncio.Redis(port=port) as ar:
        asgi = RateLimitMiddleware(app, redis=ar, rule=rule)
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            free = [(await http.get("/", headers={"x-api-key": "k1"})) for _ in range(2)]
            pro = [(await http.get("/", headers={"x-api-key": "k2"})) for _ in range(4)]
    assert [f.status_code for f in free] == [200, 429]
    assert free[1].headers["ratelimit-policy"] == '"plan";q=1;w=3600'
    assert [p.status_code for p in pro] == [200, 200, 200, 429]
    assert pro[0].headers["ratelimit-policy"] == '"plan:0";q=3;w=3, "plan:1";q=1000;w=86400'
    assert sorted(clean.keys("rl:{key:k2}:*")) == [b"rl:{key:k2}:plan:0", b"rl:{key:k2}:plan:1"]


def test_a_rule_on_an_undefined_policy_does_not_start_and_a_deleted_one_fails_its_mode(
    clean: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(PolicyNotFoundError, match="plan:nobody"):
        flask_app(clean, Rule(NamedPolicy("plan:nobody")))
    define(clean, "plan:soon-gone", "FIXEDWINDOW", 5, "1h")
    closed = flask_app(clean, Rule(NamedPolicy("plan:soon-gone"), fail_open=False))
    env = {"REMOTE_ADDR": "10.0.0.7"}
    assert closed.test_client().get("/", environ_base=env).status_code == 200
    cmd(clean, "RL.POLICY", "DEL", "plan:soon-gone")
    assert closed.test_client().get("/", environ_base=env).status_code == 503
    assert "no policy 'plan:soon-gone'" in caplog.text  # logged at ERROR, never a silent allow


@pytest.mark.anyio
async def test_the_asyncio_client_checks_by_name(clean: redis.Redis) -> None:
    define(clean, "plan:async", "TOKENBUCKET", 2, 1, "FIXEDWINDOW", 5, "1h")
    port = clean.connection_pool.connection_kwargs["port"]
    async with redis.asyncio.Redis(port=port) as ar:
        limiter = AsyncRateLimiter(ar)
        decisions = [await limiter.check("u", NamedPolicy("plan:async")) for _ in range(3)]
        peeked = await limiter.peek("u", NamedPolicy("plan:async"))
    assert [d.allowed for d in decisions] == [True, True, False]
    assert [t.policy.name for t in decisions[0].tiers if t.policy] == [
        "plan:async:0",
        "plan:async:1",
    ]
    assert peeked.tiers[1].remaining == 3  # the fixed window: two taken, the denial took nothing


@pytest.mark.anyio
async def test_the_fastapi_dependency_limits_by_a_policy(clean: redis.Redis) -> None:
    from fastapi import Depends, FastAPI

    from redis_ratelimit.web.fastapi import RateLimit, RateLimitDenied, denied_handler

    define(clean, "plan:route", "FIXEDWINDOW", 1, "1h")
    port = clean.connection_pool.connection_kwargs["port"]
    async with redis.asyncio.Redis(port=port) as ar:
        app = FastAPI()
        app.add_exception_handler(RateLimitDenied, denied_handler)

        @app.get("/", dependencies=[Depends(RateLimit(ar, NamedPolicy("plan:route")))])
        async def root() -> dict[str, str]:
            return {"hello": "world"}

        transport = httpx.ASGITransport(app=app, client=("10.0.0.7", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            replies = [await http.get("/") for _ in range(2)]
    assert [r.status_code for r in replies] == [200, 429]
    assert replies[1].headers["ratelimit-policy"] == '"plan:route";q=1;w=3600'
    assert clean.exists("rl:{ip:10.0.0.7}:GET /:plan:route")


def test_the_flask_decorator_limits_by_a_policy(clean: redis.Redis) -> None:
    from redis_ratelimit.web.flask import rate_limit

    define(clean, "plan:view", "FIXEDWINDOW", 1, "1h")
    app = flask.Flask(__name__)
    app.add_url_rule("/", "view", rate_limit(clean, NamedPolicy("plan:view"))(lambda: "hi"))
    env = {"REMOTE_ADDR": "10.0.0.7"}
    replies = [app.test_client().get("/", environ_base=env) for _ in range(2)]
    assert [r.status_code for r in replies] == [200, 429]
    assert replies[1].headers["RateLimit-Policy"] == '"plan:view";q=1;w=3600'


def test_the_django_middleware_limits_by_a_policy(
    django_settings: None, clean: redis.Redis
) -> None:
    from django.test import Client, override_settings

    from . import test_frameworks

    define(clean, "plan:site", "FIXEDWINDOW", 2, "1h")
    conf = {"redis": clean, "limits": NamedPolicy("plan:site")}
    middleware = ["redis_ratelimit.web.django.RateLimitMiddleware"]
    from django.urls import clear_url_caches, path

    test_frameworks.urlpatterns[:] = [path("hello", test_frameworks.view)]
    clear_url_caches()
    try:
        with override_settings(MIDDLEWARE=middleware, REDIS_RATELIMIT=conf):
            codes = [Client().get("/hello") for _ in range(3)]
    finally:
        test_frameworks.urlpatterns.clear()
        clear_url_caches()
    assert [c.status_code for c in codes] == [200, 200, 429]
    assert codes[2]["RateLimit-Policy"] == '"plan:site";q=2;w=3600'


# sync_policies ----------------------------------------------------------------


def test_sync_applies_then_a_second_run_changes_nothing(clean: redis.Redis) -> None:
    report = sync_policies(clean, PLANS)
    assert report.by_status("created") == sorted(PLANS)
    assert len(report.digests) == 1
    listed = {n.decode(): v for n, v in cmd(clean, "RL.POLICY", "LIST")}
    assert set(listed) == set(PLANS)
    again = sync_policies(RateLimiter(clean), PLANS)
    assert again.by_status("unchanged") == sorted(PLANS) and not again.by_status("changed")
    assert again.digests == report.digests
    raised = dict(PLANS, **{"plan:free": "FIXEDWINDOW 200 1h"})
    changed = sync_policies(clean, raised)
    (change,) = [c for c in changed.changes if c.status == "changed"]
    assert (change.name, change.new_version) == ("plan:free", listed["plan:free"] + 1)
    assert str(change).endswith(f"changed (version {change.old_version} -> {change.new_version})")
    assert RateLimiter(clean).check("u", NamedPolicy("plan:free")).limit == 200


def test_sync_with_a_scale_strategy_scales_a_key_on_the_next_check(clean: redis.Redis) -> None:
    # The structured form's on_change reaches the module (SCALE and RESET
    # are taken since keys record their policy version), and a second sync
    # of the same file is no change.
    plan = {"tiers": [{"algorithm": "fixedwindow", "limit": 10, "window": "1h"}]}
    sync_policies(clean, {"plan:s": dict(plan, on_change="scale")})
    assert [w.decode() for w in cmd(clean, "RL.POLICY", "GET", "plan:s")[2]][-2:] == [
        "ON-CHANGE",
        "SCALE",
    ]
    assert sync_policies(clean, {"plan:s": dict(plan, on_change="scale")}).by_status(
        "unchanged"
    ) == ["plan:s"]
    limiter = RateLimiter(clean)
    for _ in range(4):
        limiter.check("u", NamedPolicy("plan:s"))
    raised = {"tiers": [{"algorithm": "fixedwindow", "limit": 20, "window": "1h"}]}
    sync_policies(clean, {"plan:s": dict(raised, on_change="scale")})
    # 6 of 10 left becomes 12 of 20, and this check takes one.
    decision = limiter.check("u", NamedPolicy("plan:s"))
    assert (decision.limit, decision.remaining) == (20, 11)


def test_sync_from_a_file_with_prune_and_dry_run(clean: redis.Redis, tmp_path: Path) -> None:
    define(clean, "plan:legacy", "FIXEDWINDOW", 1, "1h")
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(PLANS))
    dry = sync_policies(clean, path, prune=True, dry_run=True)
    assert dry.by_status("created") == sorted(PLANS) and dry.by_status("deleted") == ["plan:legacy"]
    listed = [n for n, _ in cmd(clean, "RL.POLICY", "LIST")]
    assert listed == [b"plan:legacy"]  # the dry run changed nothing
    sync_policies(clean, path, prune=True)
    assert sorted(n.decode() for n, _ in cmd(clean, "RL.POLICY", "LIST")) == sorted(PLANS)


def test_a_bad_file_applies_nothing_and_lists_every_error(clean: redis.Redis) -> None:
    sync_policies(clean, {"plan:free": PLANS["plan:free"]})
    before = cmd(clean, "RL.POLICY", "DIGEST")
    bad = dict(
        PLANS,
        **{
            "plan:free": "FIXEDWINDOW 1 1h",  # a good change, not applied either
            "plan:broken": "TOKENBUCKET 0 1",  # the server refuses it
            "plan:typo": "TOKENBUCKIT 1 1",  # no such algorithm
            "plan:struct": {"tiers": [{"algorithm": "fixedwindow", "limit": 1}]},  # client-side
            "bad name": "FIXEDWINDOW 1 1h",
        },
    )
    with pytest.raises(PolicySyncError, match="no policy applied") as raised:
        sync_policies(clean, bad)
    errors = {name: message for name, _, message in raised.value.report.errors}
    assert set(errors) == {"plan:broken", "plan:typo", "plan:struct", "bad name"}
    assert "capacity" in errors["plan:broken"]
    assert cmd(clean, "RL.POLICY", "DIGEST") == before
    assert [n for n, _ in cmd(clean, "RL.POLICY", "LIST")] == [b"plan:free"]


def test_servers_left_holding_different_policies_are_an_error(clean: redis.Redis) -> None:
    other = Server()
    try:
        second = redis.Redis(port=other.port)
        define(second, "plan:local", "FIXEDWINDOW", 1, "1h")  # only the second holds it
        with pytest.raises(PolicySyncError, match="different policies") as raised:
            sync_policies([clean, second], PLANS)
        digests = raised.value.report.digests
        assert len(digests) == 2 and len(set(digests.values())) == 2
        report = sync_policies([clean, second], PLANS, prune=True)
        assert report.agreed and report.by_status("deleted") == ["plan:local"]
        second.close()
    finally:
        other.stop()


# On a cluster ----------------------------------------------------------------


@pytest.fixture
def rc(cluster: Cluster) -> Iterator[RedisCluster]:
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    drop_policies(client)
    yield client
    drop_policies(client)
    client.close()


def test_sync_applies_to_every_primary_and_their_digests_agree(rc: RedisCluster) -> None:
    report = sync_policies(rc, PLANS)
    nodes = primaries(rc)
    assert len(report.digests) == len(nodes) == 3
    assert report.agreed and len(set(report.digests.values())) == 1
    assert len(report.changes) == 3 * len(PLANS)
    for node in nodes:
        listed = cmd(rc, "RL.POLICY", "LIST", target_nodes=node)
        assert sorted(n.decode() for n, _ in listed) == sorted(PLANS)
    limiter = RateLimiter(rc)
    for user in ("user:1", "user:2", "user:3", "user:4"):
        decision = limiter.check(user, NamedPolicy("plan:pro"))
        assert decision.allowed and len(decision.tiers) == 2
    again = sync_policies(rc, PLANS)
    assert again.by_status("unchanged") == sorted(PLANS) and again.digests == report.digests


def test_sync_refuses_on_every_primary_before_applying(rc: RedisCluster) -> None:
    with pytest.raises(PolicySyncError) as raised:
        sync_policies(rc, {"ok": "FIXEDWINDOW 1 1h", "bad": "FIXEDWINDOW 0 1h"})
    assert {node for name, node, _ in raised.value.report.errors if name == "bad"} == {
        f"{n.host}:{n.port}" for n in primaries(rc)
    }
    for node in primaries(rc):
        assert cmd(rc, "RL.POLICY", "LIST", target_nodes=node) == []
