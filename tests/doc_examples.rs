//! The documentation, run: every `redis-cli` session in README.md and docs/
//! is typed into a real server with the module, and what `redis-cli` prints
//! is compared with what the page shows; the links between the pages are
//! followed; docs/commands.md is compared with `COMMAND DOCS`.
//!
//! # How a page writes a session
//!
//! A fenced block holding lines that start with `$ redis-cli` is a session.
//! Each session runs on a server of its own, started empty for it (so a
//! reader can type it as it is, and `INFO` counts start at 0), its lines in
//! order:
//! - `$ redis-cli WORDS` runs `redis-cli -p <port> --no-raw WORDS` (the
//!   words split as a shell does, `'...'` and `"..."` quoting) and compares
//!   what it prints with the lines that follow, up to the next `$` line or
//!   the block's end. `$ redis-cli WORDS | grep TEXT` keeps the printed lines
//!   that contain TEXT, as grep would.
//! - `$ sleep SECONDS` waits (keep it short: these tests are to stay fast).
//! - A comment is two spaces or more, `#`, and the rest of the line, on a
//!   command or an expected line; it is not compared (`# ratelimit`, at the
//!   start of a line, is output).
//!
//! Expected lines match printed lines exactly (trailing blanks aside),
//! except for two patterns, for what depends on the moment (times, TTLs,
//! random ids):
//! - `...` alone on a line stands for any number of printed lines (zero or
//!   more);
//! - `...` within a line stands for any text (`6) "..."`: a drawn id);
//! - `A..B` (two integers) stands for an integer from A to B: a time that
//!   depends on when the command runs (`5) (integer) 29900..30000`).
//!
//! A directive in an HTML comment on the line before a block (blank lines
//! between are allowed) says more about it:
//! - `<!-- server: ARGS -->` starts the session's server with ARGS added to
//!   its command line (e.g. `--ratelimit.deny-events yes`);
//! - `<!-- not run: WHY -->` marks a block that is not run here, and why;
//! - `<!-- file: NAME -->` marks a file the page's Python blocks read
//!   (test_doc_examples.py writes it where they run);
//! - `<!-- node: WHO -->` marks a Node block that WHO runs.
//!
//! Every fenced block of the pages is a session, Python (run by
//! clients/python/tests/test_doc_examples.py), or says why it is not run:
//! a block that is none of these fails the test, so an example cannot
//! be added without being run or explained. `cargo test --test doc_examples
//! -- --nocapture` prints the count of each.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::links::{anchors, links};
use common::*;
use redis::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages whose examples are run: README.md and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut dirs = vec![repo().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo()).unwrap().display().to_string()
}

/// A fenced block of a page.
struct Block {
    page: String,
    /// The line of its opening fence, from 1.
    line: usize,
    /// The info string after the fence (`text`, `python`, ...).
    lang: String,
    lines: Vec<String>,
    /// The directive of the HTML comment before it, if any.
    directive: Option<String>,
}

impl Block {
    fn is_session(&self) -> bool {
        self.lines.iter().any(|l| l.starts_with("$ redis-cli"))
    }
    fn at(&self) -> String {
        format!("{}:{}", self.page, self.line)
    }
}

fn blocks(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut blocks = Vec::new();
    let mut directive: Option<String> = None;
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(block) = open.as_mut() {
            if line.trim_start().starts_with("```") {
                blocks.push(open.take().unwrap());
            } else {
                block.lines.push(line.to_string());
            }
            continue;
        }
        let trimmed = line.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            open = Some(Block {
                page: relative(path),
                line: i + 1,
                lang: lang.trim().to_string(),
                lines: Vec::new(),
                directive: directive.take(),
            });
        } else if let Some(comment) = trimmed
            .strip_prefix("<!--")
            .and_then(|c| c.strip_suffix("-->"))
        {
            directive = Some(comment.trim().to_string());
        } else if !trimmed.is_empty() {
            directive = None;
        }
    }
    assert!(open.is_none(), "{}: a fence is not closed", relative(path));
    blocks
}

/// A line without its comment (two blanks or more, then `#`).
fn without_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for i in 0..bytes.len() {
        if bytes[i] == b'#' && i >= 2 && bytes[i - 1] == b' ' && bytes[i - 2] == b' ' {
            return line[..i].trim_end();
        }
    }
    line.trim_end()
}

/// Words split as a shell splits them (blanks, `'...'`, `"..."`).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(quote.is_none(), "unclosed quote in {line:?}");
    if in_word {
        words.push(word);
    }
    words
}

