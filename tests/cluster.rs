//! The module in a Redis Cluster: three primaries with one replica each, on
//! loopback. Every command declares its key, so the cluster routes it to the
//! primary serving the key's slot; state replicates to that primary's replica
//! and survives a failover to it. Each test starts its own cluster (six
//! servers), one test at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;
use serial_test::serial;

/// Every check command with parameters, each called on a key of its own:
/// every algorithm with a limit of 10 a minute, and redis-cell's command.
fn commands() -> Vec<Spec> {
    let mut commands = every_algorithm(10, 60_000);
    commands.push(Spec::other("CL.THROTTLE", &["9", "10", "60"]));
    commands
}

/// Waits (up to 2 s) until a replica of every primary has acknowledged the
/// writes made through `client`, and returns how many did at least (the
/// smallest count over the primaries). `WAIT` counts the writes of the
/// connection it is sent on: a fresh connection to a primary wrote nothing,
/// so there it would return at once. The cluster client sends it to every
/// primary over the connections that carried the writes.
fn wait_for_replicas(client: &mut redis::cluster::ClusterConnection) -> i64 {
    redis::cmd("WAIT").arg(1).arg(2000).query(client).unwrap()
}

fn three_primaries_with_a_replica_each() -> Cluster {
    let start = Instant::now();
    let mut cluster = Cluster::start(3, 1, &[]);
    assert_eq!(cluster.primaries().len(), 3);
    println!("cluster of 6 nodes up in {:?}", start.elapsed());
    cluster
}

#[test]
#[serial(cluster)]
fn keys_spread_over_all_three_primaries_each_key_on_the_primary_of_its_slot() {
    let mut cluster = three_primaries_with_a_replica_each();
    let mut client = cluster.client();
    let keys: Vec<String> = (0..300).map(|i| format!("user:{i}")).collect();
    for key in &keys {
        let reply = check(&mut client, &["RL.TOKENBUCKET", key, "10", "1"]);
        assert_eq!(&reply[..3], &[1, 10, 9], "{key}");
    }
    let primaries = cluster.primaries();
    let mut total = 0;
    for &p in &primaries {
        let held: i64 = redis::cmd("DBSIZE")
            .query(&mut cluster.nodes[p].connect())
            .unwrap();
        println!(
            "primary on port {} holds {held} keys",
            cluster.nodes[p].port
        );
        assert!(held > 0, "a primary holds no key: the keys are not spread");
        total += held;
    }
    assert_eq!(total, 300, "keys on the primaries");
    for key in &keys {
        let owner = cluster.primary_of_key(primaries[0], key);
        assert!(
            exists(&mut cluster.nodes[owner].connect(), key),
            "{key} is not on the primary of its slot"
        );
    }
}

#[test]
#[serial(cluster)]
fn every_check_command_is_routed_to_the_primary_of_its_key_and_replicated() {
    let mut cluster = three_primaries_with_a_replica_each();
    let mut client = cluster.client();
    let primaries = cluster.primaries();
    for spec in commands() {
        let (command, params) = (spec.command.as_str(), spec.params());
        let params = &params[..];
        let key = format!("{command}:key");
        let reply = check(&mut client, &command_words(command, &key, params, &[]));
        let allowed = if command == "CL.THROTTLE" { 0 } else { 1 };
        assert_eq!(reply[0], allowed, "{command} through the cluster client");
        assert_eq!(reply[1], 10, "{command} limit");

        // The key lives on the primary of its slot, and its replica holds
        // exactly the same state.
        let owner = cluster.primary_of_key(primaries[0], &key);
        let mut con = cluster.nodes[owner].connect();
        assert!(exists(&mut con, &key), "{command}: key not on its primary");
        assert_eq!(
            wait_for_replicas(&mut client),
            1,
            "{command}: no replica acknowledged"
        );
        let replica = cluster.replicas_of(owner)[0];
        assert_eq!(
            digest_value(&mut cluster.nodes[replica].connect(), &key),
            digest_value(&mut con, &key),
            "{command}: the replica's state differs"
        );

        // Another primary does not run it: it redirects, which it can only do
        // because the command declares its key.
        let other = *primaries.iter().find(|&&p| p != owner).unwrap();
        let err = run(
            &mut cluster.nodes[other].connect(),
            &command_words(command, &key, params, &[]),
        )
        .unwrap_err();
        assert_eq!(err.code(), Some("MOVED"), "{command} on another primary");
    }
}

