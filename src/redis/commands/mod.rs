//! Every command of the module, in one table: its name, handler, flags,
//! keys and documentation side by side, so none can be registered without
//! its documentation. The check commands' entries are made from the
//! registry (`crate::algorithms::registry`) and each algorithm's `Syntax`.

mod all;
mod apply;
mod check;
mod leases;
mod params;
mod policy;
mod refund;
mod state;
mod top;

use std::ffi::{CStr, CString};

pub use policy::restate as restate_policies;

use super::command_info::{
    arg, double, integer, key, pure_token, string, Arg, ArgKind, Doc, KeyPosition, KeySpec, ACCESS,
    DELETE, FIRST_RELEASE, OW, RO, RW, UPDATE,
};
use super::engine::Checked;
use super::ffi::{Command, Handler};
use crate::algorithms::registry::{each_algorithm, Each, Listed, NAMES};
use crate::words::syntax::{Kind, Syntax, Word};

/// Flags of a command that decides a request: it may write the key. Not
/// `deny-oom`: at `maxmemory` it still decides, refusing itself only what
/// would take more memory (`super::engine::store::out_of_memory`).
const CHECK: &CStr = c"write fast";

/// A check reads the state, answers from it, and updates it (creating the key
/// on a first allowed request), like `INCR`.
const CHECKED: KeySpec = KeySpec {
    position: KeyPosition::First,
    flags: RW | ACCESS | UPDATE,
};

const CHECKED_KEY: Arg =
    key("The key holding this limit's state (created by the first allowed request).");

// The options every check command takes.
const COST: Arg = integer(
    "cost",
    "How much of the limit this request uses: a whole number from 1 to 2^53-1 (default 1).",
)
.after("COST")
.optional();
const BLOCK: Arg = integer(
    "block",
    "Wait on the server until the request is allowed, at most this many milliseconds (0: no limit); waiters are served in arrival order. Not in MULTI or scripts, where it answers at once.",
)
.after("BLOCK")
.optional();
const PEEK: Arg = pure_token(
    "peek",
    "PEEK",
    "Answer what would happen now, and change nothing: no key created, no state or TTL changed, nothing replicated.",
);
const PENALTY: Arg = string(
    "penalty",
    "A denial locks the key for this duration (e.g. 30s, 15m, 1h): until it ends every request is denied, retry_after_ms counting to its end; a denial during it does not extend it. Not with PEEK or BLOCK.",
)
.after("PENALTY")
.optional();
const SHADOW: Arg = pure_token(
    "shadow",
    "SHADOW",
    "Decide, but never deny: a request that would be denied is answered allowed, takes nothing, and keeps its retry_after_ms (allowed with a wait: would have been denied); counted as _shadow_denied in INFO ratelimit. Not with PEEK or BLOCK.",
);

const UPTO: Arg = pure_token(
    "upto",
    "UPTO",
    "With COST n: grant as much of n as the limit allows now, possibly 0, and reply how much (6th element, granted) and when (7th, granted_at_ms, for RL.REFUND ... AT). A grant of 0 is a denial whose retry_after_ms is the wait for 1. Not with SHADOW.",
);

/// The options every check command and `RL.ALL` take, in that order.
const CHECK_OPTIONS: [Arg; 5] = [COST, PEEK, BLOCK, PENALTY, SHADOW];

/// A command whose one key is its first argument.
fn one_key(name: &str, handler: Handler, flags: &'static CStr, doc: Doc) -> Command {
    Command {
        name: CString::new(name).unwrap_or_default(),
        handler,
        flags,
        keys: (1, 1, 1),
        doc,
    }
}

/// A word of an algorithm's syntax, as `COMMAND DOCS` shows it.
fn documented(word: &Word) -> Arg {
    match word.kind {
        Kind::Integer => integer(word.name, word.summary),
        Kind::Decimal => double(word.name, word.summary),
        Kind::Duration => string(word.name, word.summary),
    }
}

/// `RL.<NAME> key <params> [<own options>] [COST n] [PEEK] [BLOCK ms]
/// [PENALTY duration] [SHADOW]`.
fn check_command<A: Checked>() -> Command {
    let syntax = <A::Params as Syntax>::PARAMS.iter().map(documented);
    let own = <A::Params as Syntax>::OPTIONS
        .iter()
        .map(|o| documented(&o.value).after(o.token).optional());
    let mut args = vec![CHECKED_KEY];
    args.extend(syntax);
    args.extend(own);
    if <A::Params as Syntax>::PARTIAL {
        // `[COST cost] [UPTO] [PEEK] ...`: UPTO goes with COST.
        let (cost, rest) = CHECK_OPTIONS.split_at(1);
        args.extend_from_slice(cost);
        args.push(UPTO);
        args.extend_from_slice(rest);
    } else {
        args.extend(CHECK_OPTIONS);
    }
    one_key(
        &format!("rl.{}", A::NAME),
        check::check_command::<A>,
        CHECK,
        Doc {
            summary: <A::Params as Syntax>::SUMMARY,
            since: FIRST_RELEASE,
            complexity: <A::Params as Syntax>::COMPLEXITY,
            keys: CHECKED,
            args,
        },
    )
}

