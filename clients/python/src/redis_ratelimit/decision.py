"""What a check decided, and the HTTP fields that tell a client about it.

Every check command replies with the same five integers (allowed, limit,
remaining, retry_after_ms, reset_after_ms), so one ``Decision`` serves every
algorithm, ``RL.ALL`` and ``RL.ACQUIRE``, and its headers are written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

from .units import ceil_seconds

#: Header fields by name, ready for any framework's response.
Headers = dict[str, str]

#: The largest integer a structured field carries (RFC 8941 section 3.3.1:
#: at most 15 digits). Every integer of every header is clamped to it, so
#: a quota of 10^15 or a wait of 30 million years still parses.
SF_MAX_INTEGER = 999_999_999_999_999


def sf_int(value: int) -> int:
    """`value` within what a structured-field integer can carry."""
    return max(-SF_MAX_INTEGER, min(SF_MAX_INTEGER, value))


@dataclass(frozen=True)
class Policy:
    """A quota policy, as the IETF draft's ``RateLimit-Policy`` field
    describes one (draft-ietf-httpapi-ratelimit-headers-11, section 3):
    ``quota`` units per ``window``, under a ``name`` the ``RateLimit``
    field refers back to."""

    name: str
    quota: int
    #: The span the quota is for; None leaves ``w`` out (a concurrency limit
    #: has no window).
    window: timedelta | None = None
    #: The draft's quota unit (``qu``); None means its default, requests.
    unit: str | None = None
    #: How long one unit of quota takes to come back, for a limit that
    #: refills at a steady rate (the buckets, GCRA); None for the others.
    #: Not part of the field: it is how ``t`` is worked out.
    refill: timedelta | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.name or any(not " " <= c <= "~" for c in self.name):
            raise ValueError(
                f"policy name {self.name!r} must be non-empty printable ASCII "
                "(it is sent as a structured-field string)"
            )

    def item(self) -> str:
        """This policy as an item of the ``RateLimit-Policy`` list."""
        text = f"{_sf_string(self.name)};q={sf_int(self.quota)}"
        if self.unit is not None:
            text += f";qu={_sf_string(self.unit)}"
        if self.window is not None:
            # The draft wants whole seconds, at least 1.
            text += f";w={sf_int(max(1, ceil_seconds(self.window)))}"
        return text


def _sf_string(text: str) -> str:
    """A structured-field string (RFC 8941 section 3.3.3)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Decision:
    """The answer to one check.

    ``retry_after`` is zero when allowed, else how long until this same
    request would be allowed, or None when it never can be (its cost is
    above the limit). ``reset_after`` is how long until the key is back to
    its fresh state. ``delay`` is how long to wait before acting, so that
    the output is smooth (the leaky bucket's sixth element; zero for every
    other algorithm). For ``RL.ALL``, the fields are the combined answer and
    ``tiers`` holds each tier's own, in key order. A ``SHADOW`` check that
    would have denied is allowed with its wait: see `shadow_denied`.
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after: timedelta | None
    reset_after: timedelta
    delay: timedelta = timedelta(0)
    policy: Policy | None = None
    tiers: tuple[Decision, ...] = field(default=())

    @property
    def shadow_denied(self) -> bool:
        """True when a ``shadow=True`` check would have been denied: the
        server answers it allowed (it took nothing) but keeps its wait, so
        an allowed decision with a ``retry_after`` other than zero (or None:
        it could never pass) is a would-be denial. Always False without
        ``shadow``, whose allowed answers wait for nothing."""
        return self.allowed and self.retry_after != timedelta(0)

    def more_quota_in(self) -> timedelta:
        """How long until more quota is available (the draft's ``t``, and
        ``X-RateLimit-Reset``): from the stored state alone, so a reply that
        allowed and one that denied say the same about one state.

        For a limit that refills at a steady rate (the buckets, GCRA: one
        unit every ``policy.refill``), the time until the next unit: the
        time until full, less the units still missing after it. For the
        windows, the time until the key is fresh (``reset_after``): the end
        of the fixed window; for the sliding log and counter, whose quota
        comes back as entries leave the window, an upper bound (the reply
        does not say when the oldest leaves)."""
        refill = self.policy.refill if self.policy is not None else None
        if refill is None or self.remaining >= self.limit:
            return self.reset_after
        missing_after_next = self.limit - self.remaining - 1
        return max(timedelta(0), self.reset_after - refill * missing_after_next)

    @property
    def binding(self) -> Decision:
        """The one limit the headers speak for: the tier that denied (the
        longest wait among several, one that can never pass first), else
        the tier with the least remaining (ties: the soonest reset); the
        decision itself when it has no tiers."""
        if not self.tiers:
            return self
        denied = [d for d in self.tiers if not d.allowed]
        if denied:
            return max(denied, key=_wait_order)
        return min(self.tiers, key=lambda d: (d.remaining, d.reset_after))

    def headers(self, *, legacy: bool = True, ietf: bool = True) -> Headers:
        """The response header fields for this decision.

        ``legacy``: ``X-RateLimit-Limit``, ``X-RateLimit-Remaining``,
        ``X-RateLimit-Reset`` (seconds until more quota, `more_quota_in`,
        rounded up: a delay, not a Unix time), all three of one limit,
        `binding`. ``ietf``:
        ``RateLimit-Policy`` and ``RateLimit`` (one item per tier).
        ``Retry-After`` (seconds, rounded up) comes with either set when the
        request is denied, and never when it can never pass: a client would
        wait and be refused again. Every integer is clamped to 15 digits.
        """
        headers: Headers = {}
        retry = self.retry_after_header()
        if legacy:
            binding = self.binding
            headers["X-RateLimit-Limit"] = str(sf_int(binding.limit))
            headers["X-RateLimit-Remaining"] = str(sf_int(binding.remaining))
            headers["X-RateLimit-Reset"] = str(sf_int(ceil_seconds(binding.more_quota_in())))
        if ietf:
            headers.update(self._ietf_fields())
        if retry is not None:
            headers["Retry-After"] = str(retry)
        return headers

    def retry_after_header(self) -> int | None:
        """``Retry-After`` in seconds (the binding limit's wait), or None
        when it is not to be sent."""
        binding = self.binding
        if self.allowed or binding.retry_after is None or self.retry_after is None:
            return None
        return sf_int(max(1, ceil_seconds(binding.retry_after)))

    def _ietf_fields(self) -> Headers:
        tiers = [(d, p) for d in (self.tiers or (self,)) if (p := d.policy) is not None]
        if not tiers:
            return {}
        policies = _renamed_apart([policy for _, policy in tiers])
        limits = []
        for (decision, _), policy in zip(tiers, policies, strict=True):
            # t: "the number of seconds until additional quota is made
            # available" (draft-11), from the stored state alone, so two
            # replies about one state agree, allowed or denied.
            t = sf_int(ceil_seconds(decision.more_quota_in()))
            r = sf_int(decision.remaining)
            limits.append(f"{_sf_string(policy.name)};r={r};t={t}")
        return {
            "RateLimit-Policy": ", ".join(policy.item() for policy in policies),
            "RateLimit": ", ".join(limits),
        }

    def aged(self, elapsed: timedelta) -> Decision:
        """This denial as it stands `elapsed` later, the stored state
        unchanged: every wait shorter by that much (never below zero). The
        local denial cache answers with it."""

        def less(value: timedelta) -> timedelta:
            return max(timedelta(0), value - elapsed)

        return replace(
            self,
            retry_after=None if self.retry_after is None else less(self.retry_after),
            reset_after=less(self.reset_after),
            tiers=tuple(t.aged(elapsed) for t in self.tiers),
        )


def _wait_order(decision: Decision) -> tuple[bool, timedelta]:
    """Orders waits: one that can never pass (None) above any other."""
    retry = decision.retry_after
    return (retry is None, retry if retry is not None else timedelta(0))


def _renamed_apart(policies: list[Policy]) -> list[Policy]:
    """The policies with every name used once, as the RateLimit field needs
    to say which is which: a second and later use of a name gets ``-2``,
    ``-3``... (two tiers of one algorithm, both left unnamed)."""
    seen: dict[str, int] = {}
    out = []
    for policy in policies:
        seen[policy.name] = seen.get(policy.name, 0) + 1
        n = seen[policy.name]
        out.append(policy if n == 1 else replace(policy, name=f"{policy.name}-{n}"))
    return out


@dataclass(frozen=True)
class Lease(Decision):
    """The answer to ``RL.ACQUIRE``: a ``Decision`` whose ``id`` names the
    slot taken (to give to ``release``), or None when none was."""

    id: str | None = None
