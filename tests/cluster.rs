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

// Resharding under waiters (issue 28, item 5): `MIGRATE` deletes a moved key
// from the node giving its slot up, which wakes the key's waiters there. They
// must not be decided there (nor the key written back): each is answered the
// redirect a cluster client follows, to the node that serves the slot now.

/// How a waited key's slot is moved from one primary to another.
#[derive(Clone, Copy, Debug)]
enum Move {
    /// `redis-cli --cluster reshard`, moving the source's lowest slots up
    /// to the key's.
    Reshard,
    /// By hand: `CLUSTER SETSLOT` IMPORTING / MIGRATING, `MIGRATE`, then
    /// `SETSLOT NODE` on both, the key's slot only. Waiters are answered
    /// between the `MIGRATE` and the `SETSLOT NODE`, while the slot is
    /// still migrating: they are asked (`ASK`) to the new node.
    ByHand,
    /// By hand, `MIGRATE` and `SETSLOT NODE` sent to the old node in one
    /// pipeline (then `SETSLOT NODE` to the new one): waiters are answered
    /// after the old node gave the slot up, and are `MOVED` (on Redis; see
    /// below for Valkey).
    ByHandAtOnce,
    /// By hand, one key per `MIGRATE`, a pause after each: an `RL.ALL`
    /// waiter whose keys are half moved is told to try again (`TRYAGAIN`,
    /// as Redis answers a command on such keys), then finds the new node.
    ByHandKeyByKey,
}

/// A waited limit: what empties it on the first node, what its waiters
/// send, and its keys (one hash slot: `{t644}`, slot 7).
struct Waited {
    keys: &'static [&'static str],
    /// The requests that empty it (each allowed).
    empty: &'static [&'static [&'static str]],
    /// A waiter's command, without `BLOCK`.
    wait: &'static [&'static str],
    waiters: usize,
}

const TOKEN_BUCKET: Waited = Waited {
    keys: &["{t644}:k"],
    empty: &[&["RL.TOKENBUCKET", "{t644}:k", "100", "0.01", "COST", "100"]],
    wait: &["RL.TOKENBUCKET", "{t644}:k", "100", "0.01"],
    waiters: 20,
};

/// Two tiers in one `RL.ALL`: a token bucket and a fixed window.
const TWO_TIERS: Waited = Waited {
    keys: &["{t644}:s", "{t644}:m"],
    empty: &[&[
        "RL.ALL",
        "2",
        "{t644}:s",
        "{t644}:m",
        "TOKENBUCKET",
        "100",
        "0.01",
        "FIXEDWINDOW",
        "100",
        "3600",
        "COST",
        "100",
    ]],
    wait: &[
        "RL.ALL",
        "2",
        "{t644}:s",
        "{t644}:m",
        "TOKENBUCKET",
        "100",
        "0.01",
        "FIXEDWINDOW",
        "100",
        "3600",
    ],
    waiters: 5,
};

/// Five leases of ten minutes, all taken.
const LEASES: Waited = Waited {
    keys: &["{t644}:l"],
    empty: &[
        &["RL.ACQUIRE", "{t644}:l", "5", "600s"],
        &["RL.ACQUIRE", "{t644}:l", "5", "600s"],
        &["RL.ACQUIRE", "{t644}:l", "5", "600s"],
        &["RL.ACQUIRE", "{t644}:l", "5", "600s"],
        &["RL.ACQUIRE", "{t644}:l", "5", "600s"],
    ],
    wait: &["RL.ACQUIRE", "{t644}:l", "5", "600s"],
    waiters: 10,
};

fn node_id(con: &mut redis::Connection) -> String {
    redis::cmd("CLUSTER").arg("MYID").query(con).unwrap()
}

fn keys_in_slot(con: &mut redis::Connection, slot: u16) -> i64 {
    redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(con)
        .unwrap()
}

/// A waiter's command with `BLOCK ms`, sent on a plain connection to
/// `port` (after `ASKING` when `asking`); its reply within 30 s.
fn send_blocking(
    port: u16,
    words: &[&str],
    block_ms: u64,
    asking: bool,
) -> redis::RedisResult<Value> {
    let mut con = connect_port(port)?;
    con.set_read_timeout(Some(Duration::from_secs(30)))?;
    if asking {
        redis::cmd("ASKING").query::<()>(&mut con)?;
    }
    let block = block_ms.to_string();
    let mut words = words.to_vec();
    words.extend(["BLOCK", &block]);
    run(&mut con, &words)
}

