//! Concurrency limiter: requests in flight rather than requests per second.
//!
//! Terms: a key holds up to `limit` *leases*; each lease has an `id` (chosen
//! by the caller, or drawn at random by the server) and ends by itself at
//! `ends_ms`, `lease_ms` after it was taken or last renewed, so a caller that
//! crashes without releasing gives its slot back when its lease runs out. A
//! lease that has ended counts for nothing, whether or not it was dropped
//! from the list yet: nothing runs in the background, ended leases are
//! dropped the next time the key is written.
//!
//! Acquiring with an id that already holds a live lease renews it (a
//! heartbeat) and takes no second slot. Changed parameters apply from that
//! call on: a lower limit revokes nothing, it only stops new leases until
//! enough have ended; a new lease length applies to leases taken or renewed
//! from then on.
//!
//! Work is linear in the number of leases held (at most `limit`), which is
//! the number of requests in flight: small in practice.

use super::{Decision, Field, State, MAX_AMOUNT, MAX_DURATION_MS, MAX_TIMESTAMP_MS};
use crate::encoding::{ensure, put_i64, put_u64, DecodeError, Reader};

/// The longest lease id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseParams {
    /// The most leases held at once (`1..=MAX_AMOUNT`).
    pub limit: u64,
    /// How long a lease lasts unless released or renewed (`1..=MAX_DURATION_MS`).
    pub lease_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub id: Box<[u8]>,
    /// When the lease ends by itself (Unix ms).
    pub ends_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leases {
    params: LeaseParams,
    /// The leases, in the order they were taken or renewed, so their ends
    /// are in ascending order when the lease length never changed.
    leases: Vec<Lease>,
    /// The latest time seen (Unix ms): an earlier clock reading is treated
    /// as this one.
    updated_ms: i64,
}

impl Leases {
    /// A key holding no lease yet.
    pub fn new(params: LeaseParams, now_ms: i64) -> Self {
        Self {
            params,
            leases: Vec::new(),
            updated_ms: now_ms,
        }
    }

    pub fn params(&self) -> LeaseParams {
        self.params
    }

    /// Whether no lease is held any more (the key can go).
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    fn live(&self, now_ms: i64) -> impl Iterator<Item = &Lease> {
        self.leases.iter().filter(move |l| l.ends_ms > now_ms)
    }

    fn live_count(&self, now_ms: i64) -> u64 {
        self.live(now_ms).count() as u64
    }

    /// What the key looks like at `now_ms`, under `limit`, for a request
    /// that was `allowed`.
    fn decision(&self, limit: u64, now_ms: i64, allowed: bool) -> Decision {
        let live = self.live_count(now_ms);
        let last_end = self.live(now_ms).map(|l| l.ends_ms).max();
        let first_end = self.live(now_ms).map(|l| l.ends_ms).min();
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(live),
            retry_after_ms: if allowed {
                0
            } else {
                first_end.map_or(0, |end| end - now_ms)
            },
            reset_after_ms: last_end.map_or(0, |end| end - now_ms),
            delay_ms: None,
        }
    }

    /// Takes a slot for `id` at `now_ms` (or renews the live lease `id`
    /// holds) under `params`. Returns the decision and whether the state
    /// changed; a denial changes nothing.
    pub fn acquire(&mut self, params: LeaseParams, now_ms: i64, id: &[u8]) -> (Decision, bool) {
        let now_ms = now_ms.max(self.updated_ms);
        let ends_ms = now_ms.saturating_add(params.lease_ms as i64);
        let held = self.live(now_ms).any(|l| *l.id == *id);
        if !held && self.live_count(now_ms) >= params.limit {
            return (self.decision(params.limit, now_ms, false), false);
        }
        self.params = params;
        self.updated_ms = now_ms;
        self.leases.retain(|l| l.ends_ms > now_ms && *l.id != *id);
        self.leases.push(Lease {
            id: id.into(),
            ends_ms,
        });
        (self.decision(params.limit, now_ms, true), true)
    }

    /// Gives back the live lease `id` holds. Returns whether there was one;
    /// when there was not, nothing changes.
    pub fn release(&mut self, now_ms: i64, id: &[u8]) -> bool {
        let now_ms = now_ms.max(self.updated_ms);
        if !self.live(now_ms).any(|l| *l.id == *id) {
            return false;
        }
        self.updated_ms = now_ms;
        self.leases.retain(|l| l.ends_ms > now_ms && *l.id != *id);
        true
    }

    /// The key as seen at `now_ms`, changing nothing (for RL.INFO).
    pub fn peek(&self, now_ms: i64) -> Decision {
        let now_ms = now_ms.max(self.updated_ms);
        let allowed = self.live_count(now_ms) < self.params.limit;
        self.decision(self.params.limit, now_ms, allowed)
    }
}