/// One check command per algorithm, in registry order.
fn check_commands() -> Vec<Command> {
    each_algorithm(&mut CheckCommand)
}

/// [`check_commands`].
struct CheckCommand;

impl Each for CheckCommand {
    type Out = Command;
    fn algorithm<A: Listed>(&mut self) -> Command {
        check_command::<A>()
    }
}

/// Every command of the module, documented.
pub fn table() -> Vec<Command> {
    let mut table = check_commands();
    table.extend([
        one_key(
            "cl.throttle",
            check::cl_throttle_command,
            CHECK,
            Doc {
                summary: "redis-cell's command on GCRA state: its arguments and its reply [limited, limit, remaining, retry_after_s, reset_after_s] (seconds rounded up; retry_after_s -1 when allowed).",
                since: FIRST_RELEASE,
                complexity: "O(1)",
                keys: CHECKED,
                args: vec![
                    CHECKED_KEY,
                    integer("max_burst", "Requests allowed at once beyond the steady rate (the limit is max_burst + 1): a whole number from 0."),
                    integer("count", "Requests allowed per period: a whole number from 1."),
                    integer("period", "The period, in whole seconds, from 1."),
                    integer("quantity", "How much of the limit this request uses (default 1; 0 looks without taking).").optional(),
                ],
            },
        ),
        one_key(
            "rl.peek",
            check::peek_command,
            c"readonly fast",
            Doc {
                summary: "What a check would answer now, changing nothing: the algorithm's name without RL. and its parameters, as an RL.ALL spec. Read-only, so read-only replicas and EVAL_RO scripts answer it. Replies as the check command does with PEEK.",
                since: FIRST_RELEASE,
                complexity: "The complexity of the algorithm's check",
                keys: KeySpec {
                    position: KeyPosition::First,
                    flags: RO | ACCESS,
                },
                args: vec![
                    key("The key holding the limit's state."),
                    arg("spec", ArgKind::String, "The algorithm's name without RL. (TOKENBUCKET, SLIDINGCOUNTER, ...), then its command's parameters and own options, e.g. TOKENBUCKET 10 1.").multiple(),
                    COST,
                    UPTO,
                ],
            },
        ),
        one_key(
            "rl.setstate",
            state::set_state_command,
            c"write deny-oom",
            Doc {
                summary: "Sets a key to a rate-limit state as this module encodes it: what replicas and the AOF receive in place of a check.",
                since: FIRST_RELEASE,
                complexity: "O(N) where N is the size of the state",
                keys: KeySpec {
                    position: KeyPosition::First,
                    flags: OW | UPDATE,
                },
                args: vec![
                    key("The key to set."),
                    string("state", "The state bytes, as this module writes them to replicas and the AOF."),
                    integer("pxat", "Its expiry, a Unix time in milliseconds (default: in its band after the state is fresh, as the checks set it).").after("PXAT").optional(),
                    pure_token("keepttl", "KEEPTTL", "Leave the key's expiry as it is (how AOF rewrite writes a key, Redis's PEXPIREAT following it).").optional(),
                ],
            },
        ),
        one_key(
            "rl.apply",
            apply::apply_command,
            c"write",
            Doc {
                summary: "A replay: how replicas and AOF files receive what a command on one key changed (that command, with the primary's time and settings pinned in a header glued to its first word after the key). Only a primary or an AOF file may send it.",
                since: FIRST_RELEASE,
                complexity: "The complexity of the command replayed",
                keys: CHECKED,
                args: vec![
                    key("The key the command replayed changed."),
                    string("word", "The header, then the replayed command's words after the key.").multiple(),
                ],
            },
        ),
        one_key(
            "rl.acquire",
            leases::acquire_command,
            CHECK,
            Doc {
                summary: "Concurrency limit: takes one of limit slots for at most lease (a crashed client's slot comes back when its lease ends). Replies [acquired, limit, remaining, retry_after_ms, reset_after_ms, id], id nil when refused.",
                since: FIRST_RELEASE,
                complexity: "O(N) where N is the number of leases held on the key",
                keys: CHECKED,
                args: vec![
                    CHECKED_KEY,
                    integer("limit", "The most slots held at once: a whole number from 1 to 2^53-1."),
                    string("lease", "How long the slot is held at most: a decimal with an optional unit ms, s, m, h or d (seconds when none), from 1ms to 366d."),
                    string("id", "The lease's id, 1 to 64 bytes (default: 32 random hex characters); an id holding a live lease renews it without taking a second slot.")
                        .after("ID")
                        .optional(),
                    integer("block", "Wait on the server until a slot is free, at most this many milliseconds (0: no limit); woken by RL.RELEASE or a lease running out, in arrival order.")
                        .after("BLOCK")
                        .optional(),
                ],
            },
        ),
        one_key(
            "rl.release",
            leases::release_command,
            c"write fast",
            Doc {
                summary: "Gives back a slot taken by RL.ACQUIRE (releasing the last one deletes the key). Replies 1 if that id held a live lease, 0 if not.",
                since: FIRST_RELEASE,
                complexity: "O(N) where N is the number of leases held on the key",
                keys: KeySpec {
                    position: KeyPosition::First,
                    flags: RW | DELETE,
                },
                args: vec![
                    key("The key RL.ACQUIRE took the slot from."),
                    string("id", "The lease's id, as RL.ACQUIRE replied it."),
                ],
            },
        ),
        one_key(
            "rl.refund",
            refund::refund_command,
            c"write fast",
            Doc {
                summary: "Gives back quota a grant took and did not spend: amount units go back into the key's token bucket or GCRA (up to a fresh key's), or out of the count of the window or sub-window they were granted in (AT, the grant's granted_at_ms), if it still counts. Never creates a key. Replies the units given back.",
                since: FIRST_RELEASE,
                complexity: "O(1)",
                keys: KeySpec {
                    position: KeyPosition::First,
                    flags: RW | UPDATE,
                },
                args: vec![
                    key("The key the grant was taken from."),
                    arg("spec", ArgKind::String, "The key's algorithm without RL. (TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW or GCRA) and its parameters as the check named them, e.g. TOKENBUCKET 10 1.").multiple(),
                    integer("amount", "The units to give back: a whole number from 1 to 2^53-1."),
                    integer("at", "When the units were granted, in Unix ms: the grant's granted_at_ms (UPTO's 7th element). Required for FIXEDWINDOW and SLIDINGCOUNTER.").after("AT").optional(),
                ],
            },
        ),
        one_key(
            "rl.info",
            state::info_command,
            c"readonly fast",
            Doc {
                summary: "What a rate-limit key holds, for a person: its algorithm, its parameters as last used, its state, remaining and reset_after_ms for a request of 1 now, and its TTL, as field/value pairs (nil for a missing key). Changes nothing.",
                since: FIRST_RELEASE,
                complexity: "O(N) where N is the size of the key's state",
                keys: KeySpec {
                    position: KeyPosition::First,
                    flags: RO | ACCESS,
                },
                args: vec![key("The key to describe.")],
            },
        ),
        Command {
            name: CString::from(c"rl.applyall"),
            handler: apply::apply_all_command,
            flags: c"write getkeys-api",
            keys: (0, 0, 0),
            doc: Doc {
                summary: "A replay of RL.ALL: how replicas and AOF files receive what it changed (RL.ALL's words, with the primary's time and settings pinned in a header glued to numkeys). Only a primary or an AOF file may send it.",
                since: FIRST_RELEASE,
                complexity: "The complexity of the RL.ALL replayed",
                keys: KeySpec {
                    position: KeyPosition::CountedAfterNumkeys,
                    flags: RW | ACCESS | UPDATE,
                },
                args: vec![
                    string("numkeys", "The header, then RL.ALL's numkeys."),
                    key("RL.ALL's keys.").multiple(),
                    string("word", "RL.ALL's specs and options.").multiple(),
                ],
            },
        },
        Command {
            name: CString::from(c"rl.applycheck"),
            handler: apply::apply_check_command,
            flags: c"write getkeys-api",
            keys: (0, 0, 0),
            doc: Doc {
                summary: "A replay of RL.CHECK: how replicas and AOF files receive what it changed (RL.CHECK's words, the policy's definition in place of its name, with the primary's time and settings pinned in a header glued to it). Only a primary or an AOF file may send it.",
                since: FIRST_RELEASE,
                complexity: "The complexity of the RL.CHECK replayed",
                keys: KeySpec {
                    position: KeyPosition::AfterPolicyName,
                    flags: RW | ACCESS | UPDATE,
                },
                args: vec![
                    string("definition", "The header, then the policy's definition (its words, space-separated)."),
                    key("RL.CHECK's keys.").multiple(),
                    string("word", "RL.CHECK's options.").optional().multiple(),
                ],
            },
        },
        // Its keys are counted by `numkeys`: Redis asks the command itself
        // where they are (getkeys-api), for cluster routing and COMMAND GETKEYS.
        Command {
            name: CString::from(c"rl.all"),
            handler: all::all_command,
            flags: c"write getkeys-api",
            keys: (0, 0, 0),
            doc: Doc {
                summary: "Checks several limits at once, all or nothing: one algorithm spec per key, all decided at the same instant; a request any tier denies takes from none. Replies the five integers combined (allowed only if every tier allows), then each tier's own reply.",
                since: FIRST_RELEASE,
                complexity: "O(N) where N is the number of keys, each tier at its own command's complexity",
                keys: KeySpec {
                    position: KeyPosition::CountedAfterNumkeys,
                    flags: RW | ACCESS | UPDATE,
                },
                args: vec![
                    integer("numkeys", "How many keys follow, and so how many specs."),
                    key("One key per tier, in the order of the specs.").multiple(),
                    arg("spec", ArgKind::String, spec_summary()).multiple(),
                ]
                .into_iter()
                .chain(CHECK_OPTIONS)
                .collect(),
            },
        },
    ]);
    table.push(top::command());
    table.extend(policy_commands());
    table
}

