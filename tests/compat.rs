//! What a client relies on that servers could answer differently
//! (docs/install.md, "What differs between the servers"), held on whichever
//! server `RL_SERVER` names: `make test-compat` runs it on each one. Read with
//! a small RESP3 reader of its own, since the point is the wire format.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

/// A reply as it came: its type byte and its parts.
#[derive(Debug, PartialEq)]
enum Reply {
    Int(i64),
    Text(char, String),
    /// `*` array, `%` map (pairs flattened), `~` set, `>` push.
    Many(char, Vec<Reply>),
}

struct Resp3 {
    reader: BufReader<TcpStream>,
}

impl Resp3 {
    fn connect(port: u16) -> Resp3 {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut con = Resp3 {
            reader: BufReader::new(stream),
        };
        match con.call(&["HELLO", "3"]) {
            Reply::Many('%', _) => con,
            other => panic!("HELLO 3 answered {other:?}"),
        }
    }

    fn send(&mut self, words: &[&str]) {
        let mut out = format!("*{}\r\n", words.len());
        for w in words {
            out.push_str(&format!("${}\r\n{w}\r\n", w.len()));
        }
        self.reader.get_mut().write_all(out.as_bytes()).unwrap();
    }

    fn call(&mut self, words: &[&str]) -> Reply {
        self.send(words);
        self.read()
    }

    fn read(&mut self) -> Reply {
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let line = line.strip_suffix("\r\n").expect("a whole line");
        let (kind, rest) = line.split_at(1);
        let kind = kind.chars().next().unwrap();
        match kind {
            ':' => Reply::Int(rest.parse().unwrap()),
            '$' | '=' | '!' => {
                let len: usize = rest.parse().unwrap();
                let mut buf = vec![0; len + 2];
                std::io::Read::read_exact(&mut self.reader, &mut buf).unwrap();
                Reply::Text(kind, String::from_utf8_lossy(&buf[..len]).into_owned())
            }
            '*' | '~' | '>' => {
                let n: usize = rest.parse().unwrap();
                Reply::Many(kind, (0..n).map(|_| self.read()).collect())
            }
            '%' => {
                let n: usize = rest.parse().unwrap();
                Reply::Many(kind, (0..2 * n).map(|_| self.read()).collect())
            }
            _ => Reply::Text(kind, rest.to_string()),
        }
    }
}

#[test]
fn resp3_replies_are_an_array_of_integers_and_a_map_on_every_server() {
    let server = Server::start(&[]);
    let mut con = Resp3::connect(server.port);
    for spec in limit_5() {
        let cmd = spec.command.as_str();
        let reply = con.call(&command_words(cmd, "k", &spec.params(), &[]));
        match &reply {
            Reply::Many('*', items) => {
                // Five, and the leaky bucket's sixth (its queue).
                assert!((5..=6).contains(&items.len()), "{cmd}: {reply:?}");
                assert!(
                    items.iter().all(|i| matches!(i, Reply::Int(_))),
                    "{cmd}: {reply:?}"
                );
            }
            other => panic!("{cmd}: {other:?}"),
        }
        con.call(&["DEL", "k"]);
    }
    con.call(&["RL.TOKENBUCKET", "k", "10", "1"]);
    let info = con.call(&["RL.INFO", "k"]);
    let Reply::Many('%', fields) = &info else {
        panic!("RL.INFO under RESP3: {info:?}")
    };
    // `tokens` is a double: its text differs between servers (17 digits on
    // Redis 7.0, the shortest form on 7.2+), its value does not.
    let tokens = fields
        .chunks(2)
        .find(|kv| kv[0] == Reply::Text('$', "tokens".into()))
        .map(|kv| &kv[1])
        .expect("a tokens field");
    match tokens {
        Reply::Text(',', text) => {
            let value: f64 = text.parse().unwrap();
            assert!((8.9..=10.0).contains(&value), "{text}");
        }
        other => panic!("tokens: {other:?}"),
    }
}

#[test]
fn a_check_invalidates_a_key_a_tracking_client_read() {
    let server = Server::start(&[]);
    let mut writer = server.connect();
    check(&mut writer, &["RL.TOKENBUCKET", "tracked", "10", "1"]);
    let mut reader = Resp3::connect(server.port);
    assert_eq!(
        reader.call(&["CLIENT", "TRACKING", "ON"]),
        Reply::Text('+', "OK".into())
    );
    assert!(matches!(
        reader.call(&["RL.INFO", "tracked"]),
        Reply::Many('%', _)
    ));
    check(&mut writer, &["RL.TOKENBUCKET", "tracked", "10", "1"]);
    let push = reader.read();
    assert_eq!(
        push,
        Reply::Many(
            '>',
            vec![
                Reply::Text('$', "invalidate".into()),
                Reply::Many('*', vec![Reply::Text('$', "tracked".into())]),
            ]
        )
    );
}

#[test]
fn the_module_commands_describe_themselves_alike_on_every_server() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let info = run(&mut con, &["COMMAND", "INFO", "rl.tokenbucket"]).unwrap();
    let text = format!("{info:?}");
    for flag in ["write", "module", "fast"] {
        assert!(text.contains(flag), "{flag}: {text}");
    }
    // COMMAND DOCS: the summary and the arguments, whatever extra fields a
    // newer server adds (display_text on 7.2+).
    let docs = run(&mut con, &["COMMAND", "DOCS", "rl.tokenbucket"]).unwrap();
    let text = format!("{docs:?}");
    for part in [
        "summary",
        "Token bucket",
        "arguments",
        "capacity",
        "rate",
        "BLOCK",
    ] {
        assert!(text.contains(part), "{part}: {text}");
    }
}
