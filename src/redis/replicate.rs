//! How what a command changed reaches replicas and the AOF: as its replay
//! (`crate::replay`), the command itself with the primary's time and
//! settings pinned, whatever the size of the state it changed.
//!
//! A client's command is propagated by the cheapest route Redis 7.0 offers a
//! module (`super::ffi::replicate::replicate_swapped`): its own argument
//! vector, two entries swapped for the length of the call: the command's
//! name for `RL.APPLY` (or `RL.APPLYALL`), and one word for the header glued
//! to it. `RedisModule_Replicate` would build the same command from scratch,
//! but it looks the command up by name on every call (about 1,400
//! instructions, more than the check itself).

use std::cell::Cell;
use std::ffi::CStr;

use super::config::expiry_slack_ms;
use super::ffi::replicate::{replicate_swapped, replicate_words, KeptString};
use super::ffi::{now_ms, Args, Ctx};
use crate::replay::{fixed_header, Command, Header, FIXED_LEN};

/// The names replays are propagated under, made once at load time and never
/// freed (Redis's propagation takes and drops references of its own), with
/// the words they are made of.
static APPLY: KeptString = KeptString::new();
static APPLY_ALL: KeptString = KeptString::new();
static APPLY_CHECK: KeptString = KeptString::new();
const NAMES: [(&KeptString, &CStr); 3] = [
    (&APPLY, c"RL.APPLY"),
    (&APPLY_ALL, c"RL.APPLYALL"),
    (&APPLY_CHECK, c"RL.APPLYCHECK"),
];

/// Makes the command names replays are propagated under.
pub fn init() {
    for (string, name) in NAMES {
        string.make(name.to_bytes());
    }
}

/// The command a replay of `command` is propagated under: `RL.APPLYALL`
/// for `RL.ALL`, `RL.APPLYCHECK` for a check by a policy's name,
/// `RL.APPLY` for the rest (its string, and its name).
#[inline(always)]
fn replay_name(command: Command) -> (&'static KeptString, &'static CStr) {
    match command {
        Command::All => NAMES[1],
        Command::Policy => NAMES[2],
        _ => NAMES[0],
    }
}

/// Where the running command comes from.
enum Origin<'a> {
    /// A client's command: decided now, on this server's clock and settings,
    /// counted, and propagated as a replay with its header glued to the
    /// argument at `glue_at` (or to `glue_word`, which then takes that
    /// argument's place: `RL.CHECK`'s definition for its policy's name).
    Client {
        command: Command,
        glue_at: usize,
        glue_word: Option<&'a [u8]>,
    },
    /// A client's command that waited (`BLOCK`) and is served now, outside
    /// the command: `words` are the command as sent, propagated as a replay
    /// built from them.
    Woken {
        command: Command,
        glue_at: usize,
        words: &'a [Vec<u8>],
    },
    /// A replay, from the primary or the AOF: run on the clock and settings
    /// it pins, and propagated as it is (to this server's own AOF).
    Replay,
}

/// How a command runs: its clock and settings, and what it changed.
pub struct Run<'a> {
    pub ctx: Ctx<'a>,
    pub now_ms: i64,
    pub expiry_slack_ms: u32,
    origin: Origin<'a>,
    changed: Cell<bool>,
}

impl<'a> Run<'a> {
    /// A client's `command`, whose replay carries its header on the argument
    /// at `glue_at` (the word after the key; `numkeys` for `RL.ALL`).
    pub fn live(ctx: Ctx<'a>, command: Command, glue_at: usize) -> Self {
        Self {
            ctx,
            now_ms: now_ms(),
            expiry_slack_ms: expiry_slack_ms(),
            origin: Origin::Client {
                command,
                glue_at,
                glue_word: None,
            },
            changed: Cell::new(false),
        }
    }

    /// A client's `command` whose replay carries, in place of the argument
    /// at `glue_at`, its header glued to `word`.
    pub fn live_glued(ctx: Ctx<'a>, command: Command, glue_at: usize, word: &'a [u8]) -> Self {
        Self {
            ctx,
            now_ms: now_ms(),
            expiry_slack_ms: expiry_slack_ms(),
            origin: Origin::Client {
                command,
                glue_at,
                glue_word: Some(word),
            },
            changed: Cell::new(false),
        }
    }

    /// A waiting client's `command`, as sent (`words`), served now.
    pub fn woken(ctx: Ctx<'a>, command: Command, glue_at: usize, words: &'a [Vec<u8>]) -> Self {
        Self {
            ctx,
            now_ms: now_ms(),
            expiry_slack_ms: expiry_slack_ms(),
            origin: Origin::Woken {
                command,
                glue_at,
                words,
            },
            changed: Cell::new(false),
        }
    }

    /// A replay of what `header` pins.
    pub fn replay(ctx: Ctx<'a>, header: &Header) -> Self {
        Self {
            ctx,
            now_ms: header.now_ms,
            expiry_slack_ms: header.expiry_slack_ms,
            origin: Origin::Replay,
            changed: Cell::new(false),
        }
    }

    /// Whether this runs a replay (nothing is counted or announced then:
    /// the primary did that).
    pub fn is_replay(&self) -> bool {
        matches!(self.origin, Origin::Replay)
    }