/// `RL.POLICY` and `RL.CHECK`.
fn policy_commands() -> [Command; 2] {
    [
        // No key: a policy is module state, not data (like FUNCTION
        // libraries). may-replicate: its changes are propagated (and so
        // paused by CLIENT PAUSE WRITE), while a replica still answers
        // GET, LIST, HISTORY and DIGEST.
        Command {
            name: CString::from(c"rl.policy"),
            handler: policy::policy_command,
            flags: c"may-replicate",
            keys: (0, 0, 0),
            doc: Doc {
                summary: "Named policies: SET name <tier> [<tier> ...] [PENALTY duration] [SHADOW] [ON-CHANGE KEEP] [DRYRUN] defines one (a tier as RL.ALL takes a spec) and replies its version; GET name, LIST, DEL name, HISTORY name (the last 5 versions), ROLLBACK name version (that version current again, as a new version), DIGEST (a hex digest of every policy, equal on nodes holding the same). Held in module memory: not keys, FLUSHALL keeps them; saved in the RDB, propagated to replicas and the AOF.",
                since: FIRST_RELEASE,
                complexity: "O(N) where N is the size of the definitions read or written (LIST and DIGEST: of all policies)",
                keys: super::command_info::NO_KEYS,
                args: vec![
                    string("subcommand", "SET, GET, LIST, DEL, HISTORY, ROLLBACK or DIGEST."),
                    string("arg", "The subcommand's arguments: a policy name (1 to 128 printable ASCII characters, no spaces), then SET's definition or ROLLBACK's version.").optional().multiple(),
                ],
            },
        },
        Command {
            name: CString::from(c"rl.check"),
            handler: policy::check_command,
            // Not `write`: a replica answers `RL.CHECK ... PEEK` (the
            // command itself refuses anything else there, as Redis refuses
            // a write). may-replicate: CLIENT PAUSE WRITE holds it back.
            flags: c"may-replicate getkeys-api",
            keys: (0, 0, 0),
            doc: Doc {
                summary: "Checks keys against a named policy (RL.POLICY): one key per tier of the policy, answered exactly as the inline command with the policy's parameters (one tier: that algorithm's command; several: RL.ALL), the policy's PENALTY and SHADOW applied. An unknown policy is an error naming it, never an allow.",
                since: FIRST_RELEASE,
                complexity: "The complexity of the inline command it stands for",
                keys: KeySpec {
                    position: KeyPosition::AfterPolicyName,
                    flags: RW | ACCESS | UPDATE,
                },
                args: vec![
                    string("policy", "The policy's name."),
                    key("One key per tier of the policy, in the order of its tiers.").multiple(),
                    COST,
                    PEEK,
                    BLOCK,
                ],
            },
        },
    ]
}

/// `RL.ALL`'s spec argument, naming every algorithm of the registry.
fn spec_summary() -> &'static str {
    static SUMMARY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SUMMARY.get_or_init(|| {
        let names: Vec<String> = NAMES
            .iter()
            .map(|name| name.to_ascii_uppercase())
            .collect();
        format!(
            "One per key, in key order: a check command's name without RL. ({}) followed by that command's parameters (a sliding counter's PRECISION n goes in its own spec), e.g. TOKENBUCKET 10 1.",
            names.join(", ")
        )
    })
}
