//! What `COMMAND DOCS`, `COMMAND INFO` and `COMMAND GETKEYS` say about each
//! command: a table of data ([`DOCS`]), handed to Redis once at load time by
//! [`document_commands`] through `RedisModule_SetCommandInfo` (Redis 7.0+).
//!
//! Besides documentation for people and tools (`redis-cli` hints, client
//! generators), two parts change what the server does:
//! - the **key spec** says which arguments are keys and what the command
//!   does to them: what `COMMAND GETKEYS(ANDFLAGS)` answers, what ACL key
//!   patterns check, and (from Redis 7.2) what Redis Cluster routes by. It
//!   replaces the `first_key, last_key, key_step` triple given at
//!   registration, which cannot describe `RL.ALL numkeys key [key ...]`.
//!   Redis 7.0 still routes module commands in a cluster by that triple or
//!   by asking the command (`getkeys-api`), which is why `RL.ALL` answers
//!   keys-position requests too;
//! - the **arity** is checked by Redis before our handler runs. It is derived
//!   from the argument list here, so the two cannot disagree.
//!
//! Terms: an *arity* is the word count of a call, the command name included;
//! negative means "at least that many". A *pure token* is an option that is
//! a single word (`PEEK`). A *token* is the word before an option's value
//! (`COST` in `COST 10`).

use std::ffi::{c_int, CStr};
use std::ptr::{null, null_mut};

use redis_module::raw;

use super::api::rm;

/// The module version that first shipped a command. Fixed per command, unlike
/// the crate version: a command added later says the version it came in.
const FIRST_RELEASE: &CStr = c"0.1.0";

/// The documentation of one command.
pub struct CommandDoc {
    /// The name as registered (lower case).
    pub name: &'static CStr,
    pub summary: &'static CStr,
    pub since: &'static CStr,
    /// Time complexity, in Redis's usual `O(...)` words.
    pub complexity: &'static CStr,
    pub keys: KeySpec,
    /// In call order; the arity is derived from it.
    pub args: &'static [Arg],
}

/// Where a command's keys are among its arguments, and what it does to them.
pub struct KeySpec {
    pub position: KeyPosition,
    /// `REDISMODULE_CMD_KEY_*` bits: exactly one of RO/RW/OW/RM, at most one
    /// of INSERT/UPDATE/DELETE (Redis refuses anything else).
    pub flags: u32,
}

pub enum KeyPosition {
    /// Exactly one key: the first argument after the command name.
    First,
    /// `numkeys key [key ...]` right after the command name: argument 1 says
    /// how many keys follow it.
    CountedAfterNumkeys,
}

/// One argument (or option) of a command.
#[derive(Clone, Copy)]
pub struct Arg {
    /// The placeholder shown in syntax: `capacity` in `key capacity rate`.
    pub name: &'static CStr,
    pub kind: ArgKind,
    /// The word before the value (`COST` in `[COST cost]`); for a pure token,
    /// the word itself.
    pub token: Option<&'static CStr>,
    pub summary: &'static CStr,
    pub optional: bool,
    /// May repeat (`key [key ...]`).
    pub multiple: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    Key,
    Integer,
    Double,
    String,
    PureToken,
}

const fn arg(name: &'static CStr, kind: ArgKind, summary: &'static CStr) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        summary,
        optional: false,
        multiple: false,
    }
}

const fn key(summary: &'static CStr) -> Arg {
    arg(c"key", ArgKind::Key, summary)
}

const fn integer(name: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, ArgKind::Integer, summary)
}

const fn double(name: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, ArgKind::Double, summary)
}

/// Durations are strings to Redis: a decimal with an optional unit.
const fn string(name: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, ArgKind::String, summary)
}

/// A one-word option, always optional.
const fn pure_token(name: &'static CStr, token: &'static CStr, summary: &'static CStr) -> Arg {
    arg(name, ArgKind::PureToken, summary)
        .after(token)
        .optional()
}

impl Arg {
    const fn after(mut self, token: &'static CStr) -> Self {
        self.token = Some(token);
        self
    }

