//! The module as a Redis citizen: INFO ratelimit, its setting, keyspace
//! events on denial.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{check, info_field, run, Server, ALGORITHMS};
use redis::Connection;

fn info_count(con: &mut Connection, field: &str) -> u64 {
    info_field(con, "ratelimit", &format!("ratelimit_{field}"))
        .parse()
        .unwrap_or_else(|_| panic!("no {field} in INFO ratelimit"))
}

#[test]
fn info_ratelimit_counts_allowed_and_denied_requests_per_command_but_not_peeks() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for _ in 0..5 {
        check(&mut con, &["RL.TOKENBUCKET", "tb", "3", "0.001"]);
    }
    check(&mut con, &["RL.TOKENBUCKET", "tb", "3", "0.001", "PEEK"]);
    check(&mut con, &["CL.THROTTLE", "cell", "0", "1", "60"]);
    check(&mut con, &["CL.THROTTLE", "cell", "0", "1", "60"]);
    check(&mut con, &["CL.THROTTLE", "cell", "0", "1", "60", "0"]);
    run(&mut con, &["RL.ALL", "1", "a", "FIXEDWINDOW", "1", "1h"]).unwrap();
    run(&mut con, &["RL.ALL", "1", "a", "FIXEDWINDOW", "1", "1h"]).unwrap();
    run(&mut con, &["RL.ACQUIRE", "pool", "1", "1h"]).unwrap();
    let _ = run(&mut con, &["RL.TOKENBUCKET", "tb", "0", "1"]); // an error
    assert_eq!(info_count(&mut con, "tokenbucket_allowed"), 3);
    assert_eq!(info_count(&mut con, "tokenbucket_denied"), 2);
    assert_eq!(info_count(&mut con, "cl_throttle_allowed"), 1);
    assert_eq!(info_count(&mut con, "cl_throttle_denied"), 1);
    assert_eq!(
        info_count(&mut con, "gcra_allowed"),
        0,
        "CL.THROTTLE counts as itself"
    );
    assert_eq!(info_count(&mut con, "all_allowed"), 1);
    assert_eq!(info_count(&mut con, "all_denied"), 1);
    assert_eq!(
        info_count(&mut con, "fixedwindow_allowed"),
        0,
        "tiers count as RL.ALL"
    );
    assert_eq!(info_count(&mut con, "acquire_allowed"), 1);
    assert_eq!(info_count(&mut con, "slidinglog_denied"), 0);
    // Every algorithm of the registry has its three counters; RL.ALL too,
    // the commands that take no SHADOW have no third.
    for name in ALGORITHMS.iter().chain(&["all"]) {
        info_count(&mut con, &format!("{name}_allowed"));
        info_count(&mut con, &format!("{name}_denied"));
        info_count(&mut con, &format!("{name}_shadow_denied"));
    }
    for name in ["cl_throttle", "acquire"] {
        let field = format!("ratelimit_{name}_shadow_denied");
        assert_eq!(info_field(&mut con, "ratelimit", &field), "", "{field}");
    }
}

/// Collects the keyspace events published while `act` runs.
fn events_during(server: &Server, act: impl FnOnce()) -> Vec<(String, String)> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port)).unwrap();
    let mut sub = client.get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:*").unwrap();
    act();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut events = vec![];
    while let Ok(message) = pubsub.get_message() {
        let key = message
            .get_channel_name()
            .trim_start_matches("__keyspace@0__:");
        events.push((key.to_string(), message.get_payload::<String>().unwrap()));
    }
    events
}

fn denied_events(events: &[(String, String)]) -> Vec<&str> {
    events
        .iter()
        .filter(|(_, event)| event == "rl.denied")
        .map(|(key, _)| key.as_str())
        .collect()
}

