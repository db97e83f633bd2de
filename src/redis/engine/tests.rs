//! The engine's rules, on its own code over keys in memory
//! (`super::memory::Memory`): `RL.ALL` takes from every tier or from none,
//! and what it takes from each tier is what that tier's single check takes.

use proptest::prelude::*;

use super::all::all;
use super::check::apply_tier;
use super::memory::Memory;
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
                    let decision = apply_tier(&alone, k, tier, cost, Mode::Take, None, None)
                        .expect("a single check");
                    (decision, alone.seen(k))
                })
                .collect();
            memory.take_written();
            let (combined, each) = all(&memory, &KEYS[..n], &parsed, Mode::Take).expect("RL.ALL");
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
