//! The engine's rules, on its own code over keys in memory
//! (`super::memory::Memory`): `RL.ALL` takes from every tier or from none,
//! and what it takes from each tier is what that tier's single check takes;
//! a penalty starts on the denial that crosses the limit; a key expires the
//! moment its state (its penalty included) is as good as new.

use proptest::prelude::*;

use super::super::key::KeyToken;
use super::all::all;
use super::check::apply_tier;
use super::memory::Memory;
use crate::algorithms::expiry::expiry_at;
use crate::algorithms::penalty::PENALTY_TAG;
use crate::algorithms::Mode;
use crate::parse;

const T0: i64 = 1_700_000_000_000;
const KEYS: [&str; 4] = ["{t}:a", "{t}:b", "{t}:c", "{t}:d"];

/// A tier's words: its algorithm and small parameters, so that requests
/// are denied often.
fn tier() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        (1u64..6, 1u64..4).prop_map(|(c, r)| vec![
            "TOKENBUCKET".into(),
            c.to_string(),
            r.to_string()
        ]),
        (1u64..6, 1u64..3000).prop_map(|(l, w)| vec![
            "FIXEDWINDOW".into(),
            l.to_string(),
            format!("{w}ms")
        ]),
        (1u64..6, 1u64..3000).prop_map(|(l, w)| vec![
            "SLIDINGLOG".into(),
            l.to_string(),
            format!("{w}ms")
        ]),
    ]
}

/// Every key as it is now (state bytes and expiry).
fn seen(memory: &Memory, n: usize) -> Vec<Option<(Vec<u8>, Option<i64>)>> {
    KEYS.iter().take(n).map(|k| memory.seen(k)).collect()
}

proptest! {
    /// Random tiers (2 to 4, of three algorithms) and a random history of
    /// `RL.ALL` requests with random costs and times: when any tier denies,
    /// no tier's state or expiry changes and nothing is written; when all
    /// allow, each tier's state and expiry are exactly what its own single
    /// check (`apply`, on a store holding only its key as it was) leaves.
    #[test]
    fn rl_all_takes_from_every_tier_or_from_none(
        tiers in proptest::collection::vec(tier(), 2..=4),
        steps in proptest::collection::vec((0i64..700, 1u64..4), 1..40),
    ) {
        let n = tiers.len();
        let memory = Memory::at(T0, 0);
        let mut now = T0;
        let (mut allowed, mut denied) = (0, 0);
        for (dt, cost) in steps {
            now += dt;
            memory.set_now(now);
            let mut words: Vec<String> = vec![n.to_string()];
            words.extend(KEYS.iter().take(n).map(|k| k.to_string()));
            words.extend(tiers.iter().flatten().cloned());
            words.extend(["COST".to_string(), cost.to_string()]);
            let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            let parsed = parse::all(&words).expect("parses");
            let before = seen(&memory, n);
            let singles: Vec<_> = KEYS
                .iter()
                .take(n)
                .zip(&parsed.tiers)
                .map(|(&k, tier)| {
                    let alone = memory.only(k);
                    let decision = apply_tier(&alone, &mut KeyToken::in_memory(), k, tier, cost, Mode::Take, None, None)
                        .expect("a single check");
                    (decision, alone.seen(k))
                })
                .collect();
            memory.take_written();
            let (combined, each) = all(&memory, &mut KeyToken::in_memory(), &KEYS[..n], &parsed, Mode::Take).expect("RL.ALL");
            let after = seen(&memory, n);
            prop_assert_eq!(combined.allowed, singles.iter().all(|(d, _)| d.allowed));
            if combined.allowed {
                allowed += 1;
                for (i, (decision, state)) in singles.iter().enumerate() {
                    prop_assert_eq!(&after[i], state, "tier {}", i);
                    prop_assert_eq!(each[i].remaining, decision.remaining, "tier {}", i);
                }
            } else {
                denied += 1;
                prop_assert_eq!(&after, &before, "a denied RL.ALL changed a key");
                prop_assert_eq!(memory.take_written(), Vec::<&str>::new());
            }
        }
        prop_assert!(allowed + denied > 0);
    }
}