#[test]
fn with_deny_events_on_each_denied_request_publishes_rl_denied_on_its_key() {
    let server = Server::start(&["--notify-keyspace-events", "Kd"]);
    let mut con = server.connect();
    run(&mut con, &["CONFIG", "SET", "ratelimit.deny-events", "yes"]).unwrap();
    let events = events_during(&server, || {
        check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h"]);
        check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h"]);
        check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h", "PEEK"]);
        run(
            &mut con,
            &[
                "RL.ALL",
                "2",
                "t1",
                "fw",
                "TOKENBUCKET",
                "5",
                "1",
                "FIXEDWINDOW",
                "1",
                "1h",
            ],
        )
        .unwrap();
        run(&mut con, &["RL.ACQUIRE", "pool", "1", "1h"]).unwrap();
        run(&mut con, &["RL.ACQUIRE", "pool", "1", "1h"]).unwrap();
    });
    assert_eq!(
        denied_events(&events),
        ["fw", "fw", "pool"],
        "one event per denied request (not for peeks, nor for RL.ALL tiers that allowed)"
    );
}

#[test]
fn a_shadow_denial_publishes_rl_shadowdenied_not_rl_denied() {
    let server = Server::start(&["--notify-keyspace-events", "Kd"]);
    let mut con = server.connect();
    run(&mut con, &["CONFIG", "SET", "ratelimit.deny-events", "yes"]).unwrap();
    let events = events_during(&server, || {
        for _ in 0..2 {
            check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h", "SHADOW"]);
        }
        run(
            &mut con,
            &[
                "RL.ALL",
                "2",
                "t1",
                "fw",
                "TOKENBUCKET",
                "5",
                "1",
                "FIXEDWINDOW",
                "1",
                "1h",
                "SHADOW",
            ],
        )
        .unwrap();
    });
    let shadow: Vec<&str> = events
        .iter()
        .filter(|(_, event)| event == "rl.shadowdenied")
        .map(|(key, _)| key.as_str())
        .collect();
    assert_eq!(shadow, ["fw", "fw"], "{events:?}");
    assert!(denied_events(&events).is_empty(), "{events:?}");
}

#[test]
fn deny_events_are_off_by_default_and_settable_by_loadmodule_arguments() {
    let off = Server::start(&["--notify-keyspace-events", "Kd"]);
    let mut con = off.connect();
    let value: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("ratelimit.deny-events")
        .query(&mut con)
        .unwrap();
    assert_eq!(value, ["ratelimit.deny-events", "no"]);
    let events = events_during(&off, || {
        check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h"]);
        check(&mut con, &["RL.FIXEDWINDOW", "fw", "1", "1h"]);
    });
    assert!(denied_events(&events).is_empty(), "{events:?}");

    // `Server::start` puts `--loadmodule <path>` last before `extra`, so the
    // words that follow it are the module's arguments.
    let on = Server::start(&["deny-events", "yes", "--notify-keyspace-events", "Kd"]);
    let mut con = on.connect();
    let value: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("ratelimit.deny-events")
        .query(&mut con)
        .unwrap();
    assert_eq!(value, ["ratelimit.deny-events", "yes"]);
}

#[test]
fn an_unknown_module_argument_or_a_bad_value_refuses_to_load_with_a_log_line() {
    for (args, logged) in [
        (&["bogus", "1"][..], "unknown setting 'bogus'"),
        (
            &["deny-events", "maybe"][..],
            "deny-events must be yes or no",
        ),
    ] {
        let dir = std::env::temp_dir().join(format!("rl-badarg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log_path = dir.join("log");
        let mut child = std::process::Command::new(common::server_binary())
            .args(["--port", "0", "--save", "", "--dir", dir.to_str().unwrap()])
            .args(["--unixsocket", dir.join("sock").to_str().unwrap()])
            .args(["--logfile", log_path.to_str().unwrap()])
            .arg("--loadmodule")
            .arg(common::module_path())
            .args(args)
            .spawn()
            .unwrap();
        let mut status = None;
        common::wait_for("the server to give up", Duration::from_secs(10), || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            !status.unwrap().success(),
            "the server started with {args:?}"
        );
        assert!(log.contains(logged), "{args:?}: {log}");
    }
}
