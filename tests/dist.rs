//! The release tarball (`make dist`), as an operator gets it: unpacked into a
//! temporary directory, its checksums checked, the glibc symbol versions its
//! module needs printed and held to the oldest supported distribution, and
//! every server of the compatibility matrix started with it through its
//! redis.conf snippet.
//!
//! Needs the tarball, so ignored by `cargo test`: `make test-dist` builds it
//! and runs these with `RL_DIST=<tarball>` and `RL_DIST_SERVERS=<server
//! binaries, space-separated>` (default: redis-server).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{connect_port, run};
use redis::Value;

/// The newest glibc the module may need: Ubuntu 22.04 LTS's 2.35, the
/// oldest of the supported distributions in late 2026 (Debian 12 has 2.36;
/// Debian 11, 2.31, left LTS in August 2026, Ubuntu 20.04 its standard
/// support in 2025).
const OLDEST_GLIBC: (u32, u32) = (2, 35);
const OLDEST_GLIBC_IS: &str = "Ubuntu 22.04 LTS (Debian 12 has 2.36)";

fn tarball() -> PathBuf {
    let path = std::env::var("RL_DIST").expect("RL_DIST=<the tarball>: run `make test-dist`");
    PathBuf::from(path)
}

/// The tarball unpacked into a temporary directory, removed on drop.
struct Unpacked {
    root: PathBuf,
    /// The one directory inside, redis-ratelimit-<version>-linux-<arch>.
    dir: PathBuf,
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Unpacked {
    fn new() -> Unpacked {
        let tarball = tarball();
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!("rl-dist-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(&root)
            .status()
            .unwrap();
        assert!(status.success(), "tar -xzf {} failed", tarball.display());
        let name = tarball
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .strip_suffix(".tar.gz")
            .expect("the tarball's name ends in .tar.gz")
            .to_string();
        let entries: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            entries,
            std::slice::from_ref(&name),
            "the tarball holds one directory named like itself"
        );
        Unpacked {
            dir: root.join(name),
            root,
        }
    }

    fn module(&self) -> PathBuf {
        self.dir.join("libredis_ratelimit.so")
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
#[ignore = "needs the tarball: run with `make test-dist`"]
fn the_tarball_holds_the_module_its_conf_the_docs_and_checksums_that_check() {
    let tarball = tarball();
    let name = tarball.file_name().unwrap().to_str().unwrap().to_string();
    let arch = String::from_utf8(Command::new("uname").arg("-m").output().unwrap().stdout).unwrap();
    assert_eq!(
        name,
        format!(
            "redis-ratelimit-{}-linux-{}.tar.gz",
            env!("CARGO_PKG_VERSION"),
            arch.trim()
        )
    );
    let unpacked = Unpacked::new();
    let mut files: Vec<String> = std::fs::read_dir(&unpacked.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    println!("{name}: {}", files.join(" "));
    let expected = vec![
        "BUILD-INFO",
        "INSTALL.md",
        "LICENSE",
        "README.md",
        "SHA256SUMS",
        "docs",
        "libredis_ratelimit.so",
        "monitoring",
        "redis-ratelimit.conf",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(files, expected);
    // The docs, the README and the monitoring files are this repository's,
    // all of them: a page differs only where a link left the tarball (made
    // plain text, on the same line).
    let shipped = files_under(&unpacked.dir);
    let mut from_repo: Vec<String> = ["README.md".to_string()]
        .into_iter()
        .chain(
            files_under(&root.join("docs"))
                .iter()
                .map(|f| format!("docs/{f}")),
        )
        .chain(
            files_under(&root.join("monitoring"))
                .iter()
                .map(|f| format!("monitoring/{f}")),
        )
        .collect();
    from_repo.sort();
    for file in &from_repo {
        assert!(shipped.contains(file), "{file} is not in the tarball");
        let ours = std::fs::read(root.join(file)).unwrap();
        let theirs = std::fs::read(unpacked.dir.join(file)).unwrap();
        if !file.ends_with(".md") {
            assert_eq!(ours, theirs, "{file}");
            continue;
        }
        let (ours, theirs) = (
            String::from_utf8(ours).unwrap(),
            String::from_utf8(theirs).unwrap(),
        );
        assert_eq!(ours.lines().count(), theirs.lines().count(), "{file}");
        // A changed line holds the rewritten link, or the start of its text
        // (a link's text may run over two lines).
        let theirs: Vec<&str> = theirs.lines().collect();
        let rewritten = |i: usize| {
            theirs
                .get(i)
                .is_some_and(|l| l.contains("in the source repository)"))
        };
        for (i, (a, b)) in ours.lines().zip(&theirs).enumerate() {
            assert!(
                a == *b || rewritten(i) || rewritten(i + 1),
                "{file}: {a:?} became {b:?}"
            );
        }
    }
    // The licence Cargo.toml declares, as the repository's LICENSE says it.
    let licence = std::fs::read_to_string(unpacked.dir.join("LICENSE")).unwrap();
    assert_eq!(
        licence,
        std::fs::read_to_string(root.join("LICENSE")).unwrap()
    );
    assert!(licence.starts_with("MIT License\n"), "{licence}");
    assert!(
        std::fs::read_to_string(root.join("Cargo.toml"))
            .unwrap()
            .contains("\nlicense = \"MIT\"\n"),
        "Cargo.toml declares the licence the LICENSE file holds"
    );
    // Every file is in SHA256SUMS, and each sum checks.
    let sums = std::fs::read_to_string(unpacked.dir.join("SHA256SUMS")).unwrap();
    let summed: Vec<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    let mut without_sums = shipped.clone();
    without_sums.retain(|f| f != "SHA256SUMS");
    assert_eq!(summed, without_sums);
    let check = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&unpacked.dir)
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&check.stdout));
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // And the tarball's own sum beside it.
    let check = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(tarball.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "dist/SHA256SUMS: {}",
        String::from_utf8_lossy(&check.stdout)
    );
}

/// Every file under `dir`, as paths relative to it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap();
                files.push(relative.to_str().unwrap().to_string());
            }
        }
    }
    files.sort();
    files
}

