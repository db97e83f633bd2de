//! A small HTTP service whose endpoints are rate limited by the module: the
//! way an application uses it, from an ordinary Redis client.
//!
//! - `GET /api/hello`: one token bucket per client (`RL.TOKENBUCKET`), by
//!   default 10 requests at once, then 1 a second.
//! - `GET /api/report`: an expensive endpoint with two tiers per client, both
//!   of which must allow: a burst tier (`RL.TOKENBUCKET`, 3 at once, 3 a
//!   second) and a minute tier (`RL.SLIDINGCOUNTER`, 6 a minute).
//!
//! A client is its `X-Api-Key` header when it sends one, else its IP address.
//! Every limited response carries `X-RateLimit-Limit`, `X-RateLimit-Remaining`
//! and `X-RateLimit-Reset` (seconds until the client's limit is fully back,
//! rounded up); a denied one is `429 Too Many Requests` with `Retry-After`
//! (seconds until the same request would pass, rounded up). If Redis cannot
//! be reached the service answers 503: it fails closed.
//!
//! Usage (flags override the environment):
//!
//! ```text
//! cargo run --example http_service -- [--listen ADDR] [--redis URL]
//!     [--hello-capacity N] [--hello-rate R]
//! ```
//!
//! `--listen` (env `LISTEN_ADDR`, default `127.0.0.1:8080`; port 0 picks a
//! free one), `--redis` (env `REDIS_URL`, default `redis://127.0.0.1:6379/`).
//! The first line printed is `listening on http://ADDR`.

use std::error::Error;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};
use tiny_http::{Header, Request, Response, Server};

/// Worker threads, each with its own Redis connection.
const WORKERS: usize = 4;

/// How long a request waits for Redis before the service gives up on it
/// (503): a rate limiter must not hang the requests it guards.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

pub type BoxError = Box<dyn Error + Send + Sync>;

// The `pub` items are what `tests/http_example.rs`, which includes this
// file, uses to run the service inside the test's own process.

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub listen: String,
    pub redis_url: String,
    pub hello_capacity: u64,
    pub hello_rate: f64,
}

impl Config {
    /// The configuration from command-line arguments (without the program
    /// name) over environment variables (`env` looks one up) over defaults.
    pub fn from_args(
        args: impl IntoIterator<Item = String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, BoxError> {
        let or = |name: &str, default: &str| env(name).unwrap_or_else(|| default.into());
        let mut config = Config {
            listen: or("LISTEN_ADDR", "127.0.0.1:8080"),
            redis_url: or("REDIS_URL", "redis://127.0.0.1:6379/"),
            hello_capacity: 10,
            hello_rate: 1.0,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--listen" => config.listen = value()?,
                "--redis" => config.redis_url = value()?,
                "--hello-capacity" => config.hello_capacity = value()?.parse()?,
                "--hello-rate" => config.hello_rate = value()?.parse()?,
                _ => return Err(format!("unknown argument {arg}; see the doc comment").into()),
            }
        }
        Ok(config)
    }
}

/// The first five integers of every check command's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decision {
    allowed: bool,
    limit: i64,
    remaining: i64,
    /// 0 when allowed; -1 when the request can never be allowed.
    retry_after_ms: i64,
    reset_after_ms: i64,
}

impl Decision {
    /// Reads the first five elements of a reply (commands may append more).
    fn from_reply(reply: &[Value]) -> Result<Decision, BoxError> {
        let int = |i: usize| match reply.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(format!("reply element {i} is not an integer: {other:?}")),
        };
        Ok(Decision {
            allowed: int(0)? == 1,
            limit: int(1)?,
            remaining: int(2)?,
            retry_after_ms: int(3)?,
            reset_after_ms: int(4)?,
        })
    }
}

/// Milliseconds to whole seconds, rounded up: a client that waits that long
/// is never early.
fn ceil_seconds(ms: i64) -> i64 {
    (ms.max(0) + 999) / 1000
}

/// One tier of a limit: a key and the command words that follow it, e.g.
/// `["TOKENBUCKET", "3", "3"]`.
struct Tier {
    key: String,
    spec: Vec<String>,
}

