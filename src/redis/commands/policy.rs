//! Named policies: `RL.POLICY SET|GET|LIST|DEL|HISTORY|ROLLBACK|DIGEST`
//! over the module's store (`crate::policies`), its internal `LOAD` (how
//! replicas and AOF files receive a change), and `RL.CHECK policy key
//! [key ...] [COST n] [PEEK] [BLOCK ms]`, which checks the keys as the
//! inline command with the policy's parameters would: the same request,
//! decided, waiting, replicated and answered by the same code, so its
//! replies and its replays are the inline command's.

use std::sync::Arc;

use super::super::ffi::args::OwnedArgs;
use super::super::ffi::main_thread::MainThreadCell;
use super::super::ffi::{command, writes_paused, Args, Ctx, KeyName, KeyToken, Status, Words};
use super::super::replicate::Run;
use super::super::request::{counter_of, Request};
use super::super::respond::{respond, respond_by_name, Plain};
use super::super::waiters;
use crate::algorithms::penalty::Stamp;
use crate::error::{shown, CommandError};
use crate::parse::policy::{definition, name, version, Definition};
use crate::policies::{self, no_policy, split_replayed, store, wrong_keys, Changed, Counters};
use crate::replay::Command;
use crate::words::same_bytes;

command! {
    /// `RL.POLICY <subcommand> ...`.
    pub fn policy_command => policy_reply;
}

fn policy_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let words = args.bytes_from(1);
    let Some((sub, rest)) = words.split_first() else {
        return ctx.reply_error(&CommandError::Arity);
    };
    let sub = sub.to_ascii_uppercase();
    let result = match &sub[..] {
        b"SET" => changing(ctx).and_then(|()| set(ctx, rest)),
        b"DEL" => changing(ctx).and_then(|()| del(ctx, args, rest)),
        b"ROLLBACK" => changing(ctx).and_then(|()| rollback(ctx, rest)),
        b"LOAD" => load(ctx, args, rest),
        b"GET" => get(ctx, rest),
        b"LIST" => list(ctx, rest),
        b"HISTORY" => history(ctx, rest),
        b"DIGEST" => match rest {
            [] => Ok(ctx.reply_bytes(store().digest().as_bytes())),
            _ => Err(CommandError::Arity),
        },
        _ => Err(CommandError::syntax(&format!(
            "unknown subcommand '{}' (expected SET, GET, LIST, DEL, HISTORY, ROLLBACK or DIGEST)",
            shown(&sub)
        ))),
    };
    if result.is_ok() && matches!(&sub[..], b"SET" | b"DEL" | b"ROLLBACK") {
        // Clients waiting on a check by name are decided under the policy
        // as it stands now: at once, not at the turn the old one gave them.
        waiters::all_changed(ctx, token, None);
    }
    match result {
        Ok(status) => status,
        Err(error) => ctx.reply_error(&error),
    }
}

/// A change from a client: refused on a replica (its policies are its
/// primary's), and while writes are paused (a change is propagated, which
/// Redis forbids then).
fn changing(ctx: Ctx<'_>) -> Result<(), CommandError> {
    if ctx.sent_by_primary_or_aof() {
        return Ok(());
    }
    if ctx.is_replica() {
        return Err(CommandError::Reply(
            "READONLY You can't write against a read only replica.".into(),
        ));
    }
    if writes_paused() {
        return Err(CommandError::Reply(
            "ERR writes are paused (CLIENT PAUSE): try the policy change again after the pause"
                .into(),
        ));
    }
    Ok(())
}

fn one_name<'a>(rest: &[&'a [u8]]) -> Result<&'a [u8], CommandError> {
    match rest {
        [policy] => name(policy),
        _ => Err(CommandError::Arity),
    }
}

/// `SET name <definition> [DRYRUN]`: replies the version after the call.
fn set(ctx: Ctx<'_>, rest: &[&[u8]]) -> Result<Status, CommandError> {
    let [policy, words @ ..] = rest else {
        return Err(CommandError::Arity);
    };
    let policy = name(policy)?;
    let (definition, dryrun) = definition(words)?;
    let mut store = store();
    if dryrun {
        return Ok(ctx.reply_integer(store.would_be(policy, &definition).version() as i64));
    }
    let changed = store.set(policy, definition);
    if let Changed::To(version) = changed {
        if let Some(current) = store.get(policy).and_then(|p| p.current()) {
            propagate_load(ctx, policy, version, &current.words);
        }
    }
    Ok(ctx.reply_integer(changed.version() as i64))
}