/// Whether a reply allows its request (`[1, ...]`).
fn allowed(reply: &redis::RedisResult<Value>) -> bool {
    matches!(reply, Ok(Value::Array(items)) if items.first() == Some(&Value::Int(1)))
}

/// Moves `slot` from primary `from` to primary `to` (node indexes); what
/// went wrong if it could not.
fn move_slot(
    cluster: &mut Cluster,
    how: Move,
    slot: u16,
    from: usize,
    to: usize,
) -> Result<(), String> {
    let mut source = cluster.nodes[from].connect();
    let mut target = cluster.nodes[to].connect();
    let (from_id, to_id) = (node_id(&mut source), node_id(&mut target));
    match how {
        Move::Reshard => {
            let below = cluster
                .nodes_seen_by(from)
                .into_iter()
                .find(|n| n.port == cluster.nodes[from].port)
                .unwrap()
                .slots
                .iter()
                .map(|&(first, last)| (first..=last.min(slot)).count())
                .sum::<usize>();
            let out = std::process::Command::new("timeout")
                .arg("60")
                .arg(cli_binary())
                .args(["--cluster", "reshard", &cluster.nodes[from].address()])
                .args(["--cluster-from", &from_id, "--cluster-to", &to_id])
                .args(["--cluster-slots", &below.to_string(), "--cluster-yes"])
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            let tail: Vec<&str> = said.lines().rev().take(8).collect();
            println!("reshard of {below} slots: {} ({tail:?})", out.status);
            if !out.status.success() {
                return Err(format!(
                    "redis-cli --cluster reshard did not complete ({}):\n{said}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Move::ByHand | Move::ByHandAtOnce | Move::ByHandKeyByKey => {
            let setslot = |con: &mut redis::Connection, state: &str, id: &str| {
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id)
                    .query::<()>(con)
                    .map_err(|e| format!("CLUSTER SETSLOT {slot} {state} {id} failed: {e}"))
            };
            setslot(&mut target, "IMPORTING", &from_id)?;
            setslot(&mut source, "MIGRATING", &to_id)?;
            let at_once = matches!(how, Move::ByHandAtOnce);
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut source)
                .unwrap();
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(cluster.nodes[to].port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            if at_once {
                // One read of the old node's input: no timer of its own
                // runs between the two.
                redis::pipe()
                    .add_command(migrate)
                    .cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&to_id)
                    .query::<()>(&mut source)
                    .map_err(|e| format!("MIGRATE + SETSLOT NODE failed: {e}"))?;
                setslot(&mut target, "NODE", &to_id)?;
            } else if let Move::ByHandKeyByKey = how {
                for key in &keys {
                    redis::cmd("MIGRATE")
                        .arg("127.0.0.1")
                        .arg(cluster.nodes[to].port)
                        .arg(key)
                        .arg(0)
                        .arg(5000)
                        .query::<()>(&mut source)
                        .map_err(|e| format!("MIGRATE {key} failed: {e}"))?;
                    std::thread::sleep(Duration::from_millis(300));
                }
                setslot(&mut target, "NODE", &to_id)?;
                setslot(&mut source, "NODE", &to_id)?;
            } else {
                migrate
                    .query::<()>(&mut source)
                    .map_err(|e| format!("MIGRATE failed: {e}"))?;
                // The waiters are answered now, while the slot is migrating.
                std::thread::sleep(Duration::from_millis(300));
                setslot(&mut target, "NODE", &to_id)?;
                setslot(&mut source, "NODE", &to_id)?;
            }
            for node in cluster.running() {
                if node != from && node != to && cluster.role(node) == "master" {
                    setslot(&mut cluster.nodes[node].connect(), "NODE", &to_id)?;
                }
            }
        }
    }
    Ok(())
}

/// The reproduction: a limit emptied on its primary A, clients
/// waiting on it there (`BLOCK 0`, plain connections to A), its slot moved
/// to primary B under them. Then: the move completed, no waiter was allowed
/// on A, each was answered a redirect to B that it can follow, B holds the
/// limit as A held it (and B's replica the same), A and A's replica hold
/// nothing of the slot, and the waiters, following the redirect with
/// `BLOCK` on B, are not allowed past the limit either.
fn reshard_under_waiters(how: Move, waited: &Waited) {
    let mut cluster = three_primaries_with_a_replica_each();
    let key = waited.keys[0];
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut cluster.nodes[0].connect())
        .unwrap();
    let a = cluster.primary_of_key(0, key);
    let b = *cluster.primaries().iter().find(|&&p| p != a).unwrap();
    let a_replica = cluster.replicas_of(a)[0];
    let b_replica = cluster.replicas_of(b)[0];
    let (port_a, port_b) = (cluster.nodes[a].port, cluster.nodes[b].port);
    let mut con_a = cluster.nodes[a].connect();

    for words in waited.empty {
        assert!(allowed(&run(&mut con_a, words)), "{words:?} on A");
    }
    let blocked = |con: &mut redis::Connection| -> i64 {
        info_field(con, "ratelimit", "ratelimit_blocked_clients")
            .parse()
            .unwrap()
    };
    let states_before: Vec<Option<Vec<u8>>> =
        waited.keys.iter().map(|k| dump(&mut con_a, k)).collect();

    let wait = waited.wait;
    let waiters: Vec<_> = (0..waited.waiters)
        .map(|_| std::thread::spawn(move || send_blocking(port_a, wait, 0, false)))
        .collect();
    wait_for("the waiters to block on A", Duration::from_secs(5), || {
        blocked(&mut con_a) == waited.waiters as i64
    });

    let moved = move_slot(&mut cluster, how, slot, a, b);
    let replies: Vec<redis::RedisResult<Value>> =
        waiters.into_iter().map(|w| w.join().unwrap()).collect();
    for reply in &replies {
        println!("a waiter on A was answered {reply:?}");
    }
    let allowed_on_a = replies.iter().filter(|r| allowed(r)).count();
    println!("{allowed_on_a} of {} waiters allowed on A", replies.len());
    moved.unwrap_or_else(|why| panic!("{how:?}: {why}"));

    // Nobody allowed on A; each told where to go.
    assert_eq!(
        allowed_on_a, 0,
        "waiters allowed on A, which gave the slot up"
    );
    let waits_allowed = info_field(&mut con_a, "ratelimit", "ratelimit_waits_allowed");
    assert_eq!(waits_allowed, "0", "A counted waiters allowed");
    let mut follow = Vec::new();
    for reply in &replies {
        let error = reply.as_ref().unwrap_err();
        if let Move::ByHandKeyByKey = how {
            assert_eq!(error.code(), Some("TRYAGAIN"), "half moved: {error:?}");
            follow.push(false);
            continue;
        }
        let (address, to_slot) = error
            .redirect_node()
            .unwrap_or_else(|| panic!("a waiter was answered {error:?}, not a redirect"));
        assert_eq!(to_slot, slot, "redirected for another slot: {error:?}");
        assert_eq!(
            address,
            cluster.nodes[b].address(),
            "redirected elsewhere than B: {error:?}"
        );
        follow.push(error.code() == Some("ASK"));
    }
    match how {
        Move::ByHand => assert!(
            follow.iter().all(|&ask| ask),
            "answered while the slot was migrating: ASK"
        ),
        // Valkey 8's `SETSLOT NODE` waits for the node's replicas to
        // acknowledge it, and the waiters are answered meanwhile, while
        // the slot is still migrating: `ASK` there.
        Move::ByHandAtOnce if info_field(&mut con_a, "server", "server_name") == "valkey" => {}
        Move::ByHandAtOnce => assert!(
            follow.iter().all(|&ask| !ask),
            "answered once the slot was given up: MOVED"
        ),
        Move::Reshard | Move::ByHandKeyByKey => {}
    }

    // The slot is B's, as every node sees it; B holds the limit as A did.
    for node in cluster.running() {
        wait_for(
            "every node to see the slot on B",
            Duration::from_secs(10),
            || cluster.primary_of_key(node, key) == b,
        );
    }
    let mut con_b = cluster.nodes[b].connect();
    for (k, before) in waited.keys.iter().zip(&states_before) {
        assert_eq!(&dump(&mut con_b, k), before, "{k}: B holds another state");
        assert!(before.is_some(), "{k} was not written on A");
    }
    let mut con_b_replica = cluster.nodes[b_replica].connect();
    for k in waited.keys {
        wait_for(
            "B's replica to hold the key",
            Duration::from_secs(10),
            || digest_value(&mut con_b_replica, k) == digest_value(&mut con_b, k),
        );
    }
    // Nothing of the slot left on A or on A's replica.
    let mut con_a_replica = cluster.nodes[a_replica].connect();
    assert_eq!(
        keys_in_slot(&mut con_a, slot),
        0,
        "A holds keys of the slot"
    );
    wait_for(
        "A's replica to drop the slot's keys",
        Duration::from_secs(10),
        || keys_in_slot(&mut con_a_replica, slot) == 0,
    );

    // Following the redirects, with a bounded wait: still nothing allowed
    // (the limit is spent, its next token 100 s away).
    let followed: Vec<_> = follow
        .into_iter()
        .map(|ask| std::thread::spawn(move || send_blocking(port_b, wait, 1000, ask)))
        .collect();
    let followed: Vec<redis::RedisResult<Value>> =
        followed.into_iter().map(|w| w.join().unwrap()).collect();
    for reply in &followed {
        assert!(
            matches!(reply, Ok(Value::Array(items)) if items.first() == Some(&Value::Int(0))),
            "a waiter following its redirect to B was answered {reply:?}"
        );
    }
    for (k, before) in waited.keys.iter().zip(&states_before) {
        assert_eq!(
            &dump(&mut con_b, k),
            before,
            "{k}: a denial changed B's state"
        );
    }
    assert_eq!(blocked(&mut con_a), 0, "waiters left on A");
    assert_eq!(blocked(&mut con_b), 0, "waiters left on B");
}