impl Tier {
    fn new(key: String, spec: &[&str]) -> Tier {
        let spec = spec.iter().map(|s| s.to_string()).collect();
        Tier { key, spec }
    }

    /// The single-key command: `RL.<ALGORITHM> key <params>`, then `extra`.
    fn command(&self, extra: &[&str]) -> redis::Cmd {
        let mut cmd = redis::cmd(&format!("RL.{}", self.spec[0]));
        cmd.arg(&self.key).arg(&self.spec[1..]).arg(extra);
        cmd
    }
}

/// Checks one tier with one command.
fn check(con: &mut Connection, tier: &Tier) -> Result<Decision, BoxError> {
    let reply: Vec<Value> = tier.command(&[]).query(con)?;
    Decision::from_reply(&reply)
}

/// Checks several tiers atomically, all or nothing, with one `RL.ALL`
/// command (`RL.ALL numkeys key [key ...] <ALGORITHM params> ...`): a request
/// one tier denies takes nothing from the others, and the reply's first five
/// integers already combine the tiers (the tightest remaining, the longest
/// wait).
fn check_tiers(con: &mut Connection, tiers: &[Tier]) -> Result<Decision, BoxError> {
    let mut cmd = redis::cmd("RL.ALL");
    cmd.arg(tiers.len());
    for tier in tiers {
        cmd.arg(&tier.key);
    }
    for tier in tiers {
        cmd.arg(&tier.spec);
    }
    let reply: Vec<Value> = cmd.query(con)?;
    Decision::from_reply(&reply)
}

/// Who is asking: the API key when one is sent, else the IP address. Keys
/// of one client share a hash tag (`{...}`), so a cluster keeps them in one
/// slot, as multi-key commands need.
fn client_of(request: &Request) -> String {
    let api_key = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("X-Api-Key"))
        .map(|h| h.value.as_str().trim().to_string())
        .filter(|k| !k.is_empty());
    match (api_key, request.remote_addr()) {
        (Some(key), _) => format!("key:{key}"),
        (None, Some(addr)) => format!("ip:{}", addr.ip()),
        (None, None) => "ip:unknown".into(),
    }
}

/// Adds a header whose value is a number (always valid ASCII).
fn add_header(response: &mut Response<std::io::Cursor<Vec<u8>>>, name: &str, value: i64) {
    if let Ok(header) = Header::from_bytes(name.as_bytes(), value.to_string().as_bytes()) {
        response.add_header(header);
    }
}

/// The response for a decision: `ok_body` with 200 when allowed, 429 with
/// `Retry-After` when not, and the rate-limit headers either way.
fn limited_response(decision: &Decision, ok_body: String) -> Response<std::io::Cursor<Vec<u8>>> {
    let mut response = if decision.allowed {
        Response::from_string(ok_body)
    } else if decision.retry_after_ms < 0 {
        Response::from_string("Too many requests: this request can never be allowed.\n")
            .with_status_code(429)
    } else {
        let seconds = ceil_seconds(decision.retry_after_ms);
        let mut response =
            Response::from_string(format!("Too many requests: retry in {seconds} s.\n"))
                .with_status_code(429);
        add_header(&mut response, "Retry-After", seconds);
        response
    };
    for (name, value) in [
        ("X-RateLimit-Limit", decision.limit),
        ("X-RateLimit-Remaining", decision.remaining),
        ("X-RateLimit-Reset", ceil_seconds(decision.reset_after_ms)),
    ] {
        add_header(&mut response, name, value);
    }
    response
}