/// `ROLLBACK name version`: that kept version's definition, current again
/// as a new version.
fn rollback(ctx: Ctx<'_>, rest: &[&[u8]]) -> Result<Status, CommandError> {
    let [policy, wanted] = rest else {
        return Err(CommandError::Arity);
    };
    let policy = name(policy)?;
    let wanted = version(wanted)?;
    let mut store = store();
    let Some(current) = store.get(policy).map(|p| p.version()) else {
        return Err(no_policy(policy));
    };
    let Some(definition) = store.kept(policy, wanted) else {
        return Err(CommandError::Reply(
            format!(
                "ERR policy '{}' keeps no version {wanted} (see RL.POLICY HISTORY)",
                shown(policy)
            )
            .into(),
        ));
    };
    let version = current + 1;
    store.load(policy, version, definition);
    if let Some(current) = store.get(policy).and_then(|p| p.current()) {
        propagate_load(ctx, policy, version, &current.words);
    }
    Ok(ctx.reply_integer(version as i64))
}

/// `DEL name`: 1 if it was there.
fn del(ctx: Ctx<'_>, _args: &Args<'_>, rest: &[&[u8]]) -> Result<Status, CommandError> {
    let policy = one_name(rest)?;
    let deleted = store().delete(policy);
    if deleted {
        ctx.replicate_verbatim();
    }
    Ok(ctx.reply_integer(i64::from(deleted)))
}

/// `LOAD name version <definition>`: a change as the primary made it (a
/// replica's, an AOF file's); a version not above the policy's current one
/// changes nothing.
fn load(ctx: Ctx<'_>, _args: &Args<'_>, rest: &[&[u8]]) -> Result<Status, CommandError> {
    if !ctx.sent_by_primary_or_aof() {
        return Err(CommandError::internal_command());
    }
    let [policy, at, words @ ..] = rest else {
        return Err(CommandError::Arity);
    };
    let policy = name(policy)?;
    let at = version(at)?;
    let (definition, _) = definition(words)?;
    let mut store = store();
    // Versions only increase: a version at or below the current one is
    // held already (an AOF file's restatement after its rewritten base, a
    // replica's copy of it).
    let newer = store.get(policy).is_none_or(|p| at > p.version());
    if newer {
        store.load(policy, at, definition);
    }
    ctx.replicate_verbatim();
    Ok(ctx.reply_ok())
}

/// Propagates a change as its effect: `RL.POLICY LOAD name version words`.
fn propagate_load(ctx: Ctx<'_>, policy: &[u8], version: u64, words: &[Vec<u8>]) {
    let version = version.to_string();
    let head: [&[u8]; 3] = [b"LOAD", policy, version.as_bytes()];
    let words = head.into_iter().chain(words.iter().map(Vec::as_slice));
    super::super::ffi::replicate::replicate_words(ctx, c"RL.POLICY", words);
}

/// `GET name`: [name, version, [definition words]], nil if none.
fn get(ctx: Ctx<'_>, rest: &[&[u8]]) -> Result<Status, CommandError> {
    let policy = one_name(rest)?;
    let store = store();
    let Some(current) = store.get(policy).and_then(|p| p.current()) else {
        return Ok(ctx.reply_null());
    };
    ctx.reply_array(3);
    ctx.reply_bytes(policy);
    ctx.reply_integer(current.version as i64);
    reply_words(ctx, &current.words);
    Ok(Status)
}

fn reply_words(ctx: Ctx<'_>, words: &[Vec<u8>]) {
    ctx.reply_array(words.len());
    for word in words {
        ctx.reply_bytes(word);
    }
}

/// `LIST`: [[name, version], ...] sorted by name.
fn list(ctx: Ctx<'_>, rest: &[&[u8]]) -> Result<Status, CommandError> {
    if !rest.is_empty() {
        return Err(CommandError::Arity);
    }
    let store = store();
    ctx.reply_array(store.len());
    for (policy, held) in store.iter() {
        ctx.reply_array(2);
        ctx.reply_bytes(policy);
        ctx.reply_integer(held.version() as i64);
    }
    Ok(Status)
}