/// One piece of an expected line.
#[derive(Debug)]
enum Piece {
    Text(String),
    Any,
    Range(i64, i64),
}

/// `A..B` at the start of `s` (not part of `...`): its bounds and length.
fn range_at(s: &str) -> Option<(i64, i64, usize)> {
    let number = |s: &str| -> Option<(i64, usize)> {
        let sign = usize::from(s.starts_with('-'));
        let digits = s[sign..].bytes().take_while(u8::is_ascii_digit).count();
        (digits > 0).then(|| (s[..sign + digits].parse().unwrap(), sign + digits))
    };
    let (low, n) = number(s)?;
    let rest = s[n..].strip_prefix("..")?;
    if rest.starts_with('.') {
        return None;
    }
    let (high, m) = number(rest)?;
    Some((low, high, n + 2 + m))
}

fn pieces(expected: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < expected.len() {
        let rest = &expected[i..];
        let starts_number = text.chars().last().is_none_or(|c| !c.is_ascii_digit());
        if rest.starts_with("...") {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
            pieces.push(Piece::Any);
            i += 3;
        } else if let Some((low, high, n)) = range_at(rest).filter(|_| starts_number) {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
            pieces.push(Piece::Range(low, high));
            i += n;
        } else {
            let c = rest.chars().next().unwrap();
            text.push(c);
            i += c.len_utf8();
        }
    }
    pieces.push(Piece::Text(text));
    pieces
}

fn matches_pieces(pieces: &[Piece], actual: &str) -> bool {
    match pieces.split_first() {
        None => actual.is_empty(),
        Some((Piece::Text(t), rest)) => actual
            .strip_prefix(t.as_str())
            .is_some_and(|a| matches_pieces(rest, a)),
        Some((Piece::Any, rest)) => (0..=actual.len())
            .any(|i| actual.is_char_boundary(i) && matches_pieces(rest, &actual[i..])),
        Some((Piece::Range(low, high), rest)) => {
            let sign = usize::from(actual.starts_with('-'));
            let digits = actual[sign..]
                .bytes()
                .take_while(u8::is_ascii_digit)
                .count();
            digits > 0
                && actual[..sign + digits]
                    .parse::<i64>()
                    .is_ok_and(|v| (*low..=*high).contains(&v))
                && matches_pieces(rest, &actual[sign + digits..])
        }
    }
}

fn line_matches(expected: &str, actual: &str) -> bool {
    matches_pieces(&pieces(expected), actual.trim_end())
}

/// Whether the printed lines match the expected ones (`...` lines: any
/// number of lines).
fn lines_match(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e == "..." => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| line_matches(e, a) && lines_match(rest, more)),
    }
}

#[test]
fn the_patterns_match_what_they_say_and_nothing_else() {
    assert!(line_matches(
        "5) (integer) 29900..30000",
        "5) (integer) 29950"
    ));
    assert!(!line_matches(
        "5) (integer) 29900..30000",
        "5) (integer) 30001"
    ));
    assert!(!line_matches(
        "5) (integer) 29900..30000",
        "5) (integer) 299500"
    ));
    assert!(line_matches("4) (integer) -1..5", "4) (integer) -1"));
    assert!(line_matches(
        "6) \"...\"",
        "6) \"0e2aaf052cda0bf7d2be4418daad388b\""
    ));
    assert!(!line_matches("6) \"...\"", "6) (nil)"));
    assert!(line_matches("1) (integer) 1", "1) (integer) 1  "));
    assert!(!line_matches("1) (integer) 1", "1) (integer) 10"));
    let lines = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(lines_match(
        &lines(&["a", "...", "d"]),
        &lines(&["a", "b", "c", "d"])
    ));
    assert!(lines_match(&lines(&["a", "...", "d"]), &lines(&["a", "d"])));
    assert!(!lines_match(
        &lines(&["a", "...", "d"]),
        &lines(&["a", "b"])
    ));
    assert!(!lines_match(&lines(&["a", "b"]), &lines(&["a", "b", "c"])));
    assert_eq!(
        without_comment("1) (integer) 1   # allowed"),
        "1) (integer) 1"
    );
    assert_eq!(without_comment("# ratelimit"), "# ratelimit");
    assert_eq!(
        shell_words("RL.ALL 2 {a}x '{a} y' \"z\""),
        ["RL.ALL", "2", "{a}x", "{a} y", "z"]
    );
}