    const fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    const fn multiple(mut self) -> Self {
        self.multiple = true;
        self
    }
}

// Key-spec flags: what a command does to its key's value.
const RO: u32 = raw::REDISMODULE_CMD_KEY_RO;
const RW: u32 = raw::REDISMODULE_CMD_KEY_RW;
const OW: u32 = raw::REDISMODULE_CMD_KEY_OW;
const ACCESS: u32 = raw::REDISMODULE_CMD_KEY_ACCESS;
const UPDATE: u32 = raw::REDISMODULE_CMD_KEY_UPDATE;
const DELETE: u32 = raw::REDISMODULE_CMD_KEY_DELETE;

/// A check reads the state, answers from it, and updates it (creating the key
/// on a first allowed request), like `INCR`.
const CHECKED: KeySpec = KeySpec {
    position: KeyPosition::First,
    flags: RW | ACCESS | UPDATE,
};

// The options every check command takes, and the parameters several share.
const COST: Arg = integer(
    c"cost",
    c"How much of the limit this request uses: a whole number from 1 to 2^53-1 (default 1).",
)
.after(c"COST")
.optional();
const PEEK: Arg = pure_token(
    c"peek",
    c"PEEK",
    c"Answer what would happen now, and change nothing: no key created, no state or TTL changed, nothing replicated.",
);
const CHECKED_KEY: Arg =
    key(c"The key holding this limit's state (created by the first allowed request).");
const LIMIT: Arg = integer(
    c"limit",
    c"The most requests allowed in any window: a whole number from 1 to 2^53-1.",
);
const WINDOW: Arg = string(
    c"window",
    c"The window's length: a decimal with an optional unit ms, s, m, h or d (seconds when none: 60, 1.5s, 250ms, 1h), from 1ms to 366d.",
);