/// Issue 31: the tarball stands alone. Every relative link of every page in
/// it leads to a file in it (and to a heading of that page), and what the
/// conf snippet and the pages point an operator to is there: the settings,
/// `INFO` and events, persistence, replication, `maxmemory`, access
/// control, the data types to delete before removing the module, upgrading.
#[test]
#[ignore = "needs the tarball: run with `make test-dist`"]
fn every_link_in_the_unpacked_tarball_resolves_inside_it() {
    let unpacked = Unpacked::new();
    let dir = unpacked.dir.canonicalize().unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    let heading = |file: &Path, anchor: &str| {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        file.extension().is_some_and(|e| e == "md")
            && common::links::anchors(&text).contains(anchor)
    };
    for page in files_under(&dir).iter().filter(|f| f.ends_with(".md")) {
        let page = dir.join(page);
        let text = std::fs::read_to_string(&page).unwrap();
        for (target, line) in common::links::links(&text) {
            checked += 1;
            let at = format!(
                "{}:{line}: {target}",
                page.strip_prefix(&dir).unwrap().display()
            );
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            match path.canonicalize() {
                Ok(p) if p.starts_with(&dir) => {
                    if !anchor.is_empty() && !heading(&p, anchor) {
                        failures.push(format!("{at}: no such heading"));
                    }
                }
                Ok(_) => failures.push(format!("{at}: outside the tarball")),
                Err(_) => failures.push(format!("{at}: no such file")),
            }
        }
    }
    // The conf snippet's pointers: `docs/<page>.md#<heading>`.
    let conf = std::fs::read_to_string(dir.join("redis-ratelimit.conf")).unwrap();
    let pointers: Vec<&str> = conf
        .split(|c: char| c.is_whitespace() || "(),;".contains(c))
        .filter(|w| w.contains(".md"))
        .collect();
    assert!(!pointers.is_empty(), "the snippet points to the docs");
    for pointer in pointers {
        checked += 1;
        let (file, anchor) = pointer.split_once('#').unwrap_or((pointer, ""));
        let path = dir.join(file);
        if !path.exists() || (!anchor.is_empty() && !heading(&path, anchor)) {
            failures.push(format!("redis-ratelimit.conf: {pointer}: does not resolve"));
        }
    }
    println!("{checked} links and pointers checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked > 100, "only {checked} links found");
    // What an operator needs, each a heading the start page leads to.
    let operations = std::fs::read_to_string(dir.join("docs/operations.md")).unwrap();
    let install = std::fs::read_to_string(dir.join("docs/install.md")).unwrap();
    let start = std::fs::read_to_string(dir.join("INSTALL.md")).unwrap();
    for (text, anchor) in [
        (&operations, "configuration"),
        (&operations, "info-ratelimit"),
        (&operations, "prometheus"),
        (&operations, "events"),
        (&operations, "at-maxmemory"),
        (&operations, "persistence"),
        (&operations, "replication"),
        (&operations, "data-types"),
        (&operations, "access-control"),
        (&install, "upgrading"),
        (&install, "installing-on-a-server"),
    ] {
        assert!(
            common::links::anchors(text).contains(anchor),
            "no #{anchor}"
        );
    }
    for page in ["docs/install.md", "docs/operations.md", "docs/commands.md"] {
        assert!(
            start.contains(&format!("]({page})")),
            "INSTALL.md leads to {page}"
        );
    }
}

/// `objdump -T`'s glibc symbol versions of `so`: each version with the
/// symbols that need it.
fn glibc_versions(so: &Path) -> BTreeMap<(u32, u32, u32), Vec<String>> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(so)
        .output()
        .expect("objdump (binutils)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut versions: BTreeMap<(u32, u32, u32), Vec<String>> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let Some(start) = line.find("GLIBC_") else {
            continue;
        };
        let rest = &line[start + "GLIBC_".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let mut parts = rest[..end].split('.').map(|p| p.parse::<u32>().unwrap());
        let version = (
            parts.next().unwrap(),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        let symbol = line.split_whitespace().last().unwrap().to_string();
        versions.entry(version).or_default().push(symbol);
    }
    versions
}

#[test]
#[ignore = "needs the tarball: run with `make test-dist`"]
fn the_module_needs_no_glibc_newer_than_the_oldest_supported_distribution() {
    let unpacked = Unpacked::new();
    let versions = glibc_versions(&unpacked.module());
    assert!(
        !versions.is_empty(),
        "objdump -T found no glibc symbol versions"
    );
    println!("glibc symbol versions the module needs (objdump -T):");
    for ((major, minor, patch), symbols) in &versions {
        let v = if *patch > 0 {
            format!("{major}.{minor}.{patch}")
        } else {
            format!("{major}.{minor}")
        };
        println!("  GLIBC_{v:<8} {}", symbols.join(" "));
    }
    let (newest, symbols) = versions.iter().next_back().unwrap();
    println!(
        "newest: GLIBC_{}.{} ({}); allowed: {}.{}, {OLDEST_GLIBC_IS}",
        newest.0,
        newest.1,
        symbols.join(" "),
        OLDEST_GLIBC.0,
        OLDEST_GLIBC.1
    );
    assert!(
        (newest.0, newest.1) <= OLDEST_GLIBC,
        "the module needs GLIBC_{}.{} ({}), newer than {}.{} of {OLDEST_GLIBC_IS}",
        newest.0,
        newest.1,
        symbols.join(" "),
        OLDEST_GLIBC.0,
        OLDEST_GLIBC.1
    );
    // BUILD-INFO says the same.
    let info = std::fs::read_to_string(unpacked.dir.join("BUILD-INFO")).unwrap();
    assert!(
        info.contains(&format!(
            "newest glibc symbol version needed: GLIBC_{}.{}\n",
            newest.0, newest.1
        )),
        "{info}"
    );
}

/// A server started from a configuration file, killed on drop.
struct ConfServer {
    child: Child,
    port: u16,
}

impl Drop for ConfServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_with_conf(binary: &str, conf: &Path, dir: &Path) -> ConfServer {
    let log = dir.join(format!("{}.log", binary.replace('/', "_")));
    for _ in 0..5 {
        let port = free_port();
        let child = Command::new(binary)
            .arg(conf)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        let mut server = ConfServer { child, port };
        let mut up = false;
        for _ in 0..250 {
            if let Ok(Some(_)) = server.child.try_wait() {
                break;
            }
            if connect_port(port)
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                .is_ok()
            {
                up = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if up {
            return server;
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if !text.contains("Address already in use") {
            panic!("{binary} did not start with {}:\n{text}", conf.display());
        }
    }
    panic!("{binary}: no free port in 5 tries");
}

#[test]
#[ignore = "needs the tarball: run with `make test-dist`"]
fn every_matrix_server_starts_with_the_unpacked_module_through_its_conf_snippet() {
    let unpacked = Unpacked::new();
    let snippet = std::fs::read_to_string(unpacked.dir.join("redis-ratelimit.conf")).unwrap();
    // What an operator does: the snippet, with the path where the .so went.
    let loadmodule = snippet
        .lines()
        .find(|l| l.starts_with("loadmodule "))
        .expect("the snippet loads the module");
    let module = unpacked.module();
    // The snippet sets the defaults; each is changed here (no -> yes, a
    // number + 1), so that the server's answers show its lines were read.
    let mut settings = Vec::new();
    let mut text = String::new();
    for line in snippet.lines() {
        if line == loadmodule {
            text.push_str(&format!("loadmodule {}\n", module.display()));
        } else if let Some(setting) = line.strip_prefix("ratelimit.") {
            let (name, value) = setting.split_once(' ').unwrap();
            let changed = match value {
                "no" => "yes".to_string(),
                number => (number.parse::<i64>().unwrap() + 1).to_string(),
            };
            text.push_str(&format!("ratelimit.{name} {changed}\n"));
            settings.push((format!("ratelimit.{name}"), changed));
        } else {
            text.push_str(line);
            text.push('\n');
        }
    }
    assert_eq!(
        settings.len(),
        4,
        "the snippet sets each of the four settings"
    );
    let conf = unpacked.root.join("redis-ratelimit.conf");
    std::fs::write(&conf, text).unwrap();

    let servers = std::env::var("RL_DIST_SERVERS").unwrap_or_else(|_| "redis-server".into());
    for binary in servers.split_whitespace() {
        let server = start_with_conf(binary, &conf, &unpacked.root);
        let mut con = connect_port(server.port).unwrap();
        let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("valkey_version:"))
            .map(|v| format!("valkey {v}"))
            .or_else(|| {
                info.lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
                    .map(|v| format!("redis {v}"))
            })
            .unwrap();
        let modules = format!("{:?}", run(&mut con, &["MODULE", "LIST"]).unwrap());
        assert!(
            modules.contains(module.to_str().unwrap()),
            "{binary}: {modules}"
        );
        for (name, value) in &settings {
            let got: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg(name)
                .query(&mut con)
                .unwrap();
            assert_eq!(got, [name.clone(), value.clone()], "{binary}");
        }
        let reply = run(&mut con, &["RL.TOKENBUCKET", "k", "10", "1"]).unwrap();
        assert_eq!(
            reply,
            Value::Array([1, 10, 9, 0, 1000].map(Value::Int).to_vec()),
            "{binary}"
        );
        println!(
            "{binary} ({version}): loaded {} through the snippet, its settings taken; a check answers",
            module.display()
        );
    }
}
