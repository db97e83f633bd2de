//! Clock faults: the server runs under libfaketime (Debian package
//! `faketime`), its wall clock moved by the test while it runs: a year
//! forward, an hour back, a day back, forward again. The module must not
//! crash, must never allow more than the limit across a backward step (it
//! acts as if no time passed until the clock is back where it was), and its
//! replies stay sane.
//!
//! How the clock is moved: `LD_PRELOAD` of libfaketime with
//! `FAKETIME_TIMESTAMP_FILE` (an offset such as `+3600` or `-86400`, in
//! seconds, re-read on every clock call thanks to `FAKETIME_NO_CACHE=1`).
//! Only the wall clock moves (`FAKETIME_DONT_FAKE_MONOTONIC=1`), as when NTP
//! or an operator steps it: Redis's timers run on the monotonic clock, the
//! module on the wall clock (`RedisModule_Milliseconds`, i.e. gettimeofday).
//!
//! Why glibc's `libc_malloc_debug.so.0` is preloaded too: Debian's
//! redis-server allocates with jemalloc, which reads `clock_gettime` while
//! holding its own lock; libfaketime, initialising on that first call, looks
//! up a symbol glibc lacks (`__ftime`), and glibc allocates the error
//! message, re-entering jemalloc, which deadlocks at startup (libfaketime
//! issue #130). Preloading glibc's malloc wrappers first serves `malloc` from
//! glibc instead, which never reads the clock. Nothing else changes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::sleep;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use redis::Connection;

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;
const YEAR: i64 = 365 * DAY;

/// The libraries to preload; `$LIB` is expanded by the dynamic loader to the
/// system's library directory (as the `faketime` wrapper itself does).
const PRELOAD: &str = "/usr/$LIB/libc_malloc_debug.so.0 /usr/$LIB/faketime/libfaketime.so.1";

/// A server whose wall clock is `real + offset`, the offset set by the test.
struct FakeClock {
    server: Server,
    file: PathBuf,
}