impl State for Leases {
    fn describe(&self) -> Vec<(&'static str, Field)> {
        let leases = self
            .leases
            .iter()
            .map(|l| Field::List(vec![Field::Text(l.id.to_vec()), Field::Int(l.ends_ms)]))
            .collect();
        vec![
            ("limit", Field::Int(self.params.limit as i64)),
            ("lease_ms", Field::Int(self.params.lease_ms as i64)),
            ("leases", Field::List(leases)),
            ("updated_ms", Field::Int(self.updated_ms)),
        ]
    }

    /// When the last lease ends.
    fn fresh_at_ms(&self) -> i64 {
        self.leases
            .iter()
            .map(|l| l.ends_ms)
            .max()
            .unwrap_or(self.updated_ms)
    }

    fn heap_bytes(&self) -> usize {
        self.leases.capacity() * std::mem::size_of::<Lease>()
            + self.leases.iter().map(|l| l.id.len()).sum::<usize>()
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        put_u64(out, self.params.limit);
        put_u64(out, self.params.lease_ms);
        put_i64(out, self.updated_ms);
        put_u64(out, self.leases.len() as u64);
        for lease in &self.leases {
            put_i64(out, lease.ends_ms);
            out.push(lease.id.len() as u8);
            out.extend_from_slice(&lease.id);
        }
    }

