//! Numbers as clients write them (issue 31): every numeric argument of every
//! command takes the decimal forms Redis reads for a double (`INCRBYFLOAT`):
//! exponents (`1e3`, `1E2`, `1.1574074074074073e-05`, what redis-py's
//! `str(float)`, Go's and Java's float formatting send), a sign, a point
//! with nothing after it. Whole-number arguments take any of these forms
//! whose value is whole (`1e3`, `10.0`). `inf` and `nan` are refused saying
//! so, and `RL.INFO`'s rates read back as the same rate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// One call written twice: with plain numbers, and with the same numbers as
/// a client's float formatting writes them. `{k}` is the key (and `{k2}` a
/// second one in the same slot).
const SAME_CALLS: &[(&str, &str)] = &[
    ("RL.TOKENBUCKET {k} 10 0.5", "RL.TOKENBUCKET {k} 1e1 5e-1"),
    ("RL.TOKENBUCKET {k} 10 0.5", "RL.TOKENBUCKET {k} 1E1 5E-1"),
    (
        "RL.TOKENBUCKET {k} 100 0.001",
        "RL.TOKENBUCKET {k} +1e+2 1.0e-3",
    ),
    (
        "RL.TOKENBUCKET {k} 10 0.000011574074074074073",
        "RL.TOKENBUCKET {k} 10 1.1574074074074073e-05",
    ),
    (
        "RL.TOKENBUCKET {k} 10 0.000001",
        "RL.TOKENBUCKET {k} 10 1e-6",
    ),
    (
        "RL.TOKENBUCKET {k} 10 1 COST 3",
        "RL.TOKENBUCKET {k} 10 1 COST 3e0",
    ),
    (
        "RL.TOKENBUCKET {k} 10 1 COST 3",
        "RL.TOKENBUCKET {k} 10 1 COST 3.0",
    ),
    ("RL.LEAKYBUCKET {k} 10 0.01", "RL.LEAKYBUCKET {k} 1e1 1E-2"),
    (
        "RL.SLIDINGCOUNTER {k} 100 3600",
        "RL.SLIDINGCOUNTER {k} 1e2 3.6e3",
    ),
    (
        "RL.SLIDINGCOUNTER {k} 100 1h PRECISION 10",
        "RL.SLIDINGCOUNTER {k} 100 1e0h PRECISION 1e1",
    ),
    (
        "RL.FIXEDWINDOW {k} 10 3600000ms",
        "RL.FIXEDWINDOW {k} 10 3.6e6ms",
    ),
    ("RL.SLIDINGLOG {k} 100 15s", "RL.SLIDINGLOG {k} 1E2 1.5e1s"),
    ("RL.GCRA {k} 0 1000 60", "RL.GCRA {k} 0.0 1e3 6e1"),
    ("RL.GCRA {k} 5 10 1h", "RL.GCRA {k} 5e0 1e1 1e0h"),
    (
        "CL.THROTTLE {k} 15 30 60 1",
        "CL.THROTTLE {k} 1.5e1 3e1 6e1 1e0",
    ),
    (
        "RL.TOKENBUCKET {k} 10 1 BLOCK 100",
        "RL.TOKENBUCKET {k} 10 1 BLOCK 1e2",
    ),
    (
        "RL.FIXEDWINDOW {k} 1 1h PENALTY 10",
        "RL.FIXEDWINDOW {k} 1 1h PENALTY 1e1",
    ),
    (
        "RL.ALL 2 {k} {k2} TOKENBUCKET 10 0.001 FIXEDWINDOW 10 3600",
        "RL.ALL 2e0 {k} {k2} TOKENBUCKET 1e1 1e-3 FIXEDWINDOW 1E1 3.6e3",
    ),
    (
        "RL.PEEK {k} TOKENBUCKET 10 0.25",
        "RL.PEEK {k} TOKENBUCKET 1e1 2.5e-1",
    ),
    ("RL.ACQUIRE {k} 10 60000ms", "RL.ACQUIRE {k} 1e1 6e4ms"),
];

