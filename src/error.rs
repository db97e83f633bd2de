//! Error replies: one conventional text for each thing that can go wrong,
//! built by small named constructors so the texts live in one place.

use std::borrow::Cow;

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// Too few or too many arguments: answered with Redis's own text, which
    /// names the command as the client spelled it.
    Arity,
    /// Any other error, already in Redis's `CODE message` form.
    Reply(Cow<'static, str>),
}

use CommandError::Reply;

impl CommandError {
    /// The full reply text, e.g. `ERR capacity must be ...`.
    pub fn text(&self) -> &str {
        match self {
            CommandError::Arity => "ERR wrong number of arguments",
            Reply(text) => text,
        }
    }

    /// A parameter with a value outside what it accepts.
    pub fn must_be(parameter: &str, accepted: &str) -> Self {
        Reply(format!("ERR {parameter} must be {accepted}").into())
    }

    pub fn syntax(detail: &str) -> Self {
        Reply(format!("ERR syntax error: {detail}").into())
    }

    pub fn unknown_option(word: &[u8]) -> Self {
        Self::syntax(&format!("unknown option '{}'", shown(word)))
    }

    pub fn repeated_option(name: &str) -> Self {
        Self::syntax(&format!("{name} given more than once"))
    }

    /// Redis's own reply to a write refused at `maxmemory`.
    pub fn out_of_memory() -> Self {
        Reply(Cow::Borrowed(
            "OOM command not allowed when used memory > 'maxmemory'.",
        ))
    }

    /// An `RL.ALL` naming more keys than the setting `max-keys` allows.
    pub fn too_many_keys(max: usize) -> Self {
        Self::must_be("numkeys", &format!("at most {max} (ratelimit.max-keys)"))
    }

    pub fn wrong_type() -> Self {
        Reply(Cow::Borrowed(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ))
    }

    /// A replay (`RL.APPLY`, `RL.APPLYALL`) sent by a client: only a
    /// primary or an AOF file may send them.
    pub fn internal_command() -> Self {
        Reply(Cow::Borrowed(
            "ERR this command is how replicas and AOF files receive changes; only a primary or an AOF file may send it",
        ))
    }

    /// Redis Cluster's redirect for a key of `slot` that has moved, while
    /// the slot moves, to the node at `address` (`ip:port`): the client
    /// sends `ASKING` and the command there, once.
    pub fn ask(slot: u16, address: &str) -> Self {
        Reply(format!("ASK {slot} {address}").into())
    }

    /// Redis Cluster's redirect to the node at `address` (`ip:port`), which
    /// serves `slot` now: the client sends the command there and updates
    /// its slot map.
    pub fn moved(slot: u16, address: &str) -> Self {
        Reply(format!("MOVED {slot} {address}").into())
    }

    /// Redis's own reply to a command on several keys of a slot being
    /// moved, some of which have moved and some not: try again shortly.
    pub fn keys_being_moved() -> Self {
        Reply(Cow::Borrowed(
            "TRYAGAIN Multiple keys request during rehashing of slot",
        ))
    }

    /// Redis's own reply for a key whose slot no node serves.
    pub fn slot_not_served() -> Self {
        Reply(Cow::Borrowed("CLUSTERDOWN Hash slot not served"))
    }

    /// The cluster's layout could not be read: try again shortly.
    pub fn cluster_layout_unknown() -> Self {
        Reply(Cow::Borrowed(
            "TRYAGAIN cannot tell which node serves this key's slot now",
        ))
    }

    /// A state given to `RL.SETSTATE` that this module could not have written.
    pub fn invalid_state(reason: &str) -> Self {
        Reply(format!("ERR state must be a state written by this module ({reason})").into())
    }
}

/// A word from a client as an error reply may quote it: its first 64
/// characters, control characters (CR, LF...) shown as `?`, so that no
/// argument can stretch a reply or break it across lines.
pub fn shown(word: &[u8]) -> String {
    String::from_utf8_lossy(word)
        .chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