impl FakeClock {
    fn start() -> FakeClock {
        let installed = std::fs::read_dir("/usr/lib")
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.path().join("faketime/libfaketime.so.1").exists());
        assert!(
            installed,
            "libfaketime is missing: install the `faketime` package \
             (`apt-get install faketime`, or `make deps`)"
        );
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let file = std::env::temp_dir().join(format!(
            "rl-faketime-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        write_offset(&file, 0);
        let file_env = file.to_str().unwrap();
        let server = Server::start_with(Options {
            env: &[
                ("LD_PRELOAD", PRELOAD),
                ("FAKETIME_TIMESTAMP_FILE", file_env),
                ("FAKETIME_NO_CACHE", "1"),
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
            ..Options::default()
        });
        let mut clock = FakeClock { server, file };
        // The offset must reach the server, or nothing below means anything.
        clock.set_offset(YEAR);
        let skew = server_time_ms(&mut clock.server.connect()) - real_ms();
        assert!(
            (skew - YEAR * 1000).abs() < 5000,
            "libfaketime does not move the server's clock (skew {skew} ms); log:\n{}",
            clock.server.log()
        );
        clock.set_offset(0);
        clock
    }

    fn set_offset(&mut self, seconds: i64) {
        write_offset(&self.file, seconds);
    }

    /// Checks the server is up and answering.
    fn assert_alive(&mut self) {
        assert!(self.server.is_alive(), "the server died");
        let pong: String = redis::cmd("PING")
            .query(&mut self.server.connect())
            .unwrap();
        assert_eq!(pong, "PONG");
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Writes the offset atomically, so the server never reads half a file.
fn write_offset(file: &Path, seconds: i64) {
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{seconds:+}\n")).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

fn real_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Every check command, with a limit of 10, buckets and meters refilling one
/// a second (so 1.5 s of real time would refill one if it counted): every
/// algorithm with 10 per 10 s, and redis-cell's command.
fn limited() -> Vec<Spec> {
    let hourly = every_algorithm(LIMIT as u64, HOUR_MS);
    let mut limited = every_algorithm(LIMIT as u64, 10_000);
    for (spec, hourly) in limited.iter_mut().zip(hourly) {
        // An hour's window: a burst crossing the end of a 10 s window would
        // be allowed twice over.
        if spec.name == "fixedwindow" {
            *spec = hourly;
        }
    }
    limited.push(Spec::other("CL.THROTTLE", &["9", "1", "1"]));
    limited
}
const LIMIT: i64 = 10;

/// Calls `command` on its key `LIMIT + 5` times in a row; returns how many
/// were allowed, after checking every reply is sane.
fn burst(con: &mut Connection, command: &str, params: &[&str]) -> i64 {
    let key = format!("{command}:key");
    let mut words = vec![command, key.as_str()];
    words.extend_from_slice(params);
    let mut allowed = 0;
    for _ in 0..LIMIT + 5 {
        let r = check(con, &words);
        let what = format!("{command} replied {r:?}");
        assert!(r.len() >= 5, "{what}");
        let (ok, limit, remaining, retry, reset) = (r[0], r[1], r[2], r[3], r[4]);
        assert_eq!(limit, LIMIT, "{what}");
        assert!((0..=LIMIT).contains(&remaining), "{what}");
        assert!(reset >= 0, "{what}");
        if command == "CL.THROTTLE" {
            // [limited, limit, remaining, retry_after_s (-1 when allowed), reset_after_s]
            assert!(ok == 0 || ok == 1, "{what}");
            assert_eq!(ok == 0, retry == -1, "{what}");
            allowed += 1 - ok;
        } else {
            assert!(ok == 0 || ok == 1, "{what}");
            assert!(retry >= -1, "{what}");
            // Allowed: no wait. Denied: a wait (or never, -1), not "now".
            assert_eq!(ok == 1, retry == 0, "{what}");
            allowed += ok;
        }
    }
    allowed
}

#[test]
fn faketime_moves_the_clock_the_module_reads() {
    let mut clock = FakeClock::start();
    // A year and 1234 s ahead: the hour-aligned fixed window then ends at a
    // different moment by the fake clock than by the real one.
    clock.set_offset(YEAR + 1234);
    let mut con = clock.server.connect();
    let now = server_time_ms(&mut con);
    assert!((now - real_ms() - (YEAR + 1234) * 1000).abs() < 5000);
    let reset = check(&mut con, &["RL.FIXEDWINDOW", "w", "10", "1h"])[4];
    let expected = HOUR * 1000 - now.rem_euclid(HOUR * 1000);
    assert!(
        (reset - expected).abs() < 1000,
        "the module's window ends in {reset} ms, the fake clock says {expected} ms"
    );
    clock.assert_alive();
}

#[test]
fn steps_of_the_clock_back_never_allow_more_than_the_limit() {
    let mut clock = FakeClock::start();
    let mut con = clock.server.connect();
    // (offset, what to expect of each burst: allowed at least, at most)
    let steps: [(&str, i64, i64, i64); 5] = [
        ("real time", 0, LIMIT, LIMIT),
        ("a year ahead (every key expired)", YEAR, LIMIT, LIMIT),
        ("an hour back", YEAR - HOUR, 0, 0),
        ("a day back", YEAR - DAY, 0, 0),
        ("forward again, a day later", YEAR + DAY, 1, LIMIT),
    ];
    for (what, offset, at_least, at_most) in steps {
        clock.set_offset(offset);
        if offset < YEAR {
            // Real time passes while the clock is behind: none of it counts.
            sleep(Duration::from_millis(1500));
        }
        let mut counts = vec![];
        for spec in limited() {
            let (command, params) = (spec.command.as_str(), spec.params());
            let params = &params[..];
            let allowed = burst(&mut con, command, params);
            counts.push(allowed);
            assert!(
                (at_least..=at_most).contains(&allowed),
                "{what}: {command} allowed {allowed} of {}, expected {at_least} to {at_most}",
                LIMIT + 5
            );
        }
        println!("{what}: allowed per command {counts:?}");
        clock.assert_alive();
    }
}

/// A replica whose clock is 300 days behind its primary's holds every state
/// the primary holds (issue 20): a state stamped 731 days ahead of the
/// primary's clock (within a client's horizon, two longest durations),
/// 1,031 days ahead of the replica's, and a lease of 366 days taken on it
/// (1,397 days ahead), by replication and by a full sync: a copy is not
/// judged again by the replica's clock. (Judged by it, the full sync's RDB
/// was refused and the replica stopped.)
#[test]
fn a_replica_whose_clock_is_behind_takes_every_state_its_primary_holds() {
    use redis_ratelimit::algorithms::concurrency::{LeaseParams, Leases};
    use redis_ratelimit::algorithms::token_bucket::{TokenBucket, TokenBucketParams};
    use redis_ratelimit::algorithms::{Algorithm, State};

    let primary = Server::start(&[]);
    let mut p = primary.connect();
    let mut clock = FakeClock::start();
    clock.set_offset(-300 * DAY);
    let mut r = clock.server.connect();
    run(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
    )
    .unwrap();
    wait_for("the replica link", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status") == "up"
    });
    let params = TokenBucketParams {
        capacity: 10,
        rate_per_s: 1.0,
    };
    let ahead = server_time_ms(&mut p) + 731 * DAY * 1000;
    let mut bucket = Vec::new();
    TokenBucket::fresh(params, ahead).encode(&mut bucket);
    let leases = Leases::new(
        LeaseParams {
            limit: 2,
            lease_ms: 1000,
        },
        ahead,
    );
    let mut lease_set = Vec::new();
    leases.encode(&mut lease_set);
    for (key, state) in [("k", &bucket), ("l", &lease_set)] {
        let set: redis::RedisResult<()> = redis::cmd("RL.SETSTATE")
            .arg(key)
            .arg(state)
            .arg("PXAT")
            .arg(ahead + 3_600_000)
            .query(&mut p);
        assert!(set.is_ok(), "{key}: {set:?}");
    }
    let taken = run(&mut p, &["RL.ACQUIRE", "l", "2", "366d", "ID", "a"]).unwrap();
    assert!(matches!(&taken, redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(1))));
    let same = |p: &mut Connection, r: &mut Connection| {
        ["k", "l"]
            .iter()
            .all(|key| exists(r, key) && digest_value(r, key) == digest_value(p, key))
    };
    wait_for(
        "the replica to take the states",
        Duration::from_secs(10),
        || same(&mut p, &mut r),
    );
    // A full sync: the replica reads both from the primary's RDB.
    run(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    run(&mut r, &["FLUSHALL"]).unwrap();
    run(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
    )
    .unwrap();
    wait_for("the full sync", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status") == "up" && same(&mut p, &mut r)
    });
    let log = clock.server.log();
    assert!(
        !log.contains("ERR") && !log.contains("cannot load"),
        "{log}"
    );
    clock.assert_alive();
}
