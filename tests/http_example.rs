//! End to end: the example HTTP service (`examples/http_service.rs`) in front
//! of a real redis-server with the module, spoken to over real HTTP/1.1.
//!
//! The service runs inside this test process, from the example's own code
//! (included below), on a free loopback port: `cargo test --all-targets`
//! builds examples only as test harnesses, so there is no example binary to
//! start, and this way the test needs no build step of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[allow(dead_code)]
#[path = "../examples/http_service.rs"]
mod http_service;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread::sleep;
use std::time::Duration;

use common::Server;
use http_service::Config;

/// The example service, stopped on drop.
struct Service {
    running: Option<http_service::Running>,
    addr: String,
}

impl Service {
    /// Starts the service on a free port, against `redis_url`, with the
    /// example's own command-line arguments.
    fn start(redis_url: &str, extra: &[&str]) -> Service {
        let base = ["--listen", "127.0.0.1:0", "--redis", redis_url];
        let args = base.iter().chain(extra).map(|s| s.to_string());
        let config = Config::from_args(args, |_| None).unwrap();
        let running = http_service::start(config).unwrap();
        Service {
            addr: running.addr.to_string(),
            running: Some(running),
        }
    }

    fn get(&self, path: &str, api_key: Option<&str>) -> Reply {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let key_header = api_key.map_or(String::new(), |k| format!("X-Api-Key: {k}\r\n"));
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{key_header}Connection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        Reply::parse(&raw)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop();
        }
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    /// Header names in lower case.
    headers: HashMap<String, String>,
    body: String,
}

impl Reply {
    fn parse(raw: &str) -> Reply {
        let (head, body) = raw.split_once("\r\n\r\n").expect("no end of headers");
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .expect("no status line");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Reply {
            status,
            headers,
            body: body.to_string(),
        }
    }

    /// A header's value as a number (panics when absent).
    fn number(&self, name: &str) -> i64 {
        let value = self
            .headers
            .get(&name.to_ascii_lowercase())
            .unwrap_or_else(|| panic!("no {name} header in {self:?}"));
        value.parse().unwrap()
    }

    fn has(&self, name: &str) -> bool {
        self.headers.contains_key(&name.to_ascii_lowercase())
    }
}

fn redis_url(server: &Server) -> String {
    format!("redis://127.0.0.1:{}/", server.port)
}

/// `/api/hello` with 3 at once, refilling 1 a second: one token back per
/// second, so a retry after `Retry-After` is short.
fn hello_service(server: &Server) -> Service {
    Service::start(
        &redis_url(server),
        &["--hello-capacity", "3", "--hello-rate", "1"],
    )
}

#[test]
fn hello_counts_down_then_answers_429_with_retry_after_and_passes_again_after_waiting_it() {
    let server = Server::start(&[]);
    let service = hello_service(&server);
    for (remaining, reset) in [(2, 1), (1, 2), (0, 3)] {
        let reply = service.get("/api/hello", Some("alice"));
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.body, "Hello, key:alice!\n");
        assert_eq!(reply.number("X-RateLimit-Limit"), 3);
        assert_eq!(reply.number("X-RateLimit-Remaining"), remaining);
        // Seconds until the bucket is full again, rounded up: a token a second.
        assert_eq!(reply.number("X-RateLimit-Reset"), reset, "{reply:?}");
        assert!(!reply.has("Retry-After"));
    }
    let denied = service.get("/api/hello", Some("alice"));
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(denied.number("X-RateLimit-Limit"), 3);
    assert_eq!(denied.number("X-RateLimit-Remaining"), 0);
    let retry_after = denied.number("Retry-After");
    assert_eq!(
        retry_after, 1,
        "under a second to the next token, rounded up"
    );
    assert!(denied.number("X-RateLimit-Reset") >= retry_after);

    sleep(Duration::from_secs(retry_after as u64));
    let again = service.get("/api/hello", Some("alice"));
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.number("X-RateLimit-Remaining"), 0);
}