#[test]
#[serial(cluster)]
fn a_drained_bucket_stays_drained_after_its_primary_fails_over_to_the_replica() {
    let start = Instant::now();
    let mut cluster = three_primaries_with_a_replica_each();
    let mut client = cluster.client();
    let key = "drained";
    // Capacity 5, one token every 1000 s: nothing refills during the test.
    let bucket = ["RL.TOKENBUCKET", key, "5", "0.001"];
    for _ in 0..5 {
        assert_eq!(check(&mut client, &bucket)[0], 1);
    }
    assert_eq!(check(&mut client, &bucket)[0], 0);

    assert_eq!(wait_for_replicas(&mut client), 1, "no replica acknowledged");
    let primary = cluster.primary_of_key(0, key);
    let replica = cluster.replicas_of(primary)[0];
    let mut con = cluster.nodes[primary].connect();
    assert_eq!(
        digest_value(&mut cluster.nodes[replica].connect(), key),
        digest_value(&mut con, key)
    );

    let killed_at = Instant::now();
    cluster.nodes[primary].kill();
    wait_for(
        "the replica to be promoted",
        Duration::from_secs(30),
        || cluster.role(replica) == "master",
    );
    cluster.wait_healthy(Duration::from_secs(30));
    println!("failover took {:?}", killed_at.elapsed());
    assert_eq!(cluster.primary_of_key(replica, key), replica);

    // A cluster client finds the new primary, which remembers the bucket
    // empty. (A new client: the `redis` crate's synchronous cluster client
    // retries a refused connection to the dead primary but does not refresh
    // its slot map on that error, so an old one keeps failing.)
    let mut client = cluster.client();
    let peek = check(&mut client, &["RL.TOKENBUCKET", key, "5", "0.001", "PEEK"]);
    assert_eq!(&peek[..3], &[0, 5, 0], "the bucket refilled on failover");
    let reply = check(&mut client, &bucket);
    assert_eq!(reply[0], 0, "a request was allowed after the failover");
    println!("failover test took {:?}", start.elapsed());
}

/// RL.ALL in a cluster: keys sharing a hash tag are one slot and run
/// together; keys of different slots are refused with `CROSSSLOT`.
/// (Needs RL.ALL, PRODUCT.md section 3: a module without it fails this test
/// with "unknown command".)
#[test]
#[serial(cluster)]
fn rl_all_runs_on_hash_tagged_keys_and_refuses_keys_of_different_slots() {
    let mut cluster = three_primaries_with_a_replica_each();
    let mut client = cluster.client();
    let all = [
        "RL.ALL",
        "2",
        "{u1}:s",
        "{u1}:m",
        "TOKENBUCKET",
        "10",
        "1",
        "FIXEDWINDOW",
        "100",
        "60",
    ];
    let reply = run(&mut client, &all).unwrap();
    let Value::Array(items) = reply else {
        panic!("RL.ALL replied {reply:?}")
    };
    assert_eq!(items.len(), 6, "five integers and the tiers' replies");
    assert_eq!(items[0], Value::Int(1), "allowed");
    assert_eq!(items[1], Value::Int(10), "the tightest tier's limit");
    assert!(matches!(&items[5], Value::Array(tiers) if tiers.len() == 2));

    let owner = cluster.primary_of_key(0, "{u1}");
    let mut con = cluster.nodes[owner].connect();
    assert!(exists(&mut con, "{u1}:s") && exists(&mut con, "{u1}:m"));

    // Keys of different slots: refused on any node, before any routing.
    let slot = |key: &str| -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut cluster.nodes[owner].connect())
            .unwrap()
    };
    assert_ne!(slot("a"), slot("b"));
    let cross = [
        "RL.ALL",
        "2",
        "a",
        "b",
        "TOKENBUCKET",
        "10",
        "1",
        "TOKENBUCKET",
        "10",
        "1",
    ];
    for &node in &cluster.primaries() {
        let err = error_of(&mut cluster.nodes[node].connect(), &cross);
        assert!(err.starts_with("CROSSSLOT"), "node {node} replied {err}");
    }
    assert!(!exists(&mut client, "a") && !exists(&mut client, "b"));
}
