//! Every state a primary accepts, its replicas and its AOF accept, and hold
//! the same (`DEBUG DIGEST-VALUE` and `PEXPIRETIME` of every key): after the
//! replica catches up, after a restart from the AOF as written (the
//! commands as propagated), and after a restart from a rewritten AOF without
//! the RDB preamble (`RL.SETSTATE ... KEEPTTL` and Redis's `PEXPIREAT`).
//!
//! The issue 20 regressions first, each the way it was seen (a key on the
//! primary only, the replica logging `-ERR PXAT must be a Unix time in
//! milliseconds from 1 to 2^53`), then a property test over random states
//! and random commands.

mod common;

use std::time::Duration;

use common::*;
use redis_ratelimit::algorithms::concurrency::{LeaseParams, Leases};
use redis_ratelimit::algorithms::penalty::Penalized;
use redis_ratelimit::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
use redis_ratelimit::algorithms::{Algorithm, Mode, State, MAX_AMOUNT, MAX_TIMESTAMP_MS};
use redis_ratelimit::encoding::MAX_AHEAD_MS;
use redis_ratelimit::parse::{check_args, Syntax};

/// A primary writing an AOF (every write synced, no RDB preamble in
/// rewrites) and its replica.
struct Pair {
    primary: Server,
    replica: Server,
}

impl Pair {
    fn start() -> Pair {
        let primary = Server::start(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            "no",
        ]);
        let replica = Server::start_replica_of(&primary);
        Pair { primary, replica }
    }

    /// Every key of `con` as `key digest expiry`, sorted, leaving out those
    /// that expire within a minute (a restart takes time; they may be gone
    /// on one side and not yet on the other).
    fn keys_of(con: &mut redis::Connection) -> Vec<String> {
        let now = server_time_ms(con);
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
        keys.sort();
        keys.into_iter()
            .filter_map(|key| {
                let expiry = expiry_time(con, &key);
                (expiry == -1 || expiry > now + 60_000)
                    .then(|| format!("{key} {} {expiry}", digest_value(con, &key)))
            })
            .collect()
    }

    /// Checks that the replica, then the AOF restored twice, hold what the
    /// primary holds; returns the primary's keys.
    fn assert_copies_agree(&mut self) -> Vec<String> {
        let mut p = self.primary.connect();
        let mut r = self.replica.connect();
        // Keys that expired go now, on the primary (which propagates their
        // deletion), before anything is compared.
        let _ = Self::keys_of(&mut p);
        let sent: i64 = info_field(&mut p, "replication", "master_repl_offset")
            .parse()
            .unwrap();
        wait_for("the replica to catch up", Duration::from_secs(10), || {
            info_field(&mut r, "replication", "master_repl_offset")
                .parse::<i64>()
                .unwrap()
                >= sent
        });
        let on_primary = Self::keys_of(&mut p);
        assert_eq!(Self::keys_of(&mut r), on_primary, "the replica differs");
        let replica_log = self.replica.log();
        assert!(
            !replica_log.contains("PXAT must be"),
            "the replica refused a command of its primary:\n{replica_log}"
        );

        self.primary.shutdown_nosave();
        self.primary.launch();
        let mut p = self.primary.connect();
        assert_eq!(
            Self::keys_of(&mut p),
            on_primary,
            "the AOF as written restores another dataset"
        );

        run(&mut p, &["BGREWRITEAOF"]).unwrap();
        wait_for("the AOF rewrite", Duration::from_secs(20), || {
            info_field(&mut p, "persistence", "aof_rewrite_in_progress") == "0"
                && info_field(&mut p, "persistence", "aof_rewrite_scheduled") == "0"
        });
        self.primary.shutdown_nosave();
        self.primary.launch();
        let mut p = self.primary.connect();
        assert_eq!(
            Self::keys_of(&mut p),
            on_primary,
            "the rewritten AOF restores another dataset"
        );
        // The replica reconnects to the restarted primary.
        wait_for("the replica link", Duration::from_secs(20), || {
            info_field(&mut r, "replication", "master_link_status") == "up"
        });
        on_primary
    }
}

fn encoded<S: State>(state: &S) -> Vec<u8> {
    let mut out = Vec::new();
    state.encode(&mut out);
    out
}

/// `RL.SETSTATE key state`: the reply, `Ok` or the error's text.
fn set_state(con: &mut redis::Connection, key: &str, state: &[u8]) -> Result<(), String> {
    redis::cmd("RL.SETSTATE")
        .arg(key)
        .arg(state)
        .query::<()>(con)
        .map_err(|e| e.to_string())
}