/// Every command of the module, documented. Commands not registered on this
/// build are skipped by [`document_commands`].
pub const DOCS: &[CommandDoc] = &[
    CommandDoc {
        name: c"rl.tokenbucket",
        summary: c"Token bucket: takes COST tokens from a bucket that starts with capacity tokens and refills rate tokens a second. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].",
        since: FIRST_RELEASE,
        complexity: c"O(1)",
        keys: CHECKED,
        args: &[
            CHECKED_KEY,
            integer(
                c"capacity",
                c"The most tokens the bucket holds, and so the largest burst: a whole number from 1 to 2^53-1.",
            ),
            double(
                c"rate",
                c"Tokens added a second, continuously: a decimal greater than 0 (0.5, 1000).",
            ),
            COST,
            PEEK,
        ],
    },
    CommandDoc {
        name: c"rl.slidingcounter",
        summary: c"Sliding window counter: at most limit requests in any window, estimated from counters of sub-windows. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].",
        since: FIRST_RELEASE,
        complexity: c"O(P) where P is the PRECISION (1 by default)",
        keys: CHECKED,
        args: &[
            CHECKED_KEY,
            LIMIT,
            WINDOW,
            integer(
                c"precision",
                c"Counters a window is cut into, from 1 (default: the current and the previous window) to 1000; more is closer to exact, at 8 bytes a counter.",
            )
            .after(c"PRECISION")
            .optional(),
            COST,
            PEEK,
        ],
    },
    CommandDoc {
        name: c"rl.fixedwindow",
        summary: c"Fixed window: at most limit requests per window, windows aligned to the Unix epoch. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].",
        since: FIRST_RELEASE,
        complexity: c"O(1)",
        keys: CHECKED,
        args: &[CHECKED_KEY, LIMIT, WINDOW, COST, PEEK],
    },
    CommandDoc {
        name: c"rl.slidinglog",
        summary: c"Sliding log: exactly at most limit requests in any window, remembering when each allowed request happened. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].",
        since: FIRST_RELEASE,
        complexity: c"O(N) where N is the number of requests remembered in the window (at most limit)",
        keys: CHECKED,
        args: &[CHECKED_KEY, LIMIT, WINDOW, COST, PEEK],
    },
    CommandDoc {
        name: c"rl.leakybucket",
        summary: c"Leaky bucket as a queue: a request joins while fewer than capacity are queued; they leave at rate a second. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms] and, when allowed, delay_ms.",
        since: FIRST_RELEASE,
        complexity: c"O(1)",
        keys: CHECKED,
        args: &[
            CHECKED_KEY,
            integer(
                c"capacity",
                c"The most requests the queue holds: a whole number from 1 to 2^53-1.",
            ),
            double(
                c"rate",
                c"Requests leaving the queue a second: a decimal greater than 0 (0.5, 1000).",
            ),
            COST,
            PEEK,
        ],
    },
    CommandDoc {
        name: c"rl.gcra",
        summary: c"GCRA (the leaky bucket as a meter): count requests per period, with bursts of burst beyond the steady rate. Replies [allowed, limit, remaining, retry_after_ms, reset_after_ms].",
        since: FIRST_RELEASE,
        complexity: c"O(1)",
        keys: CHECKED,
        args: &[
            CHECKED_KEY,
            integer(
                c"burst",
                c"Requests allowed at once beyond the steady rate (the limit is burst + 1): a whole number from 0.",
            ),
            integer(
                c"count",
                c"Requests allowed per period: a whole number from 1 to 2^53-1.",
            ),
            string(
                c"period",
                c"The period's length: a decimal with an optional unit ms, s, m, h or d (seconds when none: 60, 1.5s, 250ms, 1h), from 1ms to 366d.",
            ),
            COST,
            PEEK,
        ],
    },
    CommandDoc {
        name: c"cl.throttle",
        summary: c"redis-cell's command on GCRA state: its arguments and its reply [limited, limit, remaining, retry_after_s, reset_after_s] (seconds rounded up; retry_after_s -1 when allowed).",
        since: FIRST_RELEASE,
        complexity: c"O(1)",
        keys: CHECKED,
        args: &[
            CHECKED_KEY,
            integer(
                c"max_burst",
                c"Requests allowed at once beyond the steady rate (the limit is max_burst + 1): a whole number from 0.",
            ),
            integer(
                c"count",
                c"Requests allowed per period: a whole number from 1.",
            ),
            integer(c"period", c"The period, in whole seconds, from 1."),
            integer(
                c"quantity",
                c"How much of the limit this request uses (default 1; 0 looks without taking).",
            )
            .optional(),
        ],
    },
    CommandDoc {
        name: c"rl.setstate",
        summary: c"Sets a key to a rate-limit state as this module encodes it: what replicas and the AOF receive in place of a check.",
        since: FIRST_RELEASE,
        complexity: c"O(N) where N is the size of the state",
        keys: KeySpec {
            position: KeyPosition::First,
            flags: OW | UPDATE,
        },
        args: &[
            key(c"The key to set."),
            string(
                c"state",
                c"The state bytes, as this module writes them to replicas and the AOF.",
            ),
        ],
    },
    CommandDoc {
        name: c"rl.all",
        summary: c"Checks several limits at once, all or nothing: one algorithm spec per key, all decided at the same instant; a request any tier denies takes from none. Replies the five integers combined (allowed only if every tier allows), then each tier's own reply.",
        since: FIRST_RELEASE,
        complexity: c"O(N) where N is the number of keys, each tier at its own command's complexity",
        keys: KeySpec {
            position: KeyPosition::CountedAfterNumkeys,
            flags: RW | ACCESS | UPDATE,
        },
        args: &[
            integer(c"numkeys", c"How many keys follow, and so how many specs."),
            key(c"One key per tier, in the order of the specs.").multiple(),
            string(
                c"spec",
                c"One per key, in key order: a check command's name without RL. (TOKENBUCKET, SLIDINGCOUNTER, FIXEDWINDOW, SLIDINGLOG, LEAKYBUCKET, GCRA) followed by that command's parameters (a sliding counter's PRECISION n goes in its own spec), e.g. TOKENBUCKET 10 1.",
            )
            .multiple(),
            COST,
            PEEK,
        ],
    },
    CommandDoc {
        name: c"rl.acquire",
        summary: c"Concurrency limit: takes one of limit slots for at most lease (a crashed client's slot comes back when its lease ends). Replies [acquired, limit, remaining, retry_after_ms, reset_after_ms, id], id nil when refused.",
        since: FIRST_RELEASE,
        complexity: c"O(N) where N is the number of leases held on the key",
        keys: CHECKED,
        args: &[
            CHECKED_KEY,
            integer(
                c"limit",
                c"The most slots held at once: a whole number from 1 to 2^53-1.",
            ),
            string(
                c"lease",
                c"How long the slot is held at most: a decimal with an optional unit ms, s, m, h or d (seconds when none), from 1ms to 366d.",
            ),
            string(
                c"id",
                c"The lease's id, 1 to 64 bytes (default: 32 random hex characters); an id holding a live lease renews it without taking a second slot.",
            )
            .after(c"ID")
            .optional(),
        ],
    },
    CommandDoc {
        name: c"rl.release",
        summary: c"Gives back a slot taken by RL.ACQUIRE (releasing the last one deletes the key). Replies 1 if that id held a live lease, 0 if not.",
        since: FIRST_RELEASE,
        complexity: c"O(N) where N is the number of leases held on the key",
        keys: KeySpec {
            position: KeyPosition::First,
            flags: RW | DELETE,
        },
        args: &[
            key(c"The key RL.ACQUIRE took the slot from."),
            string(c"id", c"The lease's id, as RL.ACQUIRE replied it."),
        ],
    },
    CommandDoc {
        name: c"rl.info",
        summary: c"What a rate-limit key holds, for a person: its algorithm, its parameters as last used, its state, remaining and reset_after_ms for a request of 1 now, and its TTL, as field/value pairs (nil for a missing key). Changes nothing.",
        since: FIRST_RELEASE,
        complexity: c"O(N) where N is the size of the key's state",
        keys: KeySpec {
            position: KeyPosition::First,
            flags: RO | ACCESS,
        },
        args: &[key(c"The key to describe.")],
    },
];