#[test]
#[serial(cluster)]
fn resharding_a_waited_key_sends_its_waiters_to_the_new_primary_and_allows_none_on_the_old() {
    reshard_under_waiters(Move::Reshard, &TOKEN_BUCKET);
}

#[test]
#[serial(cluster)]
fn moving_a_waited_slot_by_hand_asks_its_waiters_to_the_new_primary_and_allows_none_on_the_old() {
    reshard_under_waiters(Move::ByHand, &TOKEN_BUCKET);
}

#[test]
#[serial(cluster)]
fn a_waited_slot_given_up_at_once_moves_its_waiters_to_the_new_primary() {
    reshard_under_waiters(Move::ByHandAtOnce, &TOKEN_BUCKET);
}

#[test]
#[serial(cluster)]
fn resharding_under_rl_all_waiters_allows_none_on_the_old_primary_and_writes_neither_tier_there() {
    reshard_under_waiters(Move::Reshard, &TWO_TIERS);
}

#[test]
#[serial(cluster)]
fn resharding_under_rl_acquire_waiters_gives_no_lease_beyond_the_limit() {
    reshard_under_waiters(Move::Reshard, &LEASES);
}

#[test]
#[serial(cluster)]
fn an_rl_all_waiter_whose_keys_are_half_moved_is_told_to_try_again_and_allowed_nowhere() {
    reshard_under_waiters(Move::ByHandKeyByKey, &TWO_TIERS);
}

