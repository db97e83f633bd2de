//! What Redis says about the module's commands (`COMMAND DOCS`, `COMMAND
//! INFO`, `COMMAND GETKEYS`), against a real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use redis::{Connection, Value};
use redis_ratelimit::algorithms::registry::{each_algorithm, Each, Listed};
use redis_ratelimit::parse::syntax::{Kind, OptionWord, Word};
use redis_ratelimit::parse::Syntax;

/// What an algorithm's `Syntax` says of its check command.
struct Declared {
    name: &'static str,
    params: &'static [Word],
    options: &'static [OptionWord],
    summary: &'static str,
    complexity: &'static str,
    /// Whether it takes `UPTO` (partial grants).
    partial: bool,
}

/// Reads what an algorithm's `Syntax` declares.
struct Declare;

impl Each for Declare {
    type Out = Declared;
    fn algorithm<A: Listed>(&mut self) -> Declared {
        Declared {
            name: A::NAME,
            params: A::Params::PARAMS,
            options: A::Params::OPTIONS,
            summary: A::Params::SUMMARY,
            complexity: A::Params::COMPLEXITY,
            partial: A::Params::PARTIAL,
        }
    }
}

/// Every algorithm of the registry, as its `Syntax` declares its check
/// command.
fn declared() -> Vec<Declared> {
    each_algorithm(&mut Declare)
}

/// How `COMMAND DOCS` types a value of this kind.
fn type_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Integer => "integer",
        Kind::Decimal => "double",
        Kind::Duration => "string",
    }
}

/// Every command the module registered on this server.
fn module_commands(con: &mut Connection) -> Vec<String> {
    let names: Vec<String> = redis::cmd("COMMAND")
        .arg("LIST")
        .arg("FILTERBY")
        .arg("MODULE")
        .arg("ratelimit")
        .query(con)
        .unwrap();
    assert!(!names.is_empty(), "the module registered no commands");
    names
}

fn field_text(v: &Value, name: &str) -> String {
    field(v, name).map(text).unwrap_or_default()
}

/// `COMMAND DOCS <name>`: the command's field/value pairs.
fn docs(con: &mut Connection, name: &str) -> Value {
    let reply = run(con, &["COMMAND", "DOCS", name]).unwrap();
    field(&reply, name)
        .unwrap_or_else(|| panic!("COMMAND DOCS {name} answered nothing: {reply:?}"))
        .clone()
}