/// `HISTORY name`: the kept versions, newest first, each [version, words].
fn history(ctx: Ctx<'_>, rest: &[&[u8]]) -> Result<Status, CommandError> {
    let policy = one_name(rest)?;
    let store = store();
    let Some(held) = store.get(policy) else {
        return Ok(ctx.reply_null());
    };
    let kept: Vec<_> = held.history().collect();
    ctx.reply_array(kept.len());
    for version in kept {
        ctx.reply_array(2);
        ctx.reply_integer(version.version as i64);
        reply_words(ctx, &version.words);
    }
    Ok(Status)
}

command! {
    /// `RL.CHECK policy key [key ...] [COST n] [PEEK] [BLOCK ms]`.
    pub fn check_command => check_reply;
}

/// The number of tiers of the policy `args` names (its keys), if it exists.
fn tiers_of(args: &Args<'_>) -> Option<usize> {
    let policy = args.bytes(1)?;
    let store = store();
    Some(store.get(policy)?.current()?.definition.tiers.len())
}

fn check_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    if ctx.is_keys_position_request() {
        // The policy's tiers say how many keys follow its name; a policy
        // this node does not hold has its first key declared (the command
        // then says there is no such policy).
        let n = tiers_of(args).unwrap_or(1);
        for position in 2..2 + n {
            ctx.key_at_pos(args, position);
        }
        return Status;
    }
    match checked(ctx, token, args) {
        Ok(status) => status,
        Err(error) => ctx.reply_error(&error),
    }
}

/// What a check by name takes of its policy: the current version's
/// definition, its replayed words and stamp, and the policy's counters,
/// taken together, so a change made after this is not half seen.
#[derive(Clone)]
struct Current {
    definition: Arc<Definition>,
    replayed: Arc<Vec<u8>>,
    counters: Arc<Counters>,
    stamp: Stamp,
}

/// The policy a check by name took last, by name, while no policy has
/// changed since (`crate::policies::changes`): a check of the same policy
/// again (the usual traffic) takes it from here, without the store's lock
/// and its search by name (about 100 instructions of a check's ~4,900).
struct Memo {
    changes: u64,
    name: Vec<u8>,
    current: Option<Current>,
}

static MEMO: MainThreadCell<Memo> = MainThreadCell::new(Memo {
    changes: 0,
    name: Vec::new(),
    current: None,
});

impl Memo {
    /// The current version of `policy`, if it exists: the memo's, unless
    /// it is of another policy or a policy changed since it was taken.
    #[inline(always)]
    fn current(&mut self, policy: &[u8]) -> Option<&Current> {
        let changes = policies::changes();
        if self.changes != changes || self.current.is_none() || !same_bytes(&self.name, policy) {
            self.take_anew(policy, changes);
        }
        self.current.as_ref()
    }

    #[cold]
    #[inline(never)]
    fn take_anew(&mut self, policy: &[u8], changes: u64) {
        self.changes = changes;
        self.name.clear();
        self.name.extend_from_slice(policy);
        self.current = looked_up(policy);
    }
}

/// The current version of `policy` in the store, if it exists.
fn looked_up(policy: &[u8]) -> Option<Current> {
    let store = store();
    let held = store.get(policy)?;
    let current = held.current()?;
    Some(Current {
        definition: Arc::clone(&current.definition),
        replayed: Arc::clone(&current.replayed),
        counters: Arc::clone(&held.counters),
        stamp: current.stamp,
    })
}