proptest! {
    /// One key's check (`apply`), with and without `PENALTY`, peeks among
    /// them, no expiry slack: outside a penalty, a request answers as the
    /// same check without the option would (on a copy of the key), and a
    /// penalty starts exactly when that answer is a denial that could pass
    /// later, lasting `PENALTY` from it; during the penalty every request is
    /// denied until its end, nothing is taken and it is not extended; a
    /// peek changes nothing; after any other request the key expires
    /// exactly when its state, penalty included, is as good as new.
    #[test]
    fn a_penalty_starts_on_the_crossing_denial_and_the_key_expires_when_as_good_as_new(
        tier in tier(),
        steps in proptest::collection::vec((0i64..900, 1u64..4, any::<bool>(), 0u8..4), 1..50),
    ) {
        const P: u64 = 1200;
        let key = KEYS[0];
        let memory = Memory::at(T0, 0);
        let mut now = T0;
        let mut until: Option<i64> = None;
        let mut words: Vec<String> = vec!["1".into(), key.into()];
        words.extend(tier.iter().cloned());
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let parsed = parse::all(&words).expect("parses");
        let tier = &parsed.tiers[0];
        for (dt, cost, with_penalty, peek) in steps {
            now += dt;
            memory.set_now(now);
            let mode = if peek == 0 { Mode::Peek } else { Mode::Take };
            let penalty_ms = with_penalty.then_some(P);
            let before = memory.seen(key);
            let alone = memory.only(key);
            let plain = apply_tier(&alone, &mut KeyToken::in_memory(), key, tier, cost, mode, None, None).expect("check");
            let decision = apply_tier(&memory, &mut KeyToken::in_memory(), key, tier, cost, mode, penalty_ms, None)
                .expect("check");
            let after = memory.seen(key);
            let alone_after = alone.seen(key);
            if mode == Mode::Peek {
                prop_assert_eq!(&after, &before, "a peek changed the key");
            }
            match until.filter(|&end| now < end) {
                Some(end) => {
                    prop_assert!(!decision.allowed, "allowed during a penalty");
                    prop_assert!(plain.retry_after_ms < 0 || decision.retry_after_ms >= end - now);
                    let bytes = |s: &Option<(Vec<u8>, Option<i64>)>| s.as_ref().map(|s| s.0.clone());
                    prop_assert_eq!(bytes(&after), bytes(&before), "taken during a penalty");
                }
                None => {
                    let crosses = mode == Mode::Take
                        && penalty_ms.is_some()
                        && !plain.allowed
                        && plain.retry_after_ms >= 0
                        && before.is_some();
                    if crosses {
                        prop_assert!(!decision.allowed && decision.retry_after_ms >= P as i64);
                        let held = after.as_ref().map(|s| s.0.first().copied());
                        prop_assert_eq!(held, Some(Some(PENALTY_TAG)), "no penalty stored");
                        until = Some(now + P as i64);
                    } else {
                        prop_assert_eq!(decision, plain);
                        if before.as_ref().is_none_or(|s| s.0.first() != Some(&PENALTY_TAG)) {
                            prop_assert_eq!(
                                after.as_ref().map(|s| &s.0),
                                alone_after.as_ref().map(|s| &s.0),
                                "stored otherwise than the plain check"
                            );
                        }
                    }
                }
            }
            if mode == Mode::Take {
                if let (Some((_, expires)), Some(fresh)) = (&after, memory.fresh_at_ms(key)) {
                    prop_assert_eq!(*expires, Some(expiry_at(fresh, 0)), "expiry off its state");
                    if let Some(end) = until {
                        prop_assert!(fresh >= end, "the key could expire during its penalty");
                    }
                }
            }
        }
    }
}

proptest! {
    /// At `maxmemory` (writes that need memory refused): a request that
    /// would create a key is refused with the OOM error; whatever is
    /// refused would have been taken with memory free and changes nothing;
    /// whatever is not refused is decided and stored exactly as with memory
    /// free (a denial, a state updated in place), on one key and through
    /// `RL.ALL` (docs/commands.md: the maxmemory rule).
    #[test]
    fn at_maxmemory_only_what_needs_memory_is_refused_and_it_changes_nothing(
        tiers in proptest::collection::vec(tier(), 1..=3),
        steps in proptest::collection::vec((0i64..700, 1u64..4, any::<bool>()), 1..40),
    ) {
        let n = tiers.len();
        let memory = Memory::at(T0, 0);
        let mut now = T0;
        for (dt, cost, full) in steps {
            now += dt;
            memory.set_now(now);
            let mut words: Vec<String> = vec![n.to_string()];
            words.extend(KEYS.iter().take(n).map(|k| k.to_string()));
            words.extend(tiers.iter().flatten().cloned());
            words.extend(["COST".to_string(), cost.to_string()]);
            let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
            let parsed = parse::all(&words).expect("parses");
            let before = seen(&memory, n);
            // What the request does with memory free, on a copy.
            let free = memory.copy();
            let unlimited = all(&free, &mut KeyToken::in_memory(), &KEYS[..n], &parsed, Mode::Take).expect("RL.ALL");
            let with_free = seen(&free, n);
            let creates = before.iter().zip(&with_free).any(|(b, a)| b.is_none() && a.is_some());
            memory.set_full(full);
            let result = all(&memory, &mut KeyToken::in_memory(), &KEYS[..n], &parsed, Mode::Take);
            memory.set_full(false);
            match result {
                Err(_) => {
                    prop_assert!(full, "refused with memory free");
                    prop_assert!(unlimited.0.allowed && with_free != before, "refused what takes nothing");
                    prop_assert_eq!(seen(&memory, n), before, "a refused request changed a key");
                }
                Ok((combined, _)) => {
                    prop_assert!(!(full && creates), "a key created at maxmemory");
                    prop_assert_eq!(combined, unlimited.0);
                    prop_assert_eq!(seen(&memory, n), with_free);
                }
            }
        }
    }
}

