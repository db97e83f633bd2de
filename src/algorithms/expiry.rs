//! The expiry rule: a key's expiry is the moment its state is as good as
//! new (`State::fresh_at_ms`, its penalty and a waiting request's turn
//! included), plus at most the slack allowed (`ratelimit.expiry-slack`), so
//! that a key expires exactly when losing it loses nothing, and a busy
//! key's expiry is not moved on every request. Plain arithmetic: the Redis
//! layer reads and sets expiries with it (`redis::key`), `RL.SETSTATE`
//! bounds the times it takes with [`EXPIRY_TIMES`], and replays carry the
//! slack, at most [`MAX_EXPIRY_SLACK_MS`].

use super::MAX_TIMESTAMP_MS;

/// The longest expiry slack a setting or a replay may give: a day.
pub const MAX_EXPIRY_SLACK_MS: u32 = 86_400_000;

/// The expiries a key may be given: the times `RL.SETSTATE ... PXAT` takes,
/// so that a primary never sets one that the command carrying it to its
/// replicas and AOF refuses.
pub const EXPIRY_TIMES: std::ops::RangeInclusive<i64> = 1..=MAX_TIMESTAMP_MS;

/// The expiry of a key whose state is fresh at `fresh_at_ms`, with the
/// slack allowed: `slack_ms` after, within [`EXPIRY_TIMES`] (a state fresh
/// later than the last of them, such as a bucket refilling a few tokens a
/// millennium, keeps its key until then). Every expiry the module sets on
/// a state's key comes from here.
pub fn expiry_at(fresh_at_ms: i64, slack_ms: u32) -> i64 {
    fresh_at_ms
        .saturating_add(i64::from(slack_ms))
        .clamp(*EXPIRY_TIMES.start(), *EXPIRY_TIMES.end())
}

/// The expiry a key should get, given when its state is fresh again
/// (`fresh_at_ms`), the expiry it has (`current`, `None` for none), and the
/// slack allowed: `None` to keep the current one.
///
/// The rule: a key's expiry is never before its state is fresh (it would
/// lose state, and so let through more than the limit), and at most
/// `slack_ms` after (idle keys go soon after they are as good as new). An
/// expiry in that band is kept; any other (none, too early, too late) is
/// set to `fresh_at_ms + slack_ms`, so that the checks that follow keep it
/// until the state's freshness has moved on by `slack_ms`: a busy key's
/// expiry moves once per `slack_ms` rather than on every request. With a
/// slack of 0 the expiry is exactly the fresh moment. The band ends at
/// [`expiry_at`].
pub fn next_expiry(fresh_at_ms: i64, current: Option<i64>, slack_ms: u32) -> Option<i64> {
    let latest = expiry_at(fresh_at_ms, slack_ms);
    match current {
        Some(at) if (fresh_at_ms.min(latest)..=latest).contains(&at) => None,
        _ => Some(latest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_within_the_slack_after_freshness_is_kept() {
        let fresh = 10_000;
        assert_eq!(next_expiry(fresh, Some(10_000), 1000), None);
        assert_eq!(next_expiry(fresh, Some(10_600), 1000), None);
        assert_eq!(next_expiry(fresh, Some(11_000), 1000), None);
    }

    #[test]
    fn any_other_expiry_moves_to_the_end_of_the_slack() {
        let fresh = 10_000;
        assert_eq!(next_expiry(fresh, None, 1000), Some(11_000), "none");
        assert_eq!(next_expiry(fresh, Some(9_999), 1000), Some(11_000), "early");
        assert_eq!(next_expiry(fresh, Some(11_001), 1000), Some(11_000), "late");
        assert_eq!(next_expiry(fresh, Some(10_001), 0), Some(10_000));
        assert_eq!(next_expiry(fresh, Some(10_000), 0), None);
        assert_eq!(next_expiry(i64::MAX, None, 5), Some(MAX_TIMESTAMP_MS));
    }

    /// Regression (issue 20): a state fresh at 2^53 ms, or later (a bucket
    /// of 2^53-1 tokens refilling 1 a second), was given an expiry past
    /// 2^53, which `RL.SETSTATE ... PXAT` refuses: its replicas and AOF
    /// lost the key.
    #[test]
    fn no_expiry_is_beyond_what_pxat_takes() {
        for fresh in [
            MAX_TIMESTAMP_MS - 1,
            MAX_TIMESTAMP_MS,
            2 * MAX_TIMESTAMP_MS,
            i64::MAX,
        ] {
            for slack in [0, 1, MAX_EXPIRY_SLACK_MS] {
                let at = expiry_at(fresh, slack);
                assert!(EXPIRY_TIMES.contains(&at), "{fresh} {slack}");
                assert_eq!(next_expiry(fresh, None, slack), Some(at));
                assert_eq!(next_expiry(fresh, Some(at), slack), None, "kept");
            }
        }
        for fresh in [i64::MIN, -5, 0] {
            assert_eq!(expiry_at(fresh, 0), 1);
        }
        assert_eq!(expiry_at(MAX_TIMESTAMP_MS - 10, 4), MAX_TIMESTAMP_MS - 6);
    }

    proptest::proptest! {
        /// For any fresh moment, current expiry and slack: the expiry the
        /// rule leaves (kept or set) is never before the state is fresh
        /// (within what `PXAT` takes), never more than the slack after, and
        /// is kept when asked again.
        #[test]
        fn the_expiry_left_is_in_the_band_and_stays_there(
            fresh in -10i64..MAX_TIMESTAMP_MS + 10,
            near in proptest::option::of((0u8..3, -2i64..=2, -3000i64..3000)),
            slack in proptest::prop_oneof![0u32..3, 0u32..3000, 0u32..=MAX_EXPIRY_SLACK_MS],
        ) {
            // None, or near either end of the band (by -2..=2 ms), or anywhere around.
            let current = near.map(|(edge, d, far)| match edge {
                0 => fresh.saturating_add(d),
                1 => expiry_at(fresh, slack).saturating_add(d),
                _ => fresh.saturating_add(far),
            });
            let left = next_expiry(fresh, current, slack).or(current);
            let Some(at) = left else {
                proptest::prop_assert!(false, "no expiry left");
                return Ok(());
            };
            proptest::prop_assert!(EXPIRY_TIMES.contains(&at));
            proptest::prop_assert!(at >= fresh.clamp(1, MAX_TIMESTAMP_MS), "{at} before {fresh}");
            proptest::prop_assert!(at <= expiry_at(fresh, slack));
            proptest::prop_assert_eq!(next_expiry(fresh, Some(at), slack), None);
            if slack == 0 {
                proptest::prop_assert_eq!(at, fresh.clamp(1, MAX_TIMESTAMP_MS));
            }
        }
    }
}