/// `RL.CHECK`, decided under its policy's current version as the memo
/// lends it (see [`Memo`]); were the memo lent already (nothing a check
/// runs checks by name), as the store holds it.
fn checked(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Result<Status, CommandError> {
    let policy = args.bytes(1).ok_or(CommandError::Arity)?;
    MEMO.with(ctx, |memo| match memo.current(policy) {
        Some(current) => checked_under(ctx, token, args, policy, current),
        None => Err(no_policy(policy)),
    })
    .unwrap_or_else(|| match looked_up(policy) {
        Some(current) => checked_under(ctx, token, args, policy, &current),
        None => Err(no_policy(policy)),
    })
}

#[inline(always)]
fn checked_under(
    ctx: Ctx<'_>,
    token: &mut KeyToken,
    args: &Args<'_>,
    policy: &[u8],
    current: &Current,
) -> Result<Status, CommandError> {
    let Current {
        definition,
        replayed,
        counters,
        stamp,
    } = current;
    let stamp = *stamp;
    let n = definition.tiers.len();
    if args.len() < 2 + n {
        return Err(wrong_keys(policy, n));
    }
    // One tier (the usual policy): its key on the stack, no allocation.
    let one: [KeyName<'_>; 1];
    let many: Vec<KeyName<'_>>;
    let keys: &[KeyName<'_>] = match (n, args.key(2)) {
        (1, Some(key)) => {
            one = [key];
            &one
        }
        _ => {
            many = (2..2 + n).filter_map(|i| args.key(i)).collect();
            &many
        }
    };
    // Filled where it stays (`bytes_from` would return the whole inline
    // array by value: a copy of ~220 bytes on every check).
    let mut words = Words::none();
    args.fill_from(2 + n, &mut words);
    let options = Request::policy_options(definition, &words).map_err(|error| {
        // A word that is no option may be a key too many.
        if error.text().starts_with("ERR syntax error: unknown option") {
            wrong_keys(policy, n)
        } else {
            error
        }
    })?;
    if !options.peek && ctx.is_replica() && !ctx.sent_by_primary_or_aof() {
        return Err(CommandError::Reply(
            "READONLY You can't write against a read only replica.".into(),
        ));
    }
    let run = Run::live_glued(ctx, Command::Policy, 1, replayed);
    // The usual check, plain (no PEEK, BLOCK or UPTO, no waiter before it)
    // of one tier under a stamped policy: its straight path, unless its key
    // needs the migration step first.
    if let ([tier], &[key], false) = (definition.tiers.as_slice(), keys, stamp.is_none()) {
        if let Some(plain) = Plain::of(ctx, key, &options, counter_of(tier)) {
            if let Some(status) =
                respond_by_name(&run, token, args, key, tier, stamp, plain, counters)
            {
                return Ok(status);
            }
        }
    }
    // A check that waits keeps its command as words, for its replay when
    // it is served: RL.CHECK's, the definition in place of the name.
    let mut waiting = options.block_ms.is_some().then(|| {
        let all = (0..args.len()).filter_map(|i| args.bytes(i));
        OwnedArgs::new(
            all.enumerate()
                .map(|(i, word)| if i == 1 { &replayed[..] } else { word }),
        )
    });
    let waiting_args = waiting.as_mut().map(OwnedArgs::args);
    let request = Request::Policy {
        definition: Arc::clone(definition),
        options,
        counters: Arc::clone(counters),
        stamp,
    };
    Ok(respond(
        &run,
        token,
        waiting_args.as_ref().unwrap_or(args),
        request,
        keys,
    ))
}

/// The stamp and definition a replay carries (see
/// `crate::policies::replayed_word`).
pub(super) fn replayed_definition(word: &[u8]) -> Result<(Stamp, Definition), CommandError> {
    let (stamp, word) = split_replayed(word).map_err(|e| CommandError::invalid_state(e.0))?;
    let words: Vec<&[u8]> = word.split(|&b| b == b' ').collect();
    match definition(&words)? {
        (definition, false) => Ok((stamp, definition)),
        (_, true) => Err(CommandError::invalid_state(
            "a replayed policy has no DRYRUN",
        )),
    }
}

/// Restates every policy, each kept version oldest first, as `LOAD`s
/// (called right after a fork, in the parent). Under `aof-use-rdb-preamble
/// no`, Redis 7.0 rewrites the AOF as commands made from keys only (module
/// aux data is written to RDB files alone): the rewritten base holds no
/// policy. A rewrite opens its new incremental file before it forks, so the
/// `LOAD`s propagated now land right after that base, and a restart from
/// base and increment holds every policy. Where they reach a server holding
/// the policies already (a replica, a replay after an RDB preamble), they
/// change nothing. Not while writes are paused: Redis forbids propagating
/// then (`docs/operations.md#policies` says what that leaves).
pub fn restate(ctx: Ctx<'_>) {
    if !ctx.aof_on() || writes_paused() {
        return;
    }
    let store = store();
    for (policy, held) in store.iter() {
        let kept: Vec<_> = held.history().collect();
        for version in kept.into_iter().rev() {
            propagate_load(ctx, policy, version.version, &version.words);
        }
    }
}
