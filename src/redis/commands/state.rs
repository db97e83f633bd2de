//! The commands about a key's state itself: `RL.SETSTATE` (how replicas and
//! AOF files receive it) and `RL.INFO` (what it holds, for a person).

use super::super::config::expiry_slack_ms;
use super::super::ffi::{command, now_ms, Args, Ctx, KeyName, KeyToken, Status};
use super::super::key::{Key, ReadKey};
use super::super::types::{horizon, stored_tag, Stored};
use super::super::waiters;
use crate::algorithms::concurrency::Leases;
use crate::algorithms::expiry::EXPIRY_TIMES;
use crate::algorithms::penalty::Penalized;
use crate::algorithms::registry::{self, Each, EachState, Listed};
use crate::algorithms::Field;
use crate::error::CommandError;
use crate::parse::options::value_of;
use crate::words::values::whole_in;

command! {
    /// `RL.SETSTATE key state [PXAT ms | KEEPTTL]`: sets `key` to an absolute
    /// state, as encoded by `crate::encoding`. Its expiry: `PXAT`'s, exactly;
    /// none changed with `KEEPTTL` (how AOF rewrite writes a key, Redis adding
    /// the key's own `PEXPIREAT` after it); otherwise in its band after the
    /// state is fresh (`crate::algorithms::expiry::next_expiry`), then replicated with that
    /// expiry as `PXAT`, so a replica sets the very same one. It checks its input
    /// as strictly as any command: a state this module could not have written is
    /// an error, and a key holding anything but that algorithm's type is
    /// WRONGTYPE.
    pub fn set_state_command => set_state_reply;
}

fn set_state_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let result = match (args.key(1), args.bytes(2)) {
        (Some(key_name), Some(blob)) => expiry_option(&args.bytes_from(3)).and_then(|expiry| {
            let unknown = || Err(CommandError::invalid_state("unknown algorithm"));
            let Some((tag, penalized)) = stored_tag(blob) else {
                return unknown();
            };
            let mut set = SetState {
                ctx,
                token,
                key_name,
                blob,
                expiry,
                penalized,
            };
            let done = if penalized {
                registry::on_algorithm_tag(tag, &mut set)
            } else {
                registry::on_tag(tag, &mut set)
            };
            done.unwrap_or_else(unknown)
        }),
        _ => Err(CommandError::Arity),
    };
    match result {
        Ok(()) => ctx.reply_ok(),
        Err(error) => ctx.reply_error(&error),
    }
}

/// What `RL.SETSTATE` does to the key's expiry.
#[derive(Clone, Copy)]
enum Expiry {
    /// Put it in its band after the state is fresh.
    Band,
    /// Set it to this Unix ms.
    At(i64),
    /// Leave it as it is.
    Keep,
}

/// `[PXAT ms | KEEPTTL]`: each at most once, not both, `PXAT` with its
/// time; what is wrong is named (a repeated or conflicting option is not an
/// unknown one).
fn expiry_option(words: &[&[u8]]) -> Result<Expiry, CommandError> {
    let mut expiry: Option<(&str, Expiry)> = None;
    let mut words = words.iter();
    while let Some(word) = words.next() {
        let (name, this) = if word.eq_ignore_ascii_case(b"KEEPTTL") {
            ("KEEPTTL", Expiry::Keep)
        } else if word.eq_ignore_ascii_case(b"PXAT") {
            let ms = whole_in(
                value_of(words.next(), "PXAT")?,
                "PXAT",
                *EXPIRY_TIMES.start()..=*EXPIRY_TIMES.end(),
                "a Unix time in milliseconds from 1 to 2^53",
            )?;
            ("PXAT", Expiry::At(ms))
        } else {
            return Err(CommandError::unknown_option(word));
        };
        match expiry {
            Some((given, _)) if given == name => return Err(CommandError::repeated_option(name)),
            Some((given, _)) => {
                return Err(CommandError::syntax(&format!(
                    "{given} and {name} cannot be given together"
                )))
            }
            None => expiry = Some((name, this)),
        }
    }
    Ok(expiry.map_or(Expiry::Band, |(_, e)| e))
}

/// Sets a key to the state `blob` encodes, of the type its tag names.
struct SetState<'a> {
    ctx: Ctx<'a>,
    /// The command's token, lent to the key.
    token: &'a mut KeyToken,
    key_name: KeyName<'a>,
    blob: &'a [u8],
    expiry: Expiry,
    /// Whether the tag is the penalized form's of the algorithm's.
    penalized: bool,
}