/// One documented argument, flattened for comparison: name, type, token
/// ("" when none), flags joined by spaces.
fn argument(arg: &Value) -> (String, String, String, String) {
    let flags = field(arg, "flags")
        .map(|f| items(f).iter().map(text).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    (
        field_text(arg, "name"),
        field_text(arg, "type"),
        field_text(arg, "token"),
        flags,
    )
}

fn arguments(doc: &Value) -> Vec<(String, String, String, String)> {
    field(doc, "arguments")
        .map(|args| items(args).iter().map(argument).collect())
        .unwrap_or_default()
}

fn owned(rows: &[(&str, &str, &str, &str)]) -> Vec<(String, String, String, String)> {
    rows.iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect()
}

/// `COMMAND INFO <name>`: `[name, arity, flags, first, last, step, acl
/// categories, tips, key specs, subcommands]`.
fn info(con: &mut Connection, name: &str) -> Vec<Value> {
    let reply = run(con, &["COMMAND", "INFO", name]).unwrap();
    items(&items(&reply)[0]).to_vec()
}

/// The first element (`allowed`) of a check's reply, nested or not.
fn allowed(con: &mut Connection, words: &[&str]) -> i64 {
    let reply = run(con, words).unwrap_or_else(|e| panic!("{words:?} failed: {e}"));
    text(&items(&reply)[0]).parse().unwrap()
}

/// The words of a list reply.
fn words(v: &Value) -> Vec<String> {
    items(v).iter().map(text).collect()
}

/// The flags of the command's one key spec.
fn key_spec_flags(con: &mut Connection, name: &str) -> Vec<String> {
    let info = info(con, name);
    let specs = items(&info[8]);
    assert_eq!(specs.len(), 1, "{name}: {specs:?}");
    words(field(&specs[0], "flags").unwrap())
}

#[test]
fn every_command_of_the_module_is_documented_with_summary_since_complexity_and_arguments() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let names = module_commands(&mut con);
    let check_commands = ALGORITHMS
        .iter()
        .map(|a| command_of(a).to_ascii_lowercase());
    let others = [
        "cl.throttle",
        "rl.setstate",
        "rl.all",
        "rl.acquire",
        "rl.release",
        "rl.info",
        "rl.top",
    ]
    .map(String::from);
    for expected in check_commands.chain(others) {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    for name in &names {
        let doc = docs(&mut con, name);
        for f in ["summary", "since", "complexity"] {
            assert!(
                !field_text(&doc, f).is_empty(),
                "{name} has no {f}: {doc:?}"
            );
        }
        assert_eq!(field_text(&doc, "since"), "0.1.0", "{name}");
        let args = field(&doc, "arguments").map(items).unwrap_or_default();
        assert!(!args.is_empty(), "{name} has no arguments");
        for arg in args {
            assert!(
                !field_text(arg, "summary").is_empty(),
                "{name}: argument without a summary: {arg:?}"
            );
        }
    }
}

#[test]
fn token_bucket_documents_key_capacity_rate_then_cost_and_peek_options() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let doc = docs(&mut con, "rl.tokenbucket");
    assert_eq!(
        arguments(&doc),
        owned(&[
            ("key", "key", "", ""),
            ("capacity", "integer", "", ""),
            ("rate", "double", "", ""),
            ("cost", "integer", "COST", "optional"),
            ("upto", "pure-token", "UPTO", "optional"),
            ("peek", "pure-token", "PEEK", "optional"),
            ("block", "integer", "BLOCK", "optional"),
            ("penalty", "string", "PENALTY", "optional"),
            ("shadow", "pure-token", "SHADOW", "optional"),
        ])
    );
    assert_eq!(field_text(&doc, "complexity"), "O(1)");
    assert_eq!(field_text(&doc, "module"), "ratelimit");
}

/// Every check command, as its algorithm's `Syntax` declares it: the key,
/// its parameters, its own options, then `COST`, `UPTO` where it offers
/// partial grants, and `PEEK`...; its summary and
/// its complexity.
#[test]
fn every_check_command_is_documented_as_its_algorithm_declares_it() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for algorithm in declared() {
        let command = command_of(algorithm.name).to_ascii_lowercase();
        let doc = docs(&mut con, &command);
        let mut expected = vec![("key", "key", "", "")];
        expected.extend(
            algorithm
                .params
                .iter()
                .map(|w| (w.name, type_of(w.kind), "", "")),
        );
        expected.extend(
            algorithm
                .options
                .iter()
                .map(|o| (o.value.name, type_of(o.value.kind), o.token, "optional")),
        );
        expected.push(("cost", "integer", "COST", "optional"));
        if algorithm.partial {
            expected.push(("upto", "pure-token", "UPTO", "optional"));
        }
        expected.extend([
            ("peek", "pure-token", "PEEK", "optional"),
            ("block", "integer", "BLOCK", "optional"),
            ("penalty", "string", "PENALTY", "optional"),
            ("shadow", "pure-token", "SHADOW", "optional"),
        ]);
        assert_eq!(arguments(&doc), owned(&expected), "{command}");
        assert_eq!(field_text(&doc, "summary"), algorithm.summary, "{command}");
        assert_eq!(
            field_text(&doc, "complexity"),
            algorithm.complexity,
            "{command}"
        );
    }
}

#[test]
fn cl_throttle_documents_redis_cells_arguments_with_an_optional_quantity() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let doc = docs(&mut con, "cl.throttle");
    assert_eq!(
        arguments(&doc),
        owned(&[
            ("key", "key", "", ""),
            ("max_burst", "integer", "", ""),
            ("count", "integer", "", ""),
            ("period", "integer", "", ""),
            ("quantity", "integer", "", "optional"),
        ])
    );
}

