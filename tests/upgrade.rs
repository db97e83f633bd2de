//! Upgrading the module on a running server (docs/install.md, "Upgrading"),
//! on whichever server `RL_SERVER` names (`make test-compat` runs it on each):
//! - `MODULE UNLOAD` is refused, because the module exports data types, and
//!   refusing changes nothing: keys, waiting clients, the replica go on; a
//!   second copy of the module cannot be loaded beside the first;
//! - so an upgrade is a restart on the new file, which keeps every key and
//!   its expiry (RDB) and drops waiting clients' connections;
//! - or a failover to a replica already running the new file, which holds
//!   the primary's state exactly, while the old primary, now its replica,
//!   follows it.
//!
//! The "new release" is a copy of the module under test at another path:
//! what is tested is the path operators take, with the file the server
//! reports changing (MODULE LIST), not a change of version.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use common::*;
use redis::Value;

/// A copy of the module under test, standing for the next release.
struct NewRelease {
    dir: PathBuf,
    path: PathBuf,
}

impl NewRelease {
    fn install(tag: &str) -> NewRelease {
        let dir = std::env::temp_dir().join(format!("rl-upgrade-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("libredis_ratelimit-next.so");
        std::fs::copy(module_path(), &path).unwrap();
        NewRelease { dir, path }
    }
}

impl Drop for NewRelease {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One key of every type the module exports: each algorithm's, a penalized
/// one, a lease set. Their names.
fn fill(con: &mut redis::Connection) -> Vec<String> {
    let mut keys = Vec::new();
    for spec in limit_5() {
        let key = format!("u:{}", spec.command);
        check(con, &spec.words(&key, &[]));
        keys.push(key);
    }
    // Penalized: used up, then denied with a penalty.
    for _ in 0..6 {
        check(
            con,
            &["RL.FIXEDWINDOW", "u:penalized", "5", "1h", "PENALTY", "1h"],
        );
    }
    keys.push("u:penalized".into());
    run(con, &["RL.ACQUIRE", "u:leases", "3", "1h", "ID", "a"]).unwrap();
    keys.push("u:leases".into());
    keys
}

/// What must survive: each key's serialized value and its expiry.
fn snapshot(con: &mut redis::Connection, keys: &[String]) -> Vec<(Option<Vec<u8>>, i64)> {
    keys.iter()
        .map(|k| (dump(con, k), expiry_time(con, k)))
        .collect()
}

fn module_list(con: &mut redis::Connection) -> String {
    format!("{:?}", run(con, &["MODULE", "LIST"]).unwrap())
}

fn blocked_clients(con: &mut redis::Connection) -> i64 {
    info_field(con, "ratelimit", "ratelimit_blocked_clients")
        .parse()
        .unwrap()
}

/// A client waiting with no time limit for the one slot of `slots`, which
/// the lease `holder` holds. Its thread returns the reply, or the error.
fn waiter(port: u16, con: &mut redis::Connection) -> thread::JoinHandle<redis::RedisResult<Value>> {
    run(con, &["RL.ACQUIRE", "slots", "1", "1h", "ID", "holder"]).unwrap();
    let handle = thread::spawn(move || {
        let mut con = connect_port(port).unwrap();
        run(
            &mut con,
            &["RL.ACQUIRE", "slots", "1", "1h", "ID", "next", "BLOCK", "0"],
        )
    });
    wait_for("the client to wait", Duration::from_secs(10), || {
        blocked_clients(con) == 1
    });
    handle
}

fn first_integer(reply: &Value) -> i64 {
    match reply {
        Value::Array(items) => match items[0] {
            Value::Int(i) => i,
            ref other => panic!("not an integer: {other:?}"),
        },
        other => panic!("not an array: {other:?}"),
    }
}

fn in_sync(primary: &mut redis::Connection, replica: &mut redis::Connection) {
    wait_for("the replica to catch up", Duration::from_secs(20), || {
        let offset = info_field(primary, "replication", "master_repl_offset");
        info_field(replica, "replication", "master_link_status") == "up"
            && info_field(replica, "replication", "master_repl_offset") == offset
    });
}

#[test]
fn module_unload_is_refused_and_changes_nothing() {
    let server = Server::start(&["--enable-module-command", "yes"]);
    let replica = Server::start_replica_of(&server);
    let mut con = server.connect();
    let mut rcon = replica.connect();
    let keys = fill(&mut con);
    let waiting = waiter(server.port, &mut con);
    in_sync(&mut con, &mut rcon);
    let before = snapshot(&mut con, &keys);
    let modules = module_list(&mut con);

    let refused = error_of(&mut con, &["MODULE", "UNLOAD", "ratelimit"]);
    println!("MODULE UNLOAD ratelimit: {refused}");
    assert!(
        refused.contains("exports one or more module-side data types"),
        "{refused}"
    );
    // Nor can the next release be loaded beside it (its name is taken).
    let next = NewRelease::install("unload");
    let refused = error_of(&mut con, &["MODULE", "LOAD", next.path.to_str().unwrap()]);
    println!("MODULE LOAD <a second copy>: {refused}");
    assert!(refused.contains("Error loading the extension"), "{refused}");

    // Nothing changed: the keys, the module, the client still waiting.
    assert_eq!(snapshot(&mut con, &keys), before);
    assert_eq!(module_list(&mut con), modules);
    assert_eq!(blocked_clients(&mut con), 1);
    // The waiting client is served when the slot is released, and the
    // replica follows all of it.
    run(&mut con, &["RL.RELEASE", "slots", "holder"]).unwrap();
    let reply = waiting.join().unwrap().expect("the waiting client's reply");
    assert_eq!(first_integer(&reply), 1, "{reply:?}");
    in_sync(&mut con, &mut rcon);
    for key in keys.iter().map(String::as_str).chain(["slots"]) {
        assert_eq!(
            digest_value(&mut con, key),
            digest_value(&mut rcon, key),
            "{key} differs on the replica"
        );
    }
}

#[test]
fn an_upgrade_by_restart_keeps_every_key_and_drops_waiting_clients() {
    let mut old = Server::start(&[]);
    let mut con = old.connect();
    let keys = fill(&mut con);
    let waiting = waiter(old.port, &mut con);
    let slots = dump(&mut con, "slots");
    let before = snapshot(&mut con, &keys);

    // SHUTDOWN saves (it would without SAVE too, were save points set); the
    // connection closes without a reply.
    assert!(run(&mut con, &["SHUTDOWN", "SAVE"]).is_err());
    wait_for("the old server to exit", Duration::from_secs(20), || {
        !old.is_alive()
    });
    let dropped = waiting.join().unwrap();
    println!("the waiting client, at SHUTDOWN: {dropped:?}");
    assert!(dropped.is_err(), "a waiting client got {dropped:?}");

    // The new release, on the same directory (its dump.rdb).
    let next = NewRelease::install("restart");
    let new = Server::start_with(Options {
        args: &["--dir", old.dir.to_str().unwrap()],
        module: Some(&next.path),
        ..Options::default()
    });
    let mut con = new.connect();
    assert!(
        module_list(&mut con).contains("libredis_ratelimit-next.so"),
        "{}",
        module_list(&mut con)
    );
    assert_eq!(snapshot(&mut con, &keys), before);
    // The waiter took nothing: the lease set is as it was, and checks go on.
    assert_eq!(dump(&mut con, "slots"), slots);
    assert_eq!(
        check(&mut con, &["RL.FIXEDWINDOW", "u:RL.FIXEDWINDOW", "5", "1h"])[0],
        1
    );
}

#[test]
fn an_upgrade_by_failover_keeps_the_primarys_state_on_the_new_release() {
    let next = NewRelease::install("failover");
    let old = Server::start(&[]);
    let new = Server::start_with(Options {
        module: Some(&next.path),
        ..Options::default()
    });
    let mut ocon = old.connect();
    let mut ncon = new.connect();
    run(
        &mut ncon,
        &["REPLICAOF", "127.0.0.1", &old.port.to_string()],
    )
    .unwrap();
    let keys = fill(&mut ocon);
    // A client waiting on the old primary, with no time limit (no timer due
    // during the failover).
    let waiting = waiter(old.port, &mut ocon);
    in_sync(&mut ocon, &mut ncon);
    let before = snapshot(&mut ocon, &keys);
    let slots = dump(&mut ocon, "slots");

    // FAILOVER (Redis 6.2 and later, Valkey): the primary pauses writes,
    // waits for its replica to catch up, then they swap roles.
    run(&mut ocon, &["FAILOVER"]).unwrap();
    // The server itself unblocks the waiting client when it turns replica.
    let unblocked = waiting.join().unwrap();
    println!("the waiting client, at FAILOVER: {unblocked:?}");
    let error = unblocked.expect_err("a waiting client kept waiting on a replica");
    assert_eq!(error.code(), Some("UNBLOCKED"), "{error}");
    wait_for("the roles to swap", Duration::from_secs(30), || {
        info_field(&mut ncon, "replication", "role") == "master"
            && info_field(&mut ocon, "replication", "role") == "slave"
            && info_field(&mut ocon, "replication", "master_link_status") == "up"
    });
    assert_eq!(snapshot(&mut ncon, &keys), before);
    // The unblocked client took nothing.
    assert_eq!(dump(&mut ncon, "slots"), slots);
    assert!(module_list(&mut ncon).contains("libredis_ratelimit-next.so"));

    // The new release serves, and the old one, now its replica, follows
    // until it is restarted on the new file in turn.
    for spec in limit_5() {
        let key = format!("u:{}", spec.command);
        assert_eq!(check(&mut ncon, &spec.words(&key, &[]))[0], 1);
    }
    in_sync(&mut ncon, &mut ocon);
    for key in &keys {
        assert_eq!(
            digest_value(&mut ncon, key),
            digest_value(&mut ocon, key),
            "{key} differs on the old release"
        );
    }
}
