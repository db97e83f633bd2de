//! The replays a primary writes, byte for byte (issue 29): what reaches its
//! AOF (and replicas) is `RL.APPLY key <header><word after the key> <other
//! words>`, the header as `src/replay.rs` documents it: the command's code,
//! the primary's clock (8 bytes, little-endian), its expiry slack (4
//! bytes, little-endian), and for `RL.ACQUIRE` the length of the lease id
//! the server drew, then the id. Old AOF files hold these bytes, so the
//! way a replay is put together may change, never what it holds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::time::Duration;

use common::{acquire, check, server_time_ms, wait_for, Server};

/// The commands of a RESP file (an AOF), each its words.
fn commands_of(resp: &[u8]) -> Vec<Vec<Vec<u8>>> {
    let mut commands = Vec::new();
    let mut at = 0;
    let line = |at: &mut usize| -> Vec<u8> {
        let end = resp[*at..].windows(2).position(|w| w == b"\r\n").unwrap() + *at;
        let text = resp[*at..end].to_vec();
        *at = end + 2;
        text
    };
    while at < resp.len() {
        let head = line(&mut at);
        assert_eq!(head[0], b'*', "a command starts with its count");
        let n: usize = std::str::from_utf8(&head[1..]).unwrap().parse().unwrap();
        let mut words = Vec::new();
        for _ in 0..n {
            let len = line(&mut at);
            assert_eq!(len[0], b'$');
            let len: usize = std::str::from_utf8(&len[1..]).unwrap().parse().unwrap();
            words.push(resp[at..at + len].to_vec());
            at += len + 2;
        }
        commands.push(words);
    }
    commands
}

/// The replays of `key` in the server's AOF so far.
fn replays_of(server: &Server, key: &str) -> Vec<Vec<Vec<u8>>> {
    let dir = server.dir.join("appendonlydir");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            let commands = commands_of(&std::fs::read(&path).unwrap());
            found.extend(
                commands
                    .into_iter()
                    .filter(|c| c[0].eq_ignore_ascii_case(b"RL.APPLY") && c[1] == key.as_bytes()),
            );
        }
    }
    found
}

/// Checks a replay's glued word: `code`, a clock within `[from, to]`, the
/// slack `slack_ms`, then `rest`; returns the clock.
fn assert_glued(glued: &[u8], code: u8, from: i64, to: i64, slack_ms: u32, rest: &[u8]) -> i64 {
    assert_eq!(glued[0], code, "the command's code first: {glued:?}");
    let now = i64::from_le_bytes(glued[1..9].try_into().unwrap());
    assert!(
        (from..=to).contains(&now),
        "the primary's clock: {now} in {from}..={to}"
    );
    let slack = u32::from_le_bytes(glued[9..13].try_into().unwrap());
    assert_eq!(slack, slack_ms, "the primary's expiry slack");
    assert_eq!(&glued[13..], rest, "then the rest: {glued:?}");
    now
}

#[test]
fn a_replay_holds_the_header_then_the_commands_words_as_documented() {
    let server = Server::start(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--ratelimit.expiry-slack",
        "7",
    ]);
    let mut con = server.connect();
    let from = server_time_ms(&mut con) - 1;
    // Twice each: the second replay of a millisecond may reuse the glued
    // word the first made, and must hold the same bytes.
    for _ in 0..2 {
        check(&mut con, &["RL.TOKENBUCKET", "tb", "100", "0.01"]);
        check(&mut con, &["RL.GCRA", "gcra", "99", "1", "1h"]);
        check(&mut con, &["CL.THROTTLE", "cl", "99", "1", "3600"]);
        check(
            &mut con,
            &["RL.FIXEDWINDOW", "fw", "100", "1h", "COST", "2"],
        );
    }
    let (_, drawn) = acquire(&mut con, &["lease", "2", "30s"]);
    let drawn = drawn.expect("a drawn id");
    let (_, given) = acquire(&mut con, &["lease", "2", "30s", "ID", "worker-7"]);
    assert_eq!(given.as_deref(), Some("worker-7"));
    let to = server_time_ms(&mut con) + 1;
    wait_for(
        "the AOF to hold every replay",
        Duration::from_secs(5),
        || replays_of(&server, "lease").len() == 2,
    );

    // The check commands: their code (the token bucket's registry tag 1,
    // GCRA's and CL.THROTTLE's), the header, then the word after the key;
    // the other words as sent.
    for (key, code, words) in [
        ("tb", None, &["100", "0.01"][..]),
        ("gcra", None, &["99", "1", "1h"][..]),
        ("cl", Some(0x40), &["99", "1", "3600"][..]),
        ("fw", None, &["100", "1h", "COST", "2"][..]),
    ] {
        let replays = replays_of(&server, key);
        assert_eq!(replays.len(), 2, "{key}: one replay a check");
        let mut codes = Vec::new();
        for replay in &replays {
            assert_eq!(
                replay.len(),
                2 + words.len(),
                "{key}: as many words as the command"
            );
            let glued = &replay[2];
            codes.push(glued[0]);
            assert_glued(
                glued,
                code.unwrap_or(glued[0]),
                from,
                to,
                7,
                words[0].as_bytes(),
            );
            for (sent, replayed) in words[1..].iter().zip(&replay[3..]) {
                assert_eq!(sent.as_bytes(), &replayed[..], "{key}");
            }
        }
        assert_eq!(codes[0], codes[1], "{key}: one code");
        if key == "tb" {
            assert_eq!(codes[0], 1, "the token bucket's registry tag");
        }
    }

    // RL.ACQUIRE: after the fixed fields, the drawn id's length and the id
    // (length 0 when the caller gave one), then the word after the key.
    let replays = replays_of(&server, "lease");
    let mut rest = vec![drawn.len() as u8];
    rest.extend_from_slice(drawn.as_bytes());
    rest.extend_from_slice(b"2");
    assert_glued(&replays[0][2], 0x41, from, to, 7, &rest);
    assert_eq!(&replays[0][3..], &[b"30s".to_vec()]);
    assert_glued(&replays[1][2], 0x41, from, to, 7, b"\x002");
    assert_eq!(
        &replays[1][3..],
        &[b"30s".to_vec(), b"ID".to_vec(), b"worker-7".to_vec()]
    );
}