#[test]
fn each_api_key_and_each_ip_without_one_has_its_own_limit() {
    let server = Server::start(&[]);
    let service = hello_service(&server);
    for _ in 0..3 {
        assert_eq!(service.get("/api/hello", Some("alice")).status, 200);
    }
    assert_eq!(service.get("/api/hello", Some("alice")).status, 429);
    let bob = service.get("/api/hello", Some("bob"));
    assert_eq!((bob.status, bob.number("X-RateLimit-Remaining")), (200, 2));
    let by_ip = service.get("/api/hello", None);
    assert_eq!(by_ip.status, 200);
    assert_eq!(by_ip.body, "Hello, ip:127.0.0.1!\n");
    assert_eq!(by_ip.number("X-RateLimit-Remaining"), 2);
}

/// The two-tier endpoint, checked with one `RL.ALL`.
#[test]
fn the_report_is_denied_by_its_burst_tier_then_by_its_minute_tier() {
    let server = Server::start(&[]);
    let service = Service::start(&redis_url(&server), &[]);
    let get = || service.get("/api/report", Some("carol"));
    // Burst tier: 3 at once, 3 a second; minute tier: 6 a minute. The burst
    // tier is the tighter one at first.
    for remaining in [2, 1, 0] {
        let reply = get();
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.number("X-RateLimit-Limit"), 3);
        assert_eq!(reply.number("X-RateLimit-Remaining"), remaining);
    }
    let denied = get();
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(denied.number("Retry-After"), 1);

    // A second later the burst tier is full again, and the denial above
    // took nothing from the minute tier: 3 more pass, which leaves the
    // minute tier (3 of 6 left before them) the tighter one.
    sleep(Duration::from_secs(1));
    for remaining in [2, 1, 0] {
        let reply = get();
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.number("X-RateLimit-Remaining"), remaining);
    }
    sleep(Duration::from_secs(1));
    let denied = get();
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(denied.number("X-RateLimit-Limit"), 6, "{denied:?}");
    assert_eq!(denied.number("X-RateLimit-Remaining"), 0);
    let retry_after = denied.number("Retry-After");
    assert!((2..=120).contains(&retry_after), "{denied:?}");
}

#[test]
fn other_paths_are_not_found_and_carry_no_rate_limit_headers() {
    let server = Server::start(&[]);
    let service = hello_service(&server);
    let reply = service.get("/nowhere", Some("alice"));
    assert_eq!(reply.status, 404);
    assert!(!reply.has("X-RateLimit-Limit"));
}

#[test]
fn without_redis_the_service_answers_503() {
    // A port nothing listens on: a server started and stopped.
    let mut server = Server::start(&[]);
    let url = redis_url(&server);
    server.kill();
    let service = Service::start(&url, &[]);
    let reply = service.get("/api/hello", None);
    assert_eq!(reply.status, 503, "{reply:?}");
}

#[test]
fn flags_override_the_environment_which_overrides_the_defaults() {
    let env = |name: &str| (name == "REDIS_URL").then(|| "redis://10.0.0.1:7000/".to_string());
    let args = |words: &[&str]| words.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let config = Config::from_args(args(&[]), env).unwrap();
    assert_eq!(config.listen, "127.0.0.1:8080");
    assert_eq!(config.redis_url, "redis://10.0.0.1:7000/");
    assert_eq!(config.hello_capacity, 10);
    let config = Config::from_args(
        args(&["--redis", "redis://h:1/", "--hello-rate", "0.5"]),
        env,
    )
    .unwrap();
    assert_eq!(config.redis_url, "redis://h:1/");
    assert_eq!(config.hello_rate, 0.5);
    assert!(Config::from_args(args(&["--hello-capacity"]), env).is_err());
    assert!(Config::from_args(args(&["--what"]), env).is_err());
}