fn words(call: &str, key: &str) -> Vec<String> {
    call.split(' ')
        .map(|w| {
            w.replace("{k}", &format!("{{{key}}}"))
                .replace("{k2}", &format!("{{{key}}}:2"))
        })
        .collect()
}

/// The reply's decision: allowed, limit, remaining (the times after it and
/// a lease's id depend on when the call ran). The table's rates and windows
/// are slow enough that the moments between two calls change none of
/// these; a token a millisecond, or a window ending between them, would.
fn decision(con: &mut redis::Connection, words: &[String]) -> Vec<String> {
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    match run(con, &refs) {
        Ok(v) => items(&v).iter().take(3).map(text).collect(),
        Err(e) => panic!("{words:?} refused: {e}"),
    }
}

#[test]
fn every_numeric_argument_reads_exponent_forms_as_the_same_number() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (n, (plain, written)) in SAME_CALLS.iter().enumerate() {
        // Twice each, so the second call reads the state the first left.
        let plain_key = format!("plain:{n}");
        let written_key = format!("written:{n}");
        for _ in 0..2 {
            let a = decision(&mut con, &words(plain, &plain_key));
            let b = decision(&mut con, &words(written, &written_key));
            assert_eq!(a, b, "{plain} / {written}");
        }
    }
}

#[test]
fn the_smallest_normal_rate_is_taken_as_it_is_documented() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for rate in ["2.2250738585072014e-308", "2.2250738585072014E-308"] {
        let r = check(&mut con, &["RL.TOKENBUCKET", rate, "10", rate]);
        assert_eq!(&r[..3], &[1, 10, 9], "{rate}");
    }
    // Below it (subnormal) or rounding to 0: refused, as in plain form.
    for rate in ["1.0996080332984074e-308", "1e-400", "0e0", "-1e-3"] {
        assert_eq!(
            error_of(&mut con, &["RL.TOKENBUCKET", "k", "10", rate]),
            "ERR rate must be a number greater than 0, such as 0.5, 1000 or 1e-5",
            "{rate}"
        );
    }
    assert!(!exists(&mut con, "k"));
}

const NOT_A_RATE: &str = "ERR rate must be a number greater than 0, such as 0.5, 1000 or 1e-5";