/// Runs one session on a server of its own; the failures, if any.
fn run_session(block: &Block) -> Vec<String> {
    let extra: Vec<String> = block
        .directive
        .as_deref()
        .and_then(|d| d.strip_prefix("server:"))
        .map(shell_words)
        .unwrap_or_default();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let server = Server::start(&extra);
    let mut failures = Vec::new();
    let mut i = 0;
    let lines = &block.lines;
    while i < lines.len() {
        let line = without_comment(&lines[i]);
        i += 1;
        if line.is_empty() {
            continue;
        }
        let Some(command) = line.strip_prefix("$ ") else {
            failures.push(format!(
                "{}: line {:?} is neither a command nor after one",
                block.at(),
                line
            ));
            continue;
        };
        let mut expected = Vec::new();
        while i < lines.len() && !lines[i].starts_with("$ ") {
            expected.push(without_comment(&lines[i]).to_string());
            i += 1;
        }
        while expected.last().is_some_and(String::is_empty) {
            expected.pop();
        }
        let (command, grep) = match command.split_once(" | grep ") {
            Some((c, g)) => (c, Some(shell_words(g).concat())),
            None => (command, None),
        };
        let words = shell_words(command);
        match words[0].as_str() {
            "sleep" => {
                let seconds: f64 = words[1].parse().unwrap();
                assert!(seconds <= 2.0, "{}: sleeps are to stay short", block.at());
                std::thread::sleep(Duration::from_secs_f64(seconds));
                continue;
            }
            "redis-cli" => {}
            other => panic!("{}: a session runs redis-cli, not {other}", block.at()),
        }
        let output = Command::new(cli_binary())
            .args(["-p", &server.port.to_string(), "--no-raw"])
            .args(&words[1..])
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&output.stdout);
        let actual: Vec<String> = printed
            .lines()
            .map(|l| l.trim_end().to_string())
            .filter(|l| grep.as_ref().is_none_or(|g| l.contains(g.as_str())))
            .collect();
        if !lines_match(&expected, &actual) {
            failures.push(format!(
                "{}: `{}`\n  the page shows:\n    {}\n  redis-cli printed:\n    {}",
                block.at(),
                command,
                expected.join("\n    "),
                actual.join("\n    ")
            ));
        }
    }
    failures
}

