//! The access-control recipe of docs/operations.md, run as it is written there, on real
//! servers: the application's user runs every check and nothing else, and
//! replication needs none of what it is denied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use redis::Connection;
use serial_test::serial;

/// The `ACL SETUSER` lines of docs/operations.md's "Access control" section, each
/// as its words.
fn readme_acl_lines() -> Vec<Vec<String>> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .unwrap();
    let section = readme
        .split("\n## Access control\n")
        .nth(1)
        .expect("docs/operations.md has no \"## Access control\" section");
    let section = section.split("\n## ").next().unwrap();
    let lines: Vec<Vec<String>> = section
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER "))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert!(
        !lines.is_empty(),
        "no ACL SETUSER line in docs/operations.md's access-control section"
    );
    lines
}

/// The recipe's line for the user named `user`.
fn readme_acl_line(user: &str) -> Vec<String> {
    readme_acl_lines()
        .into_iter()
        .find(|words| words.get(2).map(String::as_str) == Some(user))
        .unwrap_or_else(|| panic!("the recipe gives no ACL SETUSER line for {user}"))
}

/// The password a recipe line gives its user (its `>password` rule).
fn password(line: &[String]) -> String {
    line.iter()
        .find_map(|w| w.strip_prefix('>'))
        .expect("the recipe line sets no password")
        .to_string()
}

/// Runs every recipe `ACL SETUSER` line on `con`.
fn apply_recipe(con: &mut Connection) {
    for line in readme_acl_lines() {
        let words: Vec<&str> = line.iter().map(String::as_str).collect();
        run(con, &words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
    }
}

/// A connection authenticated as `user`.
fn connect_as(server: &Server, user: &str, password: &str) -> Connection {
    let mut con = server.connect();
    run(&mut con, &["AUTH", user, password]).unwrap();
    con
}

fn is_noperm(con: &mut Connection, words: &[&str]) -> bool {
    error_of(con, words).starts_with("NOPERM")
}

#[test]
fn the_readme_recipe_names_every_module_command_but_setstate_and_the_replays() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let module_commands: BTreeSet<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("ratelimit")
        .query::<Vec<String>>(&mut con)
        .unwrap()
        .into_iter()
        .map(|c| c.to_lowercase())
        .collect();
    // The policies' changes belong to the worker that owns them.
    let kept_out = [
        "rl.setstate",
        "rl.apply",
        "rl.applyall",
        "rl.applycheck",
        "rl.policy",
    ];
    let expected: BTreeSet<String> = module_commands
        .iter()
        .filter(|c| !kept_out.contains(&c.as_str()))
        .cloned()
        .collect();
    let granted: BTreeSet<String> = readme_acl_line("app")
        .iter()
        .filter_map(|w| w.strip_prefix('+'))
        .map(str::to_lowercase)
        .filter(|c| module_commands.contains(c))
        .collect();
    assert_eq!(
        granted, expected,
        "the recipe's app user must be granted exactly the module's commands but {kept_out:?}"
    );
}