/// Hands [`DOCS`] to Redis, for every documented command registered on this
/// build. Call once, from the module's load, after the commands are created.
///
/// A refusal fails the load: the table is the same on every server, so a
/// refusal is a bug in the table that the first test run shows (Redis logs
/// which part it rejects), not something to meet in production; and a
/// module half documented would have Redis check the arity and key flags of
/// some commands and not of others.
pub fn document_commands(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    for doc in DOCS {
        // SAFETY: `ctx` is the loading context; the name is a C string.
        let command = unsafe { rm!(RedisModule_GetCommand)(ctx, doc.name.as_ptr()) };
        if command.is_null() {
            continue;
        }
        let mut args = CArgs::new(doc.args);
        let mut key_specs = [c_key_spec(&doc.keys), END_OF_KEY_SPECS];
        let info = raw::RedisModuleCommandInfo {
            version: &INFO_VERSION,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: doc.since.as_ptr(),
            history: null_mut(),
            tips: null(),
            arity: arity(doc.args),
            key_specs: key_specs.as_mut_ptr(),
            args: args.as_mut_ptr(),
        };
        // SAFETY: `command` is ours, just looked up. Every pointer in `info`
        // is valid for the call: C strings are `'static`; `key_specs` and
        // `args` end with the zeroed entries Redis stops at and live until
        // the end of this iteration. Redis copies what it keeps (strings
        // duplicated, arrays rebuilt) before returning.
        let status = unsafe { rm!(RedisModule_SetCommandInfo)(command, &info) };
        if status != raw::REDISMODULE_OK as c_int {
            // Redis sets errno: EINVAL for info it rejects (its log says
            // which part and why), EEXIST when info was set already.
            let errno = std::io::Error::last_os_error();
            return Err(format!(
                "cannot document {}: {errno} (see the lines above in this log)",
                doc.name.to_string_lossy()
            ));
        }
    }
    Ok(())
}