#[test]
fn rl_top_documents_its_optional_words_and_declares_no_key() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    assert_eq!(
        arguments(&docs(&mut con, "rl.top")),
        owned(&[
            ("count", "integer", "", "optional"),
            ("witherror", "pure-token", "WITHERROR", "optional"),
            ("reset", "pure-token", "RESET", "optional"),
        ])
    );
    let info = info(&mut con, "rl.top");
    assert_eq!(text(&info[1]), "-1", "arity");
    assert_eq!(words(&info[2]), ["readonly", "module", "loading", "stale"]);
    assert_eq!(
        [text(&info[3]), text(&info[4]), text(&info[5])],
        ["0", "0", "0"],
        "first key, last key, step"
    );
    assert!(items(&info[8]).is_empty(), "key specs: {:?}", info[8]);
}

#[test]
fn command_getkeys_finds_the_key_of_every_single_key_command() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    // Every algorithm's command with a word for each parameter (GETKEYS
    // reads none of them), then the same with options.
    let mut calls: Vec<Vec<String>> = declared()
        .iter()
        .map(|a| {
            let mut call = vec![command_of(a.name), "k".to_string()];
            call.extend(a.params.iter().map(|_| "1".to_string()));
            call
        })
        .collect();
    for call in [
        &["RL.SLIDINGCOUNTER", "k", "10", "1m", "PRECISION", "3"][..],
        &["CL.THROTTLE", "k", "1", "2", "3"],
        &["RL.SETSTATE", "k", "state"],
    ] {
        calls.push(call.iter().map(|w| w.to_string()).collect());
    }
    for call in &calls {
        let mut words = vec!["COMMAND", "GETKEYS"];
        words.extend(call.iter().map(String::as_str));
        let keys: Vec<String> = redis::from_redis_value(run(&mut con, &words).unwrap()).unwrap();
        assert_eq!(keys, ["k"], "{call:?}");
    }
}

#[test]
fn command_info_shows_the_key_spec_a_check_reads_and_updates() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let token_bucket = info(&mut con, "rl.tokenbucket");
    assert_eq!(text(&token_bucket[1]), "-4", "arity");
    assert_eq!(
        [
            text(&token_bucket[3]),
            text(&token_bucket[4]),
            text(&token_bucket[5])
        ],
        ["1", "1", "1"],
        "first key, last key, step"
    );
    let specs = items(&token_bucket[8]);
    assert_eq!(specs.len(), 1, "{specs:?}");
    let spec = &specs[0];
    assert_eq!(
        words(field(spec, "flags").unwrap()),
        ["RW", "access", "update"]
    );
    let begin = field(spec, "begin_search").unwrap();
    assert_eq!(field_text(begin, "type"), "index");
    assert_eq!(field_text(field(begin, "spec").unwrap(), "index"), "1");
    let find = field(spec, "find_keys").unwrap();
    assert_eq!(field_text(find, "type"), "range");
    assert_eq!(field_text(field(find, "spec").unwrap(), "lastkey"), "0");
}

#[test]
fn the_arity_redis_checks_is_the_documented_required_arguments() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for name in module_commands(&mut con) {
        let doc = docs(&mut con, &name);
        let args = field(&doc, "arguments").map(items).unwrap_or_default();
        let has_flag = |arg: &Value, flag: &str| {
            field(arg, "flags").is_some_and(|f| items(f).iter().any(|x| text(x) == flag))
        };
        let required = args.iter().filter(|a| !has_flag(a, "optional")).count() as i64;
        let open_ended = args
            .iter()
            .any(|a| has_flag(a, "optional") || has_flag(a, "multiple"));
        let expected = if open_ended {
            -(required + 1)
        } else {
            required + 1
        };
        assert_eq!(
            text(&info(&mut con, &name)[1]),
            expected.to_string(),
            "{name}"
        );
    }
}

#[test]
fn a_call_with_too_few_arguments_is_refused_when_queued_not_when_run() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    run(&mut con, &["MULTI"]).unwrap();
    let error = error_of(&mut con, &["RL.TOKENBUCKET", "k", "10"]);
    assert_eq!(
        error,
        "ERR wrong number of arguments for 'rl.tokenbucket' command"
    );
    assert!(error_of(&mut con, &["EXEC"]).starts_with("EXECABORT"));
    assert!(!exists(&mut con, "k"));
}