impl Each for SetState<'_> {
    type Out = Result<(), CommandError>;
    fn algorithm<A: Listed>(&mut self) -> Self::Out {
        if self.penalized {
            self.set::<Penalized<A>>()
        } else {
            self.set::<A>()
        }
    }
}

impl EachState for SetState<'_> {
    fn concurrency(&mut self) -> Self::Out {
        self.set::<Leases>()
    }
}

impl SetState<'_> {
    fn set<A: Stored>(&mut self) -> Result<(), CommandError> {
        let state =
            A::decode(self.blob, horizon()).map_err(|e| CommandError::invalid_state(e.0))?;
        let mut key = Key::write(self.token, self.ctx, self.key_name);
        let fresh_at_ms = state.fresh_at_ms();
        key.put(state)?;
        self.ctx.signal_modified(self.key_name);
        let band_at = match self.expiry {
            Expiry::At(ms) => {
                key.expire_at(ms);
                None
            }
            Expiry::Keep => None,
            Expiry::Band => {
                key.settle_expiry(fresh_at_ms, expiry_slack_ms());
                key.expires_at()
            }
        };
        drop(key);
        match band_at {
            Some(at) => self.ctx.replicate_set_state(self.key_name, self.blob, at),
            None => self.ctx.replicate_verbatim(),
        }
        // The key's waiters are decided against the state set, at once: a
        // state put in place of one of its own type removes no key, so
        // nothing else tells them (a sibling's replacement is the module's
        // own write, which tells them nothing either).
        waiters::freed(self.ctx, self.token, self.key_name);
        Ok(())
    }
}

command! {
    /// `RL.INFO key`: what the key holds, for a person: the algorithm, its
    /// parameters as last used, its state as stored, what a request of 1 would
    /// be told now, and the TTL. Null for a missing key.
    pub fn info_command => info_reply;
}

fn info_reply(ctx: Ctx<'_>, token: &mut KeyToken, args: &Args<'_>) -> Status {
    let Some(key_name) = args.key(1).filter(|_| args.len() == 2) else {
        return ctx.reply_error(&CommandError::Arity);
    };
    let key = Key::read(token, ctx, key_name);
    let mut describe = Describe {
        key: &key,
        now_ms: now_ms(),
    };
    match registry::find_state(&mut describe) {
        Some(mut fields) => {
            fields.push(("ttl_ms", Field::Int(key.ttl_ms())));
            ctx.reply_fields(&fields)
        }
        None if key.is_empty() => ctx.reply_null(),
        None => ctx.reply_error(&CommandError::wrong_type()),
    }
}

/// The fields of `RL.INFO` for a key, if it holds an `A`.
#[derive(Clone, Copy)]
struct Describe<'k, 'a> {
    key: &'k ReadKey<'a>,
    now_ms: i64,
}

impl Each for Describe<'_, '_> {
    type Out = Option<Vec<(&'static str, Field)>>;
    fn algorithm<A: Listed>(&mut self) -> Self::Out {
        self.describe::<A>()
            .or_else(|| self.describe::<Penalized<A>>())
    }
}

impl EachState for Describe<'_, '_> {
    fn concurrency(&mut self) -> Self::Out {
        self.describe::<Leases>()
    }
}

impl Describe<'_, '_> {
    fn describe<A: Stored>(&self) -> Option<Vec<(&'static str, Field)>> {
        let state = self.key.get::<A>()?;
        let now = state.peek(self.now_ms);
        let mut fields = vec![("algorithm", Field::Text(A::NAME.as_bytes().to_vec()))];
        fields.extend(state.describe(self.now_ms));
        // A policy stamp's hash, by the policy's name when this node holds it.
        for (name, value) in &mut fields {
            if let (&mut "policy", Field::Text(hash)) = (name, &mut *value) {
                let named = std::str::from_utf8(hash)
                    .ok()
                    .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                    .and_then(|hash| crate::policies::store().name_of(hash));
                if let Some(named) = named {
                    *hash = named;
                }
            }
        }
        fields.push(("remaining", Field::Int(now.remaining as i64)));
        fields.push(("reset_after_ms", Field::Int(now.reset_after_ms)));
        Some(fields)
    }
}