    fn decode_body(input: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let limit = input.u64()?;
        let lease_ms = input.u64()?;
        let updated_ms = input.i64()?;
        let count = input.u64()?;
        ensure((1..=MAX_AMOUNT).contains(&limit), "limit out of range")?;
        ensure(
            (1..=MAX_DURATION_MS).contains(&lease_ms),
            "lease out of range",
        )?;
        ensure(
            (0..=MAX_TIMESTAMP_MS).contains(&updated_ms),
            "timestamp out of range",
        )?;
        // Each lease takes at least 10 bytes: a count larger than what is
        // left cannot be right, and must not size an allocation.
        ensure(
            count <= (input.remaining() / 10) as u64,
            "lease count larger than the data",
        )?;
        let mut leases = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let ends_ms = input.i64()?;
            let len = usize::from(input.u8()?);
            ensure(
                (1..=MAX_ID_BYTES).contains(&len),
                "lease id length out of range",
            )?;
            let id = input.bytes(len)?;
            // A lease taken at the latest time a state carries ends up to
            // one longest lease after it.
            ensure(
                (0..=MAX_TIMESTAMP_MS + MAX_DURATION_MS as i64).contains(&ends_ms),
                "lease end out of range",
            )?;
            leases.push(Lease {
                id: id.into(),
                ends_ms,
            });
        }
        // Ids are unique: checked by sorting, so a large state (from a file
        // or RL.SETSTATE) costs n log n, not n squared.
        let mut ids: Vec<&[u8]> = leases.iter().map(|l| &*l.id).collect();
        ids.sort_unstable();
        ensure(
            ids.windows(2).all(|pair| !matches!(pair, [a, b] if a == b)),
            "lease id repeated",
        )?;
        Ok(Self {
            params: LeaseParams { limit, lease_ms },
            leases,
            updated_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::encode as encoded;

    const T0: i64 = 1_700_000_000_000;

    fn params(limit: u64, lease_ms: u64) -> LeaseParams {
        LeaseParams { limit, lease_ms }
    }

    fn summary(d: Decision) -> (bool, u64, i64, i64) {
        (d.allowed, d.remaining, d.retry_after_ms, d.reset_after_ms)
    }

    #[test]
    fn leases_are_given_up_to_the_limit_then_refused_until_the_first_ends() {
        let p = params(2, 1000);
        let mut s = Leases::new(p, T0);
        assert_eq!(summary(s.acquire(p, T0, b"a").0), (true, 1, 0, 1000));
        assert_eq!(summary(s.acquire(p, T0 + 100, b"b").0), (true, 0, 0, 1000));
        let before = encoded(&s);
        let (denied, changed) = s.acquire(p, T0 + 200, b"c");
        assert_eq!(summary(denied), (false, 0, 800, 900));
        assert!(!changed);
        assert_eq!(encoded(&s), before, "a denial changes nothing");
        assert!(s.acquire(p, T0 + 1000, b"c").0.allowed, "a's lease ended");
    }

    #[test]
    fn a_release_gives_the_slot_back_once() {
        let p = params(1, 60_000);
        let mut s = Leases::new(p, T0);
        assert!(s.acquire(p, T0, b"a").0.allowed);
        assert!(!s.acquire(p, T0, b"b").0.allowed);
        assert!(s.release(T0 + 5, b"a"));
        assert!(!s.release(T0 + 6, b"a"), "a second release finds nothing");
        assert!(s.is_empty());
        assert!(s.acquire(p, T0 + 7, b"b").0.allowed);
    }

    #[test]
    fn releasing_an_ended_or_unknown_lease_answers_no_and_changes_nothing() {
        let p = params(3, 100);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        let before = encoded(&s);
        assert!(!s.release(T0 + 100, b"a"), "ended at T0 + 100");
        assert!(!s.release(T0 + 1, b"zz"));
        assert_eq!(encoded(&s), before);
    }

    #[test]
    fn acquiring_again_with_a_held_id_renews_it_without_a_second_slot() {
        let p = params(2, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        let (renewed, changed) = s.acquire(p, T0 + 500, b"a");
        assert!(changed);
        assert_eq!(summary(renewed), (true, 1, 0, 1000));
        assert_eq!(s.fresh_at_ms(), T0 + 1500);
    }

    #[test]
    fn a_renewal_is_allowed_even_when_the_limit_is_reached() {
        let p = params(1, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        assert!(s.acquire(p, T0 + 10, b"a").0.allowed);
    }

    #[test]
    fn ended_leases_count_for_nothing_and_are_dropped_on_the_next_write() {
        let p = params(2, 100);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        s.acquire(p, T0 + 50, b"b");
        assert_eq!(s.peek(T0 + 120).remaining, 1);
        s.acquire(p, T0 + 120, b"c");
        assert_eq!(s.leases.len(), 2, "a was dropped");
    }

    #[test]
    fn a_lower_limit_revokes_nothing_but_stops_new_leases() {
        let mut s = Leases::new(params(3, 1000), T0);
        for id in [&b"a"[..], b"b", b"c"] {
            s.acquire(params(3, 1000), T0, id);
        }
        let (d, _) = s.acquire(params(1, 1000), T0 + 1, b"d");
        assert_eq!(summary(d), (false, 0, 999, 999));
        assert_eq!(s.leases.len(), 3);
    }

    #[test]
    fn a_clock_stepping_back_means_no_time_passed() {
        let p = params(1, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0 + 500, b"a");
        let (d, _) = s.acquire(p, T0, b"b");
        assert_eq!(summary(d), (false, 0, 1000, 1000));
    }

    #[test]
    fn the_key_is_fresh_when_the_last_lease_ends() {
        let p = params(5, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"a");
        s.acquire(params(5, 3000), T0 + 10, b"b");
        s.acquire(p, T0 + 20, b"c");
        assert_eq!(s.fresh_at_ms(), T0 + 3010);
    }

    /// Regression (found by fuzzing): a lease taken at the latest time a
    /// state carries ends after it, and decoding refused its end, so the
    /// state the key stored could not be loaded or replicated.
    #[test]
    fn a_lease_taken_at_the_latest_time_a_state_carries_decodes() {
        let p = params(3, MAX_DURATION_MS);
        let mut s = Leases::new(p, MAX_TIMESTAMP_MS);
        assert!(s.acquire(p, MAX_TIMESTAMP_MS, b"w").1);
        assert_eq!(Leases::decode(&encoded(&s)), Ok(s));
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_values() {
        let p = params(10, 1000);
        let mut s = Leases::new(p, T0);
        s.acquire(p, T0, b"first");
        s.acquire(p, T0 + 1, &[0xff; MAX_ID_BYTES]);
        let bytes = encoded(&s);
        assert_eq!(Leases::decode(&bytes), Ok(s.clone()));
        for cut in 0..bytes.len() {
            assert!(Leases::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(Leases::decode(&trailing).is_err());
        let mut huge_count = bytes.clone();
        huge_count[25..33].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Leases::decode(&huge_count).is_err());
        let mut repeated = Leases::new(p, T0);
        repeated.leases = vec![
            Lease {
                id: b"x"[..].into(),
                ends_ms: T0,
            },
            Lease {
                id: b"x"[..].into(),
                ends_ms: T0,
            },
        ];
        assert!(Leases::decode(&encoded(&repeated)).is_err());
        let mut empty_id = repeated.clone();
        empty_id.leases = vec![Lease {
            id: Box::new([]),
            ends_ms: T0,
        }];
        assert!(Leases::decode(&encoded(&empty_id)).is_err());
    }
}
