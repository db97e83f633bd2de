//! What `COMMAND DOCS`, `COMMAND INFO` and `COMMAND GETKEYS` say about a
//! command: the data types of its documentation ([`Doc`], written next to
//! each command in the command table, `super::commands`), and the hand-over
//! to Redis at load time through `RedisModule_SetCommandInfo` (Redis 7.0+).
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

use std::ffi::{c_int, CStr, CString};
use std::ptr::{null, null_mut};

use redis_module::raw;

use super::ffi::{rm, Handler};

/// The module version that first shipped a command. Fixed per command, unlike
/// the crate version: a command added later says the version it came in.
pub const FIRST_RELEASE: &str = "0.1.0";

/// A command as Redis registers it, with its documentation.
pub struct Command {
    /// The name, lower case (`rl.tokenbucket`).
    pub name: CString,
    pub handler: Handler,
    pub flags: &'static CStr,
    /// Redis's `first_key, last_key, key_step` (all 0 when the command
    /// answers keys-position requests itself).
    pub keys: (c_int, c_int, c_int),
    pub doc: Doc,
}

/// The documentation of one command.
pub struct Doc {
    pub summary: &'static str,
    pub since: &'static str,
    /// Time complexity, in Redis's usual `O(...)` words.
    pub complexity: &'static str,
    pub keys: KeySpec,
    /// In call order; the arity is derived from it.
    pub args: Vec<Arg>,
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
    /// No key at all (`RL.TOP`): the command reads module state only.
    NoKeys,
}

/// The key spec of a command that takes no key: it declares none.
pub const NO_KEYS: KeySpec = KeySpec {
    position: KeyPosition::NoKeys,
    flags: 0,
};

/// One argument (or option) of a command.
#[derive(Clone, Copy)]
pub struct Arg {
    /// The placeholder shown in syntax: `capacity` in `key capacity rate`.
    pub name: &'static str,
    pub kind: ArgKind,
    /// The word before the value (`COST` in `[COST cost]`); for a pure token,
    /// the word itself.
    pub token: Option<&'static str>,
    pub summary: &'static str,
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

pub const fn arg(name: &'static str, kind: ArgKind, summary: &'static str) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        summary,
        optional: false,
        multiple: false,
    }
}

pub const fn key(summary: &'static str) -> Arg {
    arg("key", ArgKind::Key, summary)
}

pub const fn integer(name: &'static str, summary: &'static str) -> Arg {
    arg(name, ArgKind::Integer, summary)
}

pub const fn double(name: &'static str, summary: &'static str) -> Arg {
    arg(name, ArgKind::Double, summary)
}

/// Durations are strings to Redis: a decimal with an optional unit.
pub const fn string(name: &'static str, summary: &'static str) -> Arg {
    arg(name, ArgKind::String, summary)
}

/// A one-word option, always optional.
pub const fn pure_token(name: &'static str, token: &'static str, summary: &'static str) -> Arg {
    arg(name, ArgKind::PureToken, summary)
        .after(token)
        .optional()
}

impl Arg {
    pub const fn after(mut self, token: &'static str) -> Self {
        self.token = Some(token);
        self
    }

    pub const fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    pub const fn multiple(mut self) -> Self {
        self.multiple = true;
        self
    }
}

// Key-spec flags: what a command does to its key's value.
pub const RO: u32 = raw::REDISMODULE_CMD_KEY_RO;
pub const RW: u32 = raw::REDISMODULE_CMD_KEY_RW;
pub const OW: u32 = raw::REDISMODULE_CMD_KEY_OW;
pub const ACCESS: u32 = raw::REDISMODULE_CMD_KEY_ACCESS;
pub const UPDATE: u32 = raw::REDISMODULE_CMD_KEY_UPDATE;
pub const DELETE: u32 = raw::REDISMODULE_CMD_KEY_DELETE;

