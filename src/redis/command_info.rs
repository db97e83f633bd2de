//! What `COMMAND DOCS`, `COMMAND INFO` and `COMMAND GETKEYS` say about a
//! command: the data types of its documentation ([`Doc`], written next to
//! each command in the command table, `super::commands`), handed to Redis
//! at load time through `RedisModule_SetCommandInfo` (Redis 7.0+) by
//! `super::ffi::command`.
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

/// The module version that first shipped a command. Fixed per command, unlike
/// the crate version: a command added later says the version it came in.
pub const FIRST_RELEASE: &str = "0.1.0";

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
    /// Keys from argument 2 on, as many as the named policy has tiers
    /// (`RL.CHECK`): declared as the first of them, marked incomplete, so
    /// Redis asks the command itself (getkeys-api) for all of them.
    AfterPolicyName,
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

// Key-spec flags: what a command does to its key's value (bits of this
// table's own; the FFI layer gives Redis its values for them).
pub const RO: u32 = 1;
pub const RW: u32 = 1 << 1;
pub const OW: u32 = 1 << 2;
pub const ACCESS: u32 = 1 << 3;
pub const UPDATE: u32 = 1 << 4;
pub const DELETE: u32 = 1 << 5;