/// `RL.POLICY DIGEST` of a node.
fn policy_digest(con: &mut redis::Connection) -> String {
    text(&run(con, &["RL.POLICY", "DIGEST"]).unwrap())
}

/// Named policies in a cluster (issue 32): a policy lives on each node, not
/// in a slot, so it is defined on every primary; each primary's replica
/// follows it, so every node agrees on the digest. A check by name runs on
/// the primary of its keys (the command names its keys, not the policy, to
/// Cluster routing), a replica answers a peek by name, a node missing the
/// policy says so naming it, and the policy and the key's state survive a
/// failover.
#[test]
#[serial(cluster)]
fn policies_applied_to_every_primary_are_checked_by_name_on_the_primary_of_each_key() {
    let mut cluster = three_primaries_with_a_replica_each();
    let primaries = cluster.primaries();
    for &p in &primaries {
        let mut con = cluster.nodes[p].connect();
        let free = run(
            &mut con,
            &["RL.POLICY", "SET", "plan:free", "TOKENBUCKET", "5", "0.001"],
        );
        assert_eq!(free.unwrap(), Value::Int(1));
        let pro = [
            "RL.POLICY",
            "SET",
            "plan:pro",
            "TOKENBUCKET",
            "20",
            "5",
            "FIXEDWINDOW",
            "100",
            "1h",
        ];
        assert_eq!(run(&mut con, &pro).unwrap(), Value::Int(1));
    }
    let running = cluster.running();
    let digest = policy_digest(&mut cluster.nodes[primaries[0]].connect());
    for &node in &running {
        wait_for(
            "every node, replicas included, to hold the same policies",
            Duration::from_secs(10),
            || policy_digest(&mut cluster.nodes[node].connect()) == digest,
        );
    }

    // Keys spread over every shard, each checked on the primary of its slot.
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..30 {
        let key = format!("user:{i}");
        let owner = cluster.primary_of_key(primaries[0], &key);
        owners.insert(owner);
        let mut con = cluster.nodes[owner].connect();
        for remaining in (0..5).rev() {
            let reply = check(&mut con, &["RL.CHECK", "plan:free", &key]);
            assert_eq!(&reply[..3], &[1, 5, remaining], "{key}");
        }
        assert_eq!(
            check(&mut con, &["RL.CHECK", "plan:free", &key])[0],
            0,
            "{key}"
        );
        // Another primary redirects: Cluster routing reads the key, not the
        // policy's name, from the command.
        let other = *primaries.iter().find(|&&p| p != owner).unwrap();
        let err = run(
            &mut cluster.nodes[other].connect(),
            &["RL.CHECK", "plan:free", &key],
        )
        .unwrap_err();
        assert_eq!(err.code(), Some("MOVED"), "{key} on another primary");
    }
    assert_eq!(owners.len(), 3, "the keys did not reach every shard");

    // Two tiers: the keys share a slot by their hash tag; keys of two slots
    // are refused by the cluster, changing nothing.
    let owner = cluster.primary_of_key(primaries[0], "{acme}");
    let mut con = cluster.nodes[owner].connect();
    let both = run(
        &mut con,
        &["RL.CHECK", "plan:pro", "{acme}:0", "{acme}:1", "COST", "3"],
    );
    let both = both.unwrap();
    let combined: Vec<i64> = items(&both)[..3]
        .iter()
        .map(|v| redis::from_redis_value(v.clone()).unwrap())
        .collect();
    assert_eq!(combined, [1, 20, 17], "the combined answer: {both:?}");
    let err = run(&mut con, &["RL.CHECK", "plan:pro", "{acme}:0", "{other}:1"]).unwrap_err();
    assert_eq!(err.code(), Some("CROSSSLOT"));

    // The replica of a key's primary answers a peek by name from the same
    // state, and refuses a check that would take.
    let key = "user:0";
    let owner = cluster.primary_of_key(primaries[0], key);
    let mut primary_con = cluster.nodes[owner].connect();
    let written: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(&mut primary_con)
        .unwrap();
    assert_eq!(written, 1, "no replica acknowledged");
    let replica = cluster.replicas_of(owner)[0];
    let mut replica_con = cluster.nodes[replica].connect();
    run(&mut replica_con, &["READONLY"]).unwrap();
    let peek = check(&mut replica_con, &["RL.CHECK", "plan:free", key, "PEEK"]);
    assert_eq!(&peek[..3], &[0, 5, 0], "the replica's peek by name");
    let err = run(&mut replica_con, &["RL.CHECK", "plan:free", key]).unwrap_err();
    assert_eq!(err.code(), Some("READONLY"));
    assert_eq!(
        digest_value(&mut replica_con, key),
        digest_value(&mut primary_con, key)
    );

    // A primary that lost a policy answers an error naming it for its own
    // keys, never an allow, and its digest differs from the others'.
    let lost = *primaries.iter().find(|&&p| p != owner).unwrap();
    let mut lost_con = cluster.nodes[lost].connect();
    assert_eq!(
        run(&mut lost_con, &["RL.POLICY", "DEL", "plan:free"]).unwrap(),
        Value::Int(1)
    );
    let key_there = (0..)
        .map(|i| format!("lost:{i}"))
        .find(|k| cluster.primary_of_key(primaries[0], k) == lost)
        .unwrap();
    let err = error_of(&mut lost_con, &["RL.CHECK", "plan:free", &key_there]);
    assert!(err.contains("plan:free"), "{err}");
    assert!(!exists(&mut lost_con, &key_there));
    assert_ne!(policy_digest(&mut lost_con), digest);
    assert_eq!(policy_digest(&mut primary_con), digest);

    // A failover: the promoted replica holds the policies (it followed its
    // primary) and the drained key, and goes on checking by name.
    let promoted = cluster.replicas_of(owner)[0];
    let mut promoted_con = cluster.nodes[promoted].connect();
    run(&mut promoted_con, &["CLUSTER", "FAILOVER"]).unwrap();
    wait_for(
        "the replica to be promoted",
        Duration::from_secs(30),
        || cluster.role(promoted) == "master",
    );
    cluster.wait_healthy(Duration::from_secs(30));
    let mut promoted_con = cluster.nodes[promoted].connect();
    assert_eq!(policy_digest(&mut promoted_con), digest);
    let after = check(&mut promoted_con, &["RL.CHECK", "plan:free", key]);
    assert_eq!(
        &after[..3],
        &[0, 5, 0],
        "the key refilled, or the policy was lost, on failover"
    );
}