/// Hands `doc` to Redis for the command just registered as `name`. A
/// refusal fails the load: the table is the same on every server, so a
/// refusal is a bug in the table that the first test run shows (Redis logs
/// which part it rejects), not something to meet in production; and a
/// module half documented would have Redis check the arity and key flags of
/// some commands and not of others.
pub fn document(ctx: *mut raw::RedisModuleCtx, name: &CString, doc: &Doc) -> Result<(), String> {
    // SAFETY: `ctx` is the loading context; the name is a C string.
    let command = unsafe { rm!(RedisModule_GetCommand)(ctx, name.as_ptr()) };
    if command.is_null() {
        return Err(format!("cannot find {name:?} to document it"));
    }
    let strings = Strings::default();
    let summary = strings.c(doc.summary);
    let complexity = strings.c(doc.complexity);
    let since = strings.c(doc.since);
    let mut args = CArgs::new(&doc.args, &strings);
    let mut key_specs: Vec<_> = c_key_spec(&doc.keys).into_iter().collect();
    key_specs.push(END_OF_KEY_SPECS);
    let info = raw::RedisModuleCommandInfo {
        version: &INFO_VERSION,
        summary,
        complexity,
        since,
        history: null_mut(),
        tips: null(),
        arity: arity(&doc.args),
        key_specs: key_specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    // SAFETY: `command` is ours, just looked up. Every pointer in `info`
    // is valid for the call: the C strings live in `strings`, `key_specs`
    // and `args` end with the zeroed entries Redis stops at; all live until
    // this function returns. Redis copies what it keeps (strings
    // duplicated, arrays rebuilt) before returning.
    let status = unsafe { rm!(RedisModule_SetCommandInfo)(command, &info) };
    if status != raw::REDISMODULE_OK as c_int {
        // Redis sets errno: EINVAL for info it rejects (its log says which
        // part and why), EEXIST when info was set already.
        let errno = std::io::Error::last_os_error();
        return Err(format!(
            "cannot document {}: {errno} (see the lines above in this log)",
            name.to_string_lossy()
        ));
    }
    Ok(())
}

/// The C strings of one command's documentation, kept until Redis has
/// copied them.
#[derive(Default)]
struct Strings(std::cell::RefCell<Vec<CString>>);

impl Strings {
    /// `text` as a C string that lives as long as `self`.
    fn c(&self, text: &str) -> *const std::ffi::c_char {
        let owned = CString::new(text.replace('\0', "?")).unwrap_or_default();
        // The bytes of a CString do not move when the CString itself does.
        let ptr = owned.as_ptr();
        self.0.borrow_mut().push(owned);
        ptr
    }
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

/// The key spec as Redis reads it; none for a command without keys.
fn c_key_spec(keys: &KeySpec) -> Option<raw::RedisModuleCommandKeySpec> {
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
        KeyPosition::NoKeys => return None,
    };
    Some(raw::RedisModuleCommandKeySpec {
        notes: null(),
        flags: u64::from(keys.flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: BeginSearch {
            index: Index { pos: begin_at },
        },
        find_keys_type,
        fk,
    })
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
    fn new(args: &[Arg], strings: &Strings) -> Self {
        let mut c_args: Vec<_> = args.iter().map(|a| c_arg(a, strings)).collect();
        c_args.push(c_arg_end());
        Self(c_args)
    }

    /// Valid while `self` lives and is not changed.
    fn as_mut_ptr(&mut self) -> *mut raw::RedisModuleCommandArg {
        self.0.as_mut_ptr()
    }
}

fn c_arg(arg: &Arg, strings: &Strings) -> raw::RedisModuleCommandArg {
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
        name: strings.c(arg.name),
        type_,
        // Every command here has at most one key spec: keys refer to it
        // (index 0).
        key_spec_index: if arg.kind == ArgKind::Key { 0 } else { -1 },
        token: arg.token.map_or(null(), |t| strings.c(t)),
        summary: strings.c(arg.summary),
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