/// `RedisModule_CurrentCommandInfoVersion` of `redismodule.h`: a `static` in
/// the C header, so not a symbol we can link to; written out here. The sizes
/// let an older Redis step through our arrays even where our structs have
/// fields it does not know (it reads only the ones it knows).
static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
};

/// Word count of a call: the name, then the required arguments; negative
/// ("at least") when anything is optional or repeats.
fn arity(args: &[Arg]) -> c_int {
    let required = args.iter().filter(|a| !a.optional).count();
    let exact = 1 + c_int::try_from(required).unwrap_or(c_int::MAX - 1);
    if args.iter().any(|a| a.optional || a.multiple) {
        -exact
    } else {
        exact
    }
}

fn c_key_spec(keys: &KeySpec) -> raw::RedisModuleCommandKeySpec {
    use raw::{
        RedisModuleCommandKeySpec__bindgen_ty_1 as BeginSearch,
        RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 as Index,
        RedisModuleCommandKeySpec__bindgen_ty_2 as FindKeys,
        RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 as Range,
        RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 as KeyNum,
    };
    let (begin_at, find_keys_type, fk) = match keys.position {
        // One key at argument 1: the range from it to itself.
        KeyPosition::First => (
            1,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            FindKeys {
                range: Range {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        ),
        // Search from argument 1 (numkeys); offsets are relative to it.
        KeyPosition::CountedAfterNumkeys => (
            1,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM,
            FindKeys {
                keynum: KeyNum {
                    keynumidx: 0,
                    firstkey: 1,
                    keystep: 1,
                },
            },
        ),
    };
    raw::RedisModuleCommandKeySpec {
        notes: null(),
        flags: u64::from(keys.flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: BeginSearch {
            index: Index { pos: begin_at },
        },
        find_keys_type,
        fk,
    }
}

/// The zeroed entry that ends a key-spec array (`begin_search_type` 0).
const END_OF_KEY_SPECS: raw::RedisModuleCommandKeySpec = raw::RedisModuleCommandKeySpec {
    notes: null(),
    flags: 0,
    begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID,
    bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
        index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 0 },
    },
    find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_OMITTED,
    fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
        range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
            lastkey: 0,
            keystep: 0,
            limit: 0,
        },
    },
};

/// A command's arguments as the C array Redis reads, ended by a zeroed entry
/// (`name` null).
struct CArgs(Vec<raw::RedisModuleCommandArg>);

impl CArgs {
    fn new(args: &[Arg]) -> Self {
        let mut c_args: Vec<_> = args.iter().map(c_arg).collect();
        c_args.push(c_arg_end());
        Self(c_args)
    }

    /// Valid while `self` lives and is not changed.
    fn as_mut_ptr(&mut self) -> *mut raw::RedisModuleCommandArg {
        self.0.as_mut_ptr()
    }
}

fn c_arg(arg: &Arg) -> raw::RedisModuleCommandArg {
    let type_ = match arg.kind {
        ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        ArgKind::Double => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_DOUBLE,
        ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        ArgKind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
    };
    let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
    if arg.optional {
        flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
    }
    if arg.multiple {
        flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
    }
    raw::RedisModuleCommandArg {
        name: arg.name.as_ptr(),
        type_,
        // Every command here has one key spec: keys refer to it (index 0).
        key_spec_index: if arg.kind == ArgKind::Key { 0 } else { -1 },
        token: arg.token.map_or(null(), CStr::as_ptr),
        summary: arg.summary.as_ptr(),
        since: null(),
        flags: flags as c_int,
        deprecated_since: null(),
        subargs: null_mut(),
        display_text: null(),
    }
}

fn c_arg_end() -> raw::RedisModuleCommandArg {
    raw::RedisModuleCommandArg {
        name: null(),
        type_: 0,
        key_spec_index: 0,
        token: null(),
        summary: null(),
        since: null(),
        flags: 0,
        deprecated_since: null(),
        subargs: null_mut(),
        display_text: null(),
    }
}