/// Answers one request, connecting to Redis first if needed. A Redis error
/// drops the connection (the next request reconnects) and answers 503.
fn handle(config: &Config, con: &mut Option<Connection>, request: Request) -> std::io::Result<()> {
    let client = client_of(&request);
    let path = request.url().split('?').next().unwrap_or("").to_string();
    let is_get = *request.method() == tiny_http::Method::Get;
    let decided = match (is_get, path.as_str()) {
        (true, "/api/hello") => {
            let tier = Tier::new(
                format!("rl:{{{client}}}:hello"),
                &[
                    "TOKENBUCKET",
                    &config.hello_capacity.to_string(),
                    &config.hello_rate.to_string(),
                ],
            );
            with_connection(config, con, |con| check(con, &tier))
                .map(|d| (d, format!("Hello, {client}!\n")))
        }
        (true, "/api/report") => {
            let tiers = [
                Tier::new(
                    format!("rl:{{{client}}}:report:s"),
                    &["TOKENBUCKET", "3", "3"],
                ),
                Tier::new(
                    format!("rl:{{{client}}}:report:m"),
                    &["SLIDINGCOUNTER", "6", "1m"],
                ),
            ];
            with_connection(config, con, |con| check_tiers(con, &tiers))
                .map(|d| (d, format!("Report for {client}: all good.\n")))
        }
        _ => return request.respond(Response::from_string("Not found.\n").with_status_code(404)),
    };
    match decided {
        Ok((decision, body)) => request.respond(limited_response(&decision, body)),
        Err(error) => {
            *con = None;
            eprintln!("rate limiter unavailable: {error}");
            request
                .respond(Response::from_string("Rate limiter unavailable.\n").with_status_code(503))
        }
    }
}

/// Runs `f` on the worker's connection, connecting first when there is none.
fn with_connection<T>(
    config: &Config,
    con: &mut Option<Connection>,
    f: impl FnOnce(&mut Connection) -> Result<T, BoxError>,
) -> Result<T, BoxError> {
    if con.is_none() {
        let client = redis::Client::open(config.redis_url.as_str())?;
        let new = client.get_connection_with_timeout(REDIS_TIMEOUT)?;
        new.set_read_timeout(Some(REDIS_TIMEOUT))?;
        new.set_write_timeout(Some(REDIS_TIMEOUT))?;
        *con = Some(new);
    }
    match con.as_mut() {
        Some(con) => f(con),
        None => Err("no connection".into()),
    }
}

/// The service, running: its address, and its workers, which stop when
/// told to.
pub struct Running {
    pub addr: SocketAddr,
    server: Arc<Server>,
    stopping: Arc<AtomicBool>,
    workers: Vec<thread::JoinHandle<()>>,
}

/// Binds `config.listen` and starts the workers, each with its own Redis
/// connection (made on the first request, so the service starts even while
/// Redis is down).
pub fn start(config: Config) -> Result<Running, BoxError> {
    let server = Arc::new(Server::http(config.listen.as_str())?);
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or("the service listens on an IP address")?;
    let stopping = Arc::new(AtomicBool::new(false));
    let workers = (0..WORKERS)
        .map(|_| {
            let (server, config) = (Arc::clone(&server), config.clone());
            let stopping = Arc::clone(&stopping);
            thread::spawn(move || {
                let mut con = None;
                loop {
                    match server.recv() {
                        Ok(request) => {
                            if let Err(error) = handle(&config, &mut con, request) {
                                eprintln!("cannot answer: {error}");
                            }
                        }
                        Err(_) if stopping.load(Ordering::SeqCst) => return,
                        Err(error) => eprintln!("cannot accept: {error}"),
                    }
                }
            })
        })
        .collect();
    Ok(Running {
        addr,
        server,
        stopping,
        workers,
    })
}

impl Running {
    /// Waits for the workers (that is, forever, unless stopped).
    fn wait(self) {
        for worker in self.workers {
            let _ = worker.join();
        }
    }

    /// Stops the workers once their current request is answered.
    pub fn stop(self) {
        self.stopping.store(true, Ordering::SeqCst);
        for _ in 0..self.workers.len() {
            self.server.unblock();
        }
        self.wait();
    }
}

fn main() -> Result<(), BoxError> {
    let config = Config::from_args(std::env::args().skip(1), |name| std::env::var(name).ok())?;
    let running = start(config)?;
    println!("listening on http://{}", running.addr);
    std::io::stdout().flush()?;
    running.wait();
    Ok(())
}