#[test]
fn key_specs_say_what_each_command_does_to_its_key() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let check = ["RW", "access", "update"];
    for algorithm in ALGORITHMS {
        let name = command_of(algorithm).to_ascii_lowercase();
        assert_eq!(key_spec_flags(&mut con, &name), check, "{name}");
    }
    for (name, flags) in [
        ("rl.tokenbucket", &check[..]),
        ("cl.throttle", &["RW", "access", "update"]),
        ("rl.setstate", &["OW", "update"]),
        ("rl.acquire", &["RW", "access", "update"]),
        ("rl.release", &["RW", "delete"]),
        ("rl.info", &["RO", "access"]),
        ("rl.all", &["RW", "access", "update"]),
    ] {
        assert_eq!(key_spec_flags(&mut con, name), flags, "{name}");
    }
}

#[test]
fn rl_all_declares_its_keys_by_the_numkeys_before_them() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    let info = info(&mut con, "rl.all");
    assert!(
        words(&info[2]).contains(&"movablekeys".to_string()),
        "{info:?}"
    );
    let spec = &items(&info[8])[0];
    let begin = field(spec, "begin_search").unwrap();
    assert_eq!(field_text(begin, "type"), "index");
    assert_eq!(field_text(field(begin, "spec").unwrap(), "index"), "1");
    let find = field(spec, "find_keys").unwrap();
    assert_eq!(field_text(find, "type"), "keynum");
    let find = field(find, "spec").unwrap();
    assert_eq!(
        ["keynumidx", "firstkey", "keystep"].map(|f| field_text(find, f)),
        ["0", "1", "1"]
    );
    assert_eq!(
        arguments(&docs(&mut con, "rl.all")),
        owned(&[
            ("numkeys", "integer", "", ""),
            ("key", "key", "", "multiple"),
            ("spec", "string", "", "multiple"),
            ("cost", "integer", "COST", "optional"),
            ("peek", "pure-token", "PEEK", "optional"),
            ("block", "integer", "BLOCK", "optional"),
            ("penalty", "string", "PENALTY", "optional"),
            ("shadow", "pure-token", "SHADOW", "optional"),
        ])
    );
}

#[test]
fn a_cluster_refuses_rl_all_over_two_slots_and_routes_it_within_one() {
    let server = Server::start(&["--cluster-enabled", "yes"]);
    let mut con = server.connect();
    run(&mut con, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]).unwrap();
    wait_for(
        "the cluster to be up",
        std::time::Duration::from_secs(20),
        || cluster_info_field(&mut con, "cluster_state") == "ok",
    );
    let specs = ["TOKENBUCKET", "10", "1", "GCRA", "1", "2", "3"];
    let across = [&["RL.ALL", "2", "a", "b"][..], &specs].concat();
    assert_eq!(
        error_of(&mut con, &across),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    let within = [&["RL.ALL", "2", "{u}a", "{u}b"][..], &specs].concat();
    assert_eq!(allowed(&mut con, &within), 1);
    // A slot this node does not serve: the single-key commands route too.
    run(&mut con, &["CLUSTER", "DELSLOTS", "3300"]).unwrap(); // "b"
    assert!(error_of(&mut con, &["RL.TOKENBUCKET", "b", "10", "1"]).starts_with("CLUSTERDOWN"));
    let one = [&["RL.ALL", "1", "b"][..], &specs[..3]].concat();
    assert!(error_of(&mut con, &one).starts_with("CLUSTERDOWN"));
}

/// One field of `CLUSTER INFO`.
fn cluster_info_field(con: &mut Connection, field: &str) -> String {
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

#[test]
fn an_acl_user_kept_to_some_keys_cannot_reach_others_through_rl_all() {
    let server = Server::start(&[]);
    let mut admin = server.connect();
    run(
        &mut admin,
        &["ACL", "SETUSER", "tenant", "on", "nopass", "~{t}*", "+@all"],
    )
    .unwrap();
    let mut con = server.connect();
    run(&mut con, &["AUTH", "tenant", "x"]).unwrap();
    let specs = ["TOKENBUCKET", "10", "1", "TOKENBUCKET", "10", "1"];
    let other = [&["RL.ALL", "2", "{t}a", "{o}b"][..], &specs].concat();
    assert!(
        error_of(&mut con, &other).starts_with("NOPERM"),
        "{other:?}"
    );
    assert!(!exists(&mut admin, "{t}a"));
    let own = [&["RL.ALL", "2", "{t}a", "{t}b"][..], &specs].concat();
    assert_eq!(allowed(&mut con, &own), 1);
}