#[test]
fn every_redis_cli_session_of_the_docs_prints_what_the_page_shows() {
    let mut failures = Vec::new();
    let mut counts: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    let mut not_run = Vec::new();
    for page in pages() {
        for block in blocks(&page) {
            let count = counts.entry(block.page.clone()).or_default();
            let not_run_why = block
                .directive
                .as_deref()
                .and_then(|d| d.strip_prefix("not run:"));
            if let Some(why) = not_run_why {
                count[2] += 1;
                not_run.push(format!("{}: {}", block.at(), why.trim()));
            } else if block.is_session() {
                count[0] += 1;
                failures.extend(run_session(&block));
            } else if block.lang == "python"
                || block.directive.as_deref().is_some_and(|d| {
                    d.starts_with("file:") || (block.lang == "js" && d.starts_with("node:"))
                })
            {
                count[1] += 1;
            } else {
                failures.push(format!(
                    "{}: a ```{} block that is not a redis-cli session, not Python, and not \
                     marked <!-- not run: why -->",
                    block.at(),
                    block.lang
                ));
            }
        }
    }
    println!(
        "page: redis-cli sessions run here / client blocks (run by the clients' tests) / not run"
    );
    for (page, [s, p, n]) in &counts {
        println!("  {page}: {s} / {p} / {n}");
    }
    println!("not run:");
    for line in &not_run {
        println!("  {line}");
    }
    let sessions: usize = counts.values().map(|c| c[0]).sum();
    assert!(sessions >= 20, "only {sessions} sessions found");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn no_relative_link_is_dead_and_every_doc_is_reachable_from_the_readme() {
    let readme = repo().join("README.md");
    let mut failures = Vec::new();
    let mut reached = BTreeSet::new();
    let mut queue = VecDeque::from([readme.clone()]);
    while let Some(page) = queue.pop_front() {
        let page = page.canonicalize().unwrap();
        if !reached.insert(page.clone()) {
            continue;
        }
        let text = std::fs::read_to_string(&page).unwrap();
        for (target, line) in links(&text) {
            let at = format!("{}:{line}", relative(&page));
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !path.exists() {
                failures.push(format!("{at}: {target}: no such file"));
                continue;
            }
            let is_page = path.extension().is_some_and(|e| e == "md");
            if !anchor.is_empty() {
                let anchors = anchors(&std::fs::read_to_string(&path).unwrap());
                if !is_page || !anchors.contains(anchor) {
                    failures.push(format!("{at}: {target}: no such heading"));
                }
            }
            if is_page && path.starts_with(repo()) {
                queue.push_back(path);
            }
        }
    }
    for page in pages() {
        if !reached.contains(&page.canonicalize().unwrap()) {
            failures.push(format!(
                "{}: not reachable from README.md by links",
                relative(&page)
            ));
        }
    }
    assert!(
        reached.len() > pages().len(),
        "the client READMEs are followed too"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An argument of `COMMAND DOCS`, as a synopsis writes it (`[COST cost]`).
fn synopsis_of(arg: &Value) -> String {
    let get = |name: &str| field(arg, name).map(text).unwrap_or_default();
    let flags: Vec<String> = field(arg, "flags")
        .map(|f| items(f).iter().map(text).collect())
        .unwrap_or_default();
    let token = get("token");
    let mut s = match get("type").as_str() {
        "pure-token" => token,
        "oneof" => items(field(arg, "arguments").unwrap())
            .iter()
            .map(synopsis_of)
            .collect::<Vec<_>>()
            .join(" | "),
        _ if token.is_empty() => get("name"),
        _ => format!("{token} {}", get("name")),
    };
    if flags.iter().any(|f| f == "multiple") {
        s = format!("{s} [{s} ...]");
    }
    if flags.iter().any(|f| f == "optional") {
        s = format!("[{s}]");
    }
    s
}

/// Each command's section of docs/commands.md: from its `## NAME` or
/// `### NAME` heading to the next heading of the same or a higher level.
fn command_sections(text: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, usize, String)> = None;
    for line in text.lines() {
        let level = line.bytes().take_while(|b| *b == b'#').count();
        if level > 0 && line[level..].starts_with(' ') {
            if current.as_ref().is_some_and(|(_, l, _)| level <= *l) {
                let (name, _, body) = current.take().unwrap();
                sections.insert(name, body);
            }
            let title = line[level..].trim();
            let name = title
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_matches('`');
            if current.is_none()
                && (name.starts_with("RL.") || name.starts_with("CL."))
                && name.chars().all(|c| c.is_ascii_uppercase() || c == '.')
            {
                current = Some((name.to_string(), level, String::new()));
                continue;
            }
        }
        if let Some((_, _, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    if let Some((name, _, body)) = current {
        sections.insert(name, body);
    }
    sections
}

#[test]
fn docs_commands_md_agrees_with_command_docs() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let names: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("ratelimit")
        .query(&mut con)
        .unwrap();
    let page = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let sections = command_sections(&page);
    let mut failures = Vec::new();
    for name in &names {
        let upper = name.to_ascii_uppercase();
        let Some(section) = sections.get(&upper) else {
            failures.push(format!("{upper}: no section in docs/commands.md"));
            continue;
        };
        // Lines are wrapped anywhere: compare with blanks collapsed.
        let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
        let reply = run(&mut con, &["COMMAND", "DOCS", name]).unwrap();
        let doc = field(&reply, name).unwrap();
        let args: Vec<Value> = field(doc, "arguments")
            .map(|a| items(a).to_vec())
            .unwrap_or_default();
        let synopsis = std::iter::once(upper.clone())
            .chain(args.iter().map(synopsis_of))
            .collect::<Vec<_>>()
            .join(" ");
        if !section.contains(&format!("`{synopsis}`")) {
            failures.push(format!("{upper}: the section does not show `{synopsis}`"));
        }
        let complexity = text(field(doc, "complexity").unwrap());
        if !section.contains(&format!("Complexity: {complexity}.")) {
            failures.push(format!(
                "{upper}: the section does not say `Complexity: {complexity}.`"
            ));
        }
        // Each argument named in the prose: `name`, or its token (`COST n`).
        for arg in &args {
            let name = text(field(arg, "name").unwrap());
            let token = field(arg, "token").map(text);
            let named = section.contains(&format!("`{name}`"))
                || token.is_some_and(|t| section.contains(&format!("`{t}")));
            if !named {
                failures.push(format!("{upper}: argument `{name}` is not described"));
            }
        }
    }
    for documented in sections.keys() {
        if !names.iter().any(|n| n.eq_ignore_ascii_case(documented)) {
            failures.push(format!(
                "{documented}: documented, but the module has no such command"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