    /// Notes that the command changed a key, so that it is propagated.
    pub fn changed(&self) {
        self.changed.set(true);
    }

    /// [`Run::propagate`] of a check command's or `CL.THROTTLE`'s plain
    /// request (`super::respond::respond_plain`), inlined into it: a
    /// client's command, its header glued to the argument the parser read
    /// first, no drawn id. Any other run goes the general way.
    #[inline(always)]
    pub fn propagate_check(&self, args: &Args<'_>) {
        if !self.changed.get() {
            return;
        }
        if let Origin::Client {
            command: command @ (Command::Check(_) | Command::ClThrottle),
            glue_at,
            glue_word: None,
        } = self.origin
        {
            if let Some(word) = args.bytes_read(glue_at) {
                self.propagate_fixed(args, command, glue_at, word);
            }
            return;
        }
        self.propagate(Some(args), None);
    }

    /// [`Run::propagate`] of a check by a policy's name (`RL.CHECK`'s plain
    /// request: `super::respond::respond_by_name`), inlined into it: a
    /// client's command, its header glued to the policy's definition in
    /// place of its name, no drawn id. Any other run goes the general way.
    #[inline(always)]
    pub fn propagate_by_name(&self, args: &Args<'_>) {
        if !self.changed.get() {
            return;
        }
        if let Origin::Client {
            command: Command::Policy,
            glue_at,
            glue_word: Some(word),
        } = self.origin
        {
            self.propagate_fixed(args, Command::Policy, glue_at, word);
            return;
        }
        self.propagate(Some(args), None);
    }

    /// Propagates a client's `command`, whose replay header is its fixed
    /// fields, glued to `word` at `glue_at`: what every path of a command
    /// without a drawn id does (inlined: `command` is known to its caller).
    #[inline(always)]
    fn propagate_fixed(&self, args: &Args<'_>, command: Command, glue_at: usize, word: &[u8]) {
        let head = fixed_header(command, self.now_ms, self.expiry_slack_ms);
        replicate_swapped(self.ctx, args, replay_name(command).0, glue_at, &head, word);
    }

    /// Propagates the command, when it changed anything: a client's as its
    /// replay (with `drawn_id`, the lease id the server drew, if any), a
    /// replay as it is. Call once, after the command's last write.
    pub fn propagate(&self, args: Option<&Args<'_>>, drawn_id: Option<&[u8]>) {
        if !self.changed.get() {
            return;
        }
        let (command, glue_at, glue_word) = match self.origin {
            Origin::Client {
                command,
                glue_at,
                glue_word,
            } => (command, glue_at, glue_word),
            Origin::Woken {
                command,
                glue_at,
                words,
            } => {
                self.propagate_woken(command, glue_at, words, drawn_id);
                return;
            }
            Origin::Replay => {
                self.ctx.replicate_verbatim();
                return;
            }
        };
        let Some((args, word)) =
            args.and_then(|args| Some((args, glue_word.or_else(|| args.bytes_read(glue_at))?)))
        else {
            return;
        };
        // The glued word is the header's bytes, then the word: handed over
        // as those two parts, so that a replay gluing the same bytes as the
        // last one is recognised without writing them out (see
        // `replicate_swapped`). The header is its fixed fields, made from
        // the values (no `Header`), but for `RL.ACQUIRE`'s, which is
        // written with the word on the stack when they fit, then handed
        // over as the fixed fields and the rest.
        if !command.has_optional_fields() {
            self.propagate_fixed(args, command, glue_at, word);
            return;
        }
        let header = Header {
            command,
            now_ms: self.now_ms,
            expiry_slack_ms: self.expiry_slack_ms,
            drawn_id: drawn_id.map(<[u8]>::to_vec),
        };
        let len = header.encoded_len() + word.len();
        let mut on_stack = [0u8; 128];
        let mut on_heap = Vec::new();
        let buf = match on_stack.get_mut(..len) {
            Some(buf) => buf,
            None => {
                on_heap.resize(len, 0);
                &mut on_heap[..]
            }
        };
        header.glue_into(word, buf);
        // The fixed fields as the head; the others and the word after them.
        if let Some((head, rest)) = buf.split_first_chunk::<FIXED_LEN>() {
            replicate_swapped(self.ctx, args, replay_name(command).0, glue_at, head, rest);
        }
    }

    /// The replay of a waiting command served outside it, built from its
    /// words (there is no argument vector to lend): `RedisModule_Replicate`.
    fn propagate_woken(
        &self,
        command: Command,
        glue_at: usize,
        words: &[Vec<u8>],
        drawn_id: Option<&[u8]>,
    ) {
        let header = Header {
            command,
            now_ms: self.now_ms,
            expiry_slack_ms: self.expiry_slack_ms,
            drawn_id: drawn_id.map(<[u8]>::to_vec),
        };
        let (_, name) = replay_name(command);
        let glued = header.glued_to(words.get(glue_at).map_or(&[][..], |w| &w[..]));
        let words =
            words.iter().enumerate().skip(1).map(
                |(i, word)| {
                    if i == glue_at {
                        &glued[..]
                    } else {
                        &word[..]
                    }
                },
            );
        replicate_words(self.ctx, name, words);
    }
}
