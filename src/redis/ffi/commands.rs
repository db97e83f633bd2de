//! Registering a command with Redis: its function, flags and keys
//! (`RedisModule_CreateCommand`), then its documentation
//! (`RedisModule_SetCommandInfo`, from the data types of
//! `super::super::command_info`).

use std::ffi::{c_int, CStr, CString};
use std::ptr::{null, null_mut};

use redis_module::raw;

use super::api::rm;
use super::ctx::{Ctx, Handler};
use crate::redis::command_info::{Arg, ArgKind, Doc, KeyPosition, KeySpec};

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

/// Registers `command` (the context is the loading one), then documents it
/// (see [`document`]).
pub fn register(ctx: Ctx<'_>, command: &Command) -> Result<(), String> {
    // SAFETY: `ctx` is the loading context; the name and flags are C
    // strings that Redis copies; the handler is a command's function.
    let status = unsafe {
        rm!(RedisModule_CreateCommand)(
            ctx.raw(),
            command.name.as_ptr(),
            Some(command.handler),
            command.flags.as_ptr(),
            command.keys.0,
            command.keys.1,
            command.keys.2,
        )
    };
    if status != raw::REDISMODULE_OK as c_int {
        return Err(format!("cannot register {:?}", command.name));
    }
    document(ctx, &command.name, &command.doc)
}

/// Hands `doc` to Redis for the command just registered as `name`. A
/// refusal fails the load: the table is the same on every server, so a
/// refusal is a bug in the table that the first test run shows (Redis logs
/// which part it rejects), not something to meet in production; and a
/// module half documented would have Redis check the arity and key flags of
/// some commands and not of others.
fn document(ctx: Ctx<'_>, name: &CString, doc: &Doc) -> Result<(), String> {
    // SAFETY: `ctx` is the loading context; the name is a C string.
    let command = unsafe { rm!(RedisModule_GetCommand)(ctx.raw(), name.as_ptr()) };
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
        // The first key at argument 2; the rest only the command knows.
        KeyPosition::AfterPolicyName => (
            2,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            FindKeys {
                range: Range {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        ),
        KeyPosition::NoKeys => return None,
    };
    let incomplete = if matches!(keys.position, KeyPosition::AfterPolicyName) {
        u64::from(raw::REDISMODULE_CMD_KEY_INCOMPLETE)
    } else {
        0
    };
    Some(raw::RedisModuleCommandKeySpec {
        notes: null(),
        flags: key_spec_flags(keys.flags) | incomplete,
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

/// Redis's key-spec flags for the table's own ([`crate::redis::command_info`]).
fn key_spec_flags(flags: u32) -> u64 {
    use crate::redis::command_info::{ACCESS, DELETE, OW, RO, RW, UPDATE};
    [
        (RO, raw::REDISMODULE_CMD_KEY_RO),
        (RW, raw::REDISMODULE_CMD_KEY_RW),
        (OW, raw::REDISMODULE_CMD_KEY_OW),
        (ACCESS, raw::REDISMODULE_CMD_KEY_ACCESS),
        (UPDATE, raw::REDISMODULE_CMD_KEY_UPDATE),
        (DELETE, raw::REDISMODULE_CMD_KEY_DELETE),
    ]
    .iter()
    .filter(|(ours, _)| flags & ours != 0)
    .fold(0, |all, (_, theirs)| all | u64::from(*theirs))
}