/// Each refusal and the command that gets it: what is wrong, named.
const REFUSALS: &[(&str, &str)] = &[
    (
        "RL.TOKENBUCKET k 10 inf",
        "ERR rate must be a finite number, not 'inf'",
    ),
    (
        "RL.TOKENBUCKET k 10 -Infinity",
        "ERR rate must be a finite number, not '-Infinity'",
    ),
    (
        "RL.TOKENBUCKET k 10 nan",
        "ERR rate must be a finite number, not 'nan'",
    ),
    (
        "RL.TOKENBUCKET k 10 1e400",
        "ERR rate must be a finite number, not '1e400'",
    ),
    (
        "RL.TOKENBUCKET k NaN 1",
        "ERR capacity must be a finite number, not 'NaN'",
    ),
    (
        "RL.LEAKYBUCKET k 10 INF",
        "ERR rate must be a finite number, not 'INF'",
    ),
    (
        "RL.SLIDINGCOUNTER k 10 infs",
        "ERR window must be a finite number, not 'inf'",
    ),
    (
        "RL.SLIDINGCOUNTER k 10 1s PRECISION nan",
        "ERR PRECISION must be a finite number, not 'nan'",
    ),
    (
        "RL.FIXEDWINDOW k 10 nanms",
        "ERR window must be a finite number, not 'nan'",
    ),
    (
        "RL.SLIDINGLOG k inf 1s",
        "ERR limit must be a finite number, not 'inf'",
    ),
    (
        "RL.GCRA k inf 10 1s",
        "ERR burst must be a finite number, not 'inf'",
    ),
    (
        "RL.GCRA k 0 10 nan",
        "ERR period must be a finite number, not 'nan'",
    ),
    (
        "RL.TOKENBUCKET k 10 1 COST inf",
        "ERR COST must be a finite number, not 'inf'",
    ),
    (
        "RL.TOKENBUCKET k 10 1 BLOCK nan",
        "ERR BLOCK must be a finite number, not 'nan'",
    ),
    (
        "RL.TOKENBUCKET k 10 1 PENALTY inf",
        "ERR PENALTY must be a finite number, not 'inf'",
    ),
    (
        "RL.ACQUIRE k 10 infms",
        "ERR lease must be a finite number, not 'inf'",
    ),
    (
        "CL.THROTTLE k nan 10 60",
        "ERR max_burst must be a finite number, not 'nan'",
    ),
    (
        "RL.ALL inf k TOKENBUCKET 10 1",
        "ERR numkeys must be a finite number, not 'inf'",
    ),
    ("RL.TOP nan", "ERR count must be a finite number, not 'nan'"),
    // Whole-number arguments: a fraction is refused, in any form.
    (
        "RL.TOKENBUCKET k 1.5e0 1",
        "ERR capacity must be an integer from 1 to 9007199254740991",
    ),
    (
        "RL.TOKENBUCKET k 10 1 COST 25e-1",
        "ERR COST must be an integer from 1 to 9007199254740991",
    ),
    (
        "RL.SLIDINGCOUNTER k 10 1s PRECISION 1e4",
        "ERR PRECISION must be an integer from 1 to 1000",
    ),
    // Not decimal: hexadecimal, a bare exponent, an exponent with no digits.
    ("RL.TOKENBUCKET k 10 0x10", NOT_A_RATE),
    ("RL.TOKENBUCKET k 10 e3", NOT_A_RATE),
    ("RL.TOKENBUCKET k 10 1e", NOT_A_RATE),
];

#[test]
fn inf_nan_and_what_is_not_a_number_are_refused_naming_what_is_wrong() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (call, expected) in REFUSALS {
        let words: Vec<&str> = call.split(' ').collect();
        assert_eq!(&error_of(&mut con, &words), expected, "{call}");
    }
    assert_eq!(text(&run(&mut con, &["DBSIZE"]).unwrap()), "0");
}

/// What `RL.INFO` says of a key's rate (RESP2: the server's own text).
fn info_rate(con: &mut redis::Connection, key: &str) -> String {
    let info = run(con, &["RL.INFO", key]).unwrap();
    text(field(&info, "rate_per_s").expect("rate_per_s"))
}

#[test]
fn rl_info_prints_each_rate_in_a_form_the_command_reads_back_as_the_same_rate() {
    let server = Server::start(&[]);
    let mut con = server.connect();
    for (n, rate) in [
        "1.1574074074074073e-05",
        "0.1",
        "0.3",
        "1000.25",
        "1e-6",
        "2.2250738585072014e-308",
        "1.7976931348623157e308",
        "123456789.123456789",
    ]
    .into_iter()
    .enumerate()
    {
        for command in ["RL.TOKENBUCKET", "RL.LEAKYBUCKET"] {
            let key = format!("{command}:{n}");
            check(&mut con, &[command, &key, "10", rate]);
            let printed = info_rate(&mut con, &key);
            // The command reads the printed text back: on another key, the
            // same rate, printed the same.
            let again = format!("{key}:again");
            check(&mut con, &[command, &again, "10", &printed]);
            assert_eq!(info_rate(&mut con, &again), printed, "{command} {rate}");
            // And it is the very double that was sent.
            assert_eq!(
                printed.parse::<f64>().unwrap(),
                rate.parse::<f64>().unwrap(),
                "{command} {rate} -> {printed}"
            );
        }
    }
}