#[test]
#[serial(heavy)]
fn the_app_user_runs_every_check_not_setstate_and_a_replica_linked_as_repl_follows() {
    let app = readme_acl_line("app");
    let repl = readme_acl_line("repl");
    let primary = Server::start(&[]);
    let mut admin = primary.connect();
    apply_recipe(&mut admin);

    // The replica connects with the replication user, as the recipe says.
    let repl_password = password(&repl);
    let replica = Server::start(&["--masteruser", "repl", "--masterauth", &repl_password]);
    let mut r = replica.connect();
    run(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &primary.port.to_string()],
    )
    .unwrap();
    wait_for("the replica link", Duration::from_secs(20), || {
        info_field(&mut r, "replication", "master_link_status") == "up"
    });

    let mut con = connect_as(&primary, "app", &password(&app));
    run(&mut con, &["PING"]).unwrap();
    let mut keys: Vec<String> = vec![];
    // Every algorithm (5 an hour), and redis-cell's command.
    let mut specs = every_algorithm(5, HOUR_MS);
    specs.push(Spec::other("CL.THROTTLE", &["4", "1", "3600"]));
    for spec in &specs {
        let key = match spec.name {
            "" => "rl:cell".to_string(),
            name => format!("rl:{name}"),
        };
        let words = spec.words(&key, &[]);
        for _ in 0..3 {
            check(&mut con, &words);
        }
        let mut peek = words.clone();
        if spec.command != "CL.THROTTLE" {
            peek.push("PEEK");
        }
        check(&mut con, &peek);
        keys.push(key);
    }
    let tiers = [
        "RL.ALL",
        "2",
        "rl:{u}:s",
        "rl:{u}:h",
        "TOKENBUCKET",
        "3",
        "0.01",
        "FIXEDWINDOW",
        "10",
        "1h",
    ];
    for _ in 0..4 {
        run(&mut con, &tiers).unwrap(); // the fourth is denied
    }
    keys.extend(["rl:{u}:s".to_string(), "rl:{u}:h".to_string()]);
    run(
        &mut con,
        &["RL.ACQUIRE", "rl:jobs", "3", "1h", "ID", "job-1"],
    )
    .unwrap();
    run(&mut con, &["RL.ACQUIRE", "rl:jobs", "3", "1h"]).unwrap();
    assert_eq!(
        redis::cmd("RL.RELEASE")
            .arg("rl:jobs")
            .arg("job-1")
            .query::<i64>(&mut con)
            .unwrap(),
        1
    );
    keys.push("rl:jobs".to_string());
    assert_ne!(
        run(&mut con, &["RL.INFO", "rl:tokenbucket"]).unwrap(),
        redis::Value::Nil
    );
    match run(&mut con, &["RL.TOP"]).unwrap() {
        redis::Value::Array(listed) => assert!(!listed.is_empty(), "no denial listed"),
        other => panic!("RL.TOP replied {other:?}"),
    }

    // A check by a policy's name, which the worker's user (here the admin)
    // defined.
    run(
        &mut admin,
        &["RL.POLICY", "SET", "plan", "TOKENBUCKET", "5", "1"],
    )
    .unwrap();
    assert_eq!(check(&mut con, &["RL.CHECK", "plan", "rl:plan"])[0], 1);

    // Denied: the state setter, the replays, and whatever else would reset
    // a limit.
    let state = dump(&mut admin, "rl:tokenbucket").unwrap();
    let before = digest_value(&mut admin, "rl:tokenbucket");
    for words in [
        &["RL.SETSTATE", "rl:tokenbucket", "state"][..],
        &["RL.SETSTATE", "rl:new", "state", "KEEPTTL"],
        &["RL.APPLY", "rl:tokenbucket", "header", "5", "1"],
        &[
            "RL.APPLYALL",
            "header1",
            "rl:tokenbucket",
            "TOKENBUCKET",
            "5",
            "1",
        ],
        &["DEL", "rl:tokenbucket"],
        &["UNLINK", "rl:tokenbucket"],
        &["EXPIRE", "rl:tokenbucket", "0"],
        &["SET", "rl:tokenbucket", "x"],
        &["FLUSHALL"],
        &["CONFIG", "SET", "ratelimit.max-keys", "5"],
        &["RL.POLICY", "SET", "plan", "TOKENBUCKET", "1000", "1000"],
        &["RL.POLICY", "DEL", "plan"],
        &["RL.APPLYCHECK", "header", "rl:tokenbucket"],
    ] {
        assert!(
            is_noperm(&mut con, words),
            "{words:?} was not refused with NOPERM"
        );
    }
    let restore = redis::cmd("RESTORE")
        .arg("rl:tokenbucket")
        .arg(0)
        .arg(&state)
        .arg("REPLACE")
        .query::<String>(&mut con)
        .expect_err("RESTORE was allowed");
    assert_eq!(restore.code(), Some("NOPERM"), "{restore:?}");
    assert_eq!(
        digest_value(&mut admin, "rl:tokenbucket"),
        before,
        "a refused command changed the key"
    );
    assert!(!exists(&mut admin, "rl:new"));

    // The replica, linked as `repl`, holds exactly what the app's checks
    // made.
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(&mut admin)
        .unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
    for key in &keys {
        assert!(exists(&mut admin, key), "{key} is missing on the primary");
        assert_eq!(
            digest_value(&mut admin, key),
            digest_value(&mut r, key),
            "{key} differs on the replica"
        );
    }
    let dp: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut admin).unwrap();
    let dr: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut r).unwrap();
    assert_eq!(dp, dr, "the datasets differ");
}

/// Issue 31: the recipe's user switches to RESP3 with `HELLO 3` (alone, or
/// with `AUTH`) without any `+hello`: Redis runs `HELLO` for any user. What
/// a client may send after it, such as `CLIENT SETNAME`, is another command
/// the recipe does not grant.
#[test]
fn the_app_user_speaks_resp3_through_hello_without_a_rule_for_it() {
    let server = Server::start(&[]);
    let mut admin = server.connect();
    apply_recipe(&mut admin);
    let line = readme_acl_line("app");
    assert!(
        !line.iter().any(|w| w.eq_ignore_ascii_case("+hello")),
        "{line:?}"
    );
    let secret = password(&line);
    let mut con = connect_as(&server, "app", &secret);
    let hello = run(&mut con, &["HELLO", "3"]).unwrap();
    assert_eq!(text(field(&hello, "proto").unwrap()), "3");
    // Under RESP3 now: RL.INFO answers a map.
    check(&mut con, &["RL.TOKENBUCKET", "k", "10", "1"]);
    assert!(matches!(
        run(&mut con, &["RL.INFO", "k"]).unwrap(),
        redis::Value::Map(_)
    ));
    let mut fresh = server.connect();
    let hello = run(&mut fresh, &["HELLO", "3", "AUTH", "app", &secret]).unwrap();
    assert_eq!(text(field(&hello, "proto").unwrap()), "3");
    assert!(is_noperm(&mut fresh, &["CLIENT", "SETNAME", "x"]));
}