/// A token bucket emptied at `now_ms`.
fn empty_bucket(capacity: u64, rate_per_s: f64, now_ms: i64) -> TokenBucket {
    let params = TokenBucketParams {
        capacity,
        rate_per_s,
    };
    let (decision, state) = TokenBucket::check_with(None, params, now_ms, capacity, Mode::Take);
    assert!(decision.allowed);
    state.expect("taken")
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Issue 20: a bucket of 2^53-1 tokens refilling 1 a second, emptied, is
/// fresh again 2^53-1 s later: its key's expiry went past 2^53 ms and was
/// replicated as a `PXAT` the replica refused. The expiry now stops at
/// 2^53, and the key is on the replica and in the AOF.
#[test]
fn a_bucket_fresh_only_after_2_pow_53_ms_reaches_the_replica_and_the_aof() {
    let mut pair = Pair::start();
    let mut p = pair.primary.connect();
    let max = MAX_AMOUNT.to_string();
    let reply = check(&mut p, &["RL.TOKENBUCKET", "a", &max, "1", "COST", &max]);
    assert_eq!(reply[0], 1);
    let a = empty_bucket(MAX_AMOUNT, 1.0, server_time_ms(&mut p));
    assert_eq!(set_state(&mut p, "b", &encoded(&a)), Ok(()));
    let keys = pair.assert_copies_agree();
    assert_eq!(keys.len(), 2, "{keys:?}");
    let mut p = pair.primary.connect();
    assert_eq!(expiry_time(&mut p, "a"), MAX_TIMESTAMP_MS);
    assert_eq!(expiry_time(&mut p, "b"), MAX_TIMESTAMP_MS);
}

/// Issue 20: a token bucket refilling 1.0996e-308 tokens a second (a
/// subnormal float) was accepted, its key given an expiry past 2^53 ms; it
/// is refused now, as `RL.TOKENBUCKET` refuses that rate.
#[test]
fn a_bucket_with_a_subnormal_rate_is_refused_everywhere() {
    let mut pair = Pair::start();
    let mut p = pair.primary.connect();
    let state = hex("0101000000000000003333333333e807000000000000ff1f00deda5f12a2010000");
    let refused = set_state(&mut p, "dn", &state).unwrap_err();
    assert!(refused.contains("rate out of range"), "{refused}");
    let rate = format!("0.{}10996080332984074", "0".repeat(307));
    let refused = error_of(&mut p, &["RL.TOKENBUCKET", "dn", "1", &rate]);
    assert!(refused.starts_with("ERR rate must be"), "{refused}");
    // The smallest normal rate is taken, by both, and copied as it is.
    let rate = format!("0.{}22250738585072014", "0".repeat(307));
    assert_eq!(check(&mut p, &["RL.TOKENBUCKET", "n1", "1", &rate])[0], 1);
    let normal = empty_bucket(1, f64::MIN_POSITIVE, server_time_ms(&mut p));
    assert_eq!(set_state(&mut p, "n2", &encoded(&normal)), Ok(()));
    let keys = pair.assert_copies_agree();
    assert_eq!(keys.len(), 2, "{keys:?}");
}

/// Issue 20: a state stamped at 2^53 ms (year 287,396) denied its key for
/// ever, and the replica and the AOF refused its expiry. States stamped up
/// to two longest durations ahead are taken (and copied); beyond, refused.
#[test]
fn a_state_stamped_far_in_the_future_is_refused_and_one_near_is_copied() {
    let mut pair = Pair::start();
    let mut p = pair.primary.connect();
    let now = server_time_ms(&mut p);
    for (key, updated_ms, taken) in [
        ("at-2-pow-53", MAX_TIMESTAMP_MS, false),
        ("beyond", now + MAX_AHEAD_MS + 60_000, false),
        ("a-year-ahead", now + 366 * 86_400_000, true),
        ("near-the-horizon", now + MAX_AHEAD_MS - 60_000, true),
    ] {
        let state = empty_bucket(10, 1.0, updated_ms);
        let reply = set_state(&mut p, key, &encoded(&state));
        assert_eq!(reply.is_ok(), taken, "{key}: {reply:?}");
        if !taken {
            assert!(reply.unwrap_err().contains("timestamp out of range"));
        }
    }
    let keys = pair.assert_copies_agree();
    assert_eq!(keys.len(), 2, "{keys:?}");
}

/// Issue 20: a penalty ending at 2^53 ms locked its key for ever, and the
/// key's expiry went past what `PXAT` takes. Refused now; a penalty ending
/// within the horizon is taken and copied.
#[test]
fn a_penalty_ending_far_in_the_future_is_refused_and_one_near_is_copied() {
    let mut pair = Pair::start();
    let mut p = pair.primary.connect();
    let now = server_time_ms(&mut p);
    for (key, until_ms, taken) in [
        ("at-2-pow-53", MAX_TIMESTAMP_MS, false),
        ("beyond", now + MAX_AHEAD_MS + 60_000, false),
        ("a-year", now + 366 * 86_400_000, true),
    ] {
        let state = Penalized {
            until_ms,
            state: empty_bucket(10, 1.0, now),
        };
        let reply = set_state(&mut p, key, &encoded(&state));
        assert_eq!(reply.is_ok(), taken, "{key}: {reply:?}");
        if !taken {
            assert!(reply.unwrap_err().contains("penalty end out of range"));
        }
    }
    let denied = check(&mut p, &["RL.TOKENBUCKET", "a-year", "10", "1"]);
    assert_eq!(denied[0], 0, "the penalty holds");
    let keys = pair.assert_copies_agree();
    assert_eq!(keys.len(), 1, "{keys:?}");
}
