//! Error replies: one conventional text for each thing that can go wrong,
//! built by small named constructors so the texts live in one place.

use std::borrow::Cow;

/// An error reply, already in Redis's `CODE message` form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError(Cow<'static, str>);

impl CommandError {
    /// The full reply text, e.g. `ERR capacity must be ...`.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// A parameter with a value outside what it accepts.
    pub fn must_be(parameter: &str, accepted: &str) -> Self {
        Self(format!("ERR {parameter} must be {accepted}").into())
    }

    pub fn syntax(detail: &str) -> Self {
        Self(format!("ERR syntax error: {detail}").into())
    }

    pub fn unknown_option(word: &[u8]) -> Self {
        let shown: String = String::from_utf8_lossy(word).chars().take(64).collect();
        Self::syntax(&format!("unknown option '{shown}'"))
    }

    pub fn repeated_option(name: &str) -> Self {
        Self::syntax(&format!("{name} given more than once"))
    }

    pub fn wrong_type() -> Self {
        Self(Cow::Borrowed(
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ))
    }

    pub fn wrong_arity(command: &str) -> Self {
        Self(format!("ERR wrong number of arguments for '{command}' command").into())
    }

    /// A state given to `RL.SETSTATE` that this module could not have written.
    pub fn invalid_state(reason: &str) -> Self {
        Self(format!("ERR state must be a state written by this module ({reason})").into())
    }
}