proptest! {
    /// The maxmemory rule of one key's check is `RL.ALL`'s (one tier of
    /// it): at `maxmemory`, only a request that would be taken and would
    /// create the key or grow its state (a new entry of a sliding log) is
    /// refused, and it changes nothing; anything else (a denial of a log
    /// that a take would grow included) is decided and stored exactly as
    /// with memory free, and answered as `RL.ALL` of that one tier answers.
    #[test]
    fn one_keys_check_at_maxmemory_refuses_only_what_needs_memory(
        tier in tier(),
        steps in proptest::collection::vec((0i64..700, 1u64..4, any::<bool>()), 1..40),
    ) {
        let key = KEYS[0];
        let memory = Memory::at(T0, 0);
        let mut words: Vec<String> = vec!["1".into(), key.into()];
        words.extend(tier.iter().cloned());
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let parsed = parse::all(&words).expect("parses");
        let tier = &parsed.tiers[0];
        let mut now = T0;
        for (dt, cost, full) in steps {
            now += dt;
            memory.set_now(now);
            let before = memory.seen(key);
            let free = memory.copy();
            let unlimited = apply_tier(&free, &mut KeyToken::in_memory(), key, tier, cost, Mode::Take, None, None)
                .expect("a check with memory free");
            let with_free = free.seen(key);
            let mut as_all = parsed.clone();
            as_all.options.cost = cost;
            let one_tier = memory.copy();
            one_tier.set_full(full);
            let all_of_one = all(&one_tier, &mut KeyToken::in_memory(), &KEYS[..1], &as_all, Mode::Take);
            memory.set_full(full);
            let result = apply_tier(&memory, &mut KeyToken::in_memory(), key, tier, cost, Mode::Take, None, None);
            memory.set_full(false);
            match result {
                Err(_) => {
                    prop_assert!(full, "refused with memory free");
                    prop_assert!(unlimited.allowed, "refused a denial");
                    prop_assert_eq!(memory.seen(key), before, "a refused check changed the key");
                    prop_assert!(all_of_one.is_err(), "RL.ALL of the one tier answered");
                }
                Ok(decision) => {
                    prop_assert_eq!(decision, unlimited);
                    prop_assert_eq!(memory.seen(key), with_free);
                    prop_assert_eq!(all_of_one.expect("RL.ALL of the one tier").0, decision);
                }
            }
        }
    }
}

/// `RL.ALL` takes from a tier as that tier's own check does, a key that
/// has had a penalty included: after the penalty is over, both take from
/// the state in place, and the key keeps its penalized form (the end of
/// its latest penalty, until it expires), with the same expiry.
#[test]
fn rl_all_takes_from_a_key_that_had_a_penalty_as_its_own_check_does() {
    let key = KEYS[0];
    let words: Vec<&[u8]> = ["1", key, "TOKENBUCKET", "2", "1"]
        .iter()
        .map(|w| w.as_bytes())
        .collect();
    let parsed = parse::all(&words).expect("parses");
    let tier = &parsed.tiers[0];
    let memory = Memory::at(T0, 0);
    let take = |cost, penalty_ms| {
        apply_tier(
            &memory,
            &mut KeyToken::in_memory(),
            key,
            tier,
            cost,
            Mode::Take,
            penalty_ms,
            None,
        )
    };
    assert!(take(1, None).expect("check").allowed);
    assert!(
        !take(2, Some(100)).expect("check").allowed,
        "denied, a penalty starts"
    );
    // The penalty is over, the key not yet fresh (nor expired): 1.5 tokens.
    memory.set_now(T0 + 500);
    let alone = memory.only(key);
    let single = apply_tier(
        &alone,
        &mut KeyToken::in_memory(),
        key,
        tier,
        1,
        Mode::Take,
        None,
        None,
    )
    .expect("check");
    let (combined, _) = all(
        &memory,
        &mut KeyToken::in_memory(),
        &KEYS[..1],
        &parsed,
        Mode::Take,
    )
    .expect("RL.ALL");
    assert!(single.allowed && combined.allowed);
    let after = memory.seen(key);
    assert_eq!(
        after,
        alone.seen(key),
        "RL.ALL stored otherwise than the check"
    );
    assert_eq!(
        after.and_then(|(bytes, _)| bytes.first().copied()),
        Some(PENALTY_TAG),
        "the penalized form was dropped"
    );
}
