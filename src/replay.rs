//! Replays: how a command that changed a key reaches replicas and the AOF.
//!
//! Every algorithm here is deterministic: given the stored state, the
//! command's words, the time and the module's settings, a check always
//! reaches the same decision and the same new state. So instead of the new
//! state (which for a sliding log of a million entries is megabytes), what
//! is propagated is the command itself with the primary's time and settings
//! pinned: a *replay*. A replica, or a server loading its AOF, runs the
//! replay exactly as the primary ran the command, from the same state (by
//! induction: the state a replica starts from is the primary's snapshot,
//! and every change since reached it the same way), and reaches the same
//! state and expiry. Its size is the command's, whatever the state's.
//!
//! A replay is written `RL.APPLY key <header><first word> <other words>...`
//! for a command on one key (the first word is the one after the key), and
//! `RL.APPLYALL <header><numkeys> <keys and specs>...` for `RL.ALL`
//! (`RL.APPLYCHECK <header><definition> key [key ...] [options]` for
//! `RL.CHECK`, the policy's name replaced by its definition): the
//! same number of words as the command, the header glued to the front of one
//! of them (which lets the Redis layer propagate it by swapping two words of
//! the command, without building a new one).
//!
//! The header (little-endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | the command replayed (a [`Command`] code) |
//! | 8 | `now_ms`, the primary's clock, as an i64 |
//! | 4 | `expiry_slack_ms`, the primary's setting, as a u32 |
//! | 1 + n | `RL.ACQUIRE` only: the length of the lease id the server drew, then the id (length 0 when the caller gave one) |

use crate::algorithms::concurrency::MAX_ID_BYTES;
use crate::algorithms::expiry::MAX_EXPIRY_SLACK_MS;
use crate::encoding::{ensure, DecodeError, Reader};

/// The command a replay replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// The check command of the algorithm with this registry tag.
    Check(u8),
    ClThrottle,
    Acquire,
    Release,
    All,
    /// `RL.REFUND`.
    Refund,
    /// `RL.CHECK`, replayed as `RL.APPLYCHECK <header><definition> key
    /// [key ...] [options]`: the policy's definition (its normalised words,
    /// space-separated) travels in the glued word, so a replay needs no
    /// policy where it runs.
    Policy,
}

impl Command {
    /// Whether its replays' headers carry fields after [`fixed_header`]'s
    /// (`RL.ACQUIRE`'s drawn lease id).
    pub fn has_optional_fields(self) -> bool {
        self == Command::Acquire
    }

    fn code(self) -> u8 {
        match self {
            Command::Check(tag) => tag,
            Command::ClThrottle => 0x40,
            Command::Acquire => 0x41,
            Command::Release => 0x42,
            Command::All => 0x43,
            Command::Refund => 0x44,
            Command::Policy => 0x45,
        }
    }

    fn of_code(code: u8) -> Option<Self> {
        Some(match code {
            0x40 => Command::ClThrottle,
            0x41 => Command::Acquire,
            0x42 => Command::Release,
            0x43 => Command::All,
            0x44 => Command::Refund,
            0x45 => Command::Policy,
            1..=0x3f => Command::Check(code),
            _ => return None,
        })
    }
}

/// The header's bytes before its optional fields: the command, `now_ms`,
/// `expiry_slack_ms`.
pub const FIXED_LEN: usize = 13;

/// The header's fields every header has ([`Header::fixed`]), from the
/// values themselves: the whole header of every replay but `RL.ACQUIRE`'s
/// ([`Command::has_optional_fields`]), made without a [`Header`] (this
/// runs on every check that changed a key).
#[inline]
pub fn fixed_header(command: Command, now_ms: i64, expiry_slack_ms: u32) -> [u8; FIXED_LEN] {
    let now = now_ms.to_le_bytes();
    let slack = expiry_slack_ms.to_le_bytes();
    [
        command.code(),
        now[0],
        now[1],
        now[2],
        now[3],
        now[4],
        now[5],
        now[6],
        now[7],
        slack[0],
        slack[1],
        slack[2],
        slack[3],
    ]
}

/// What a replay pins of the primary's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub command: Command,
    pub now_ms: i64,
    pub expiry_slack_ms: u32,
    /// `RL.ACQUIRE`: the id the server drew for the lease (`None` when the
    /// caller gave one in the command's words).
    pub drawn_id: Option<Vec<u8>>,
}

impl Header {
    /// The header, then `word`: the word a replay carries in place of
    /// `word`.
    pub fn glued_to(&self, word: &[u8]) -> Vec<u8> {
        let mut out = vec![0; self.encoded_len() + word.len()];
        self.glue_into(word, &mut out);
        out
    }

    /// The header's length in bytes.
    pub fn encoded_len(&self) -> usize {
        let id = self.drawn_id.as_deref().unwrap_or_default();
        FIXED_LEN
            + if self.command.has_optional_fields() {
                1 + id.len()
            } else {
                0
            }
    }

    /// The header's fields every header has (the command, `now_ms`,
    /// `expiry_slack_ms`), as the bytes that start it: the whole header of
    /// every replay but `RL.ACQUIRE`'s (see [`Header::optional_len`]).
    /// One array of a size known when compiling: written with a few moves,
    /// not a copy call per field (this runs on every check that changed a
    /// key).
    pub fn fixed(&self) -> [u8; FIXED_LEN] {
        fixed_header(self.command, self.now_ms, self.expiry_slack_ms)
    }

    /// The length of the header's optional fields, after [`Header::fixed`]:
    /// 0 but for `RL.ACQUIRE`.
    pub fn optional_len(&self) -> usize {
        self.encoded_len() - FIXED_LEN
    }

    /// Writes [`Header::glued_to`] into `out`, which must be exactly
    /// `encoded_len() + word.len()` long (a caller's buffer: no allocation).
    pub fn glue_into(&self, word: &[u8], out: &mut [u8]) {
        let id = self.drawn_id.as_deref().unwrap_or_default();
        let id_len = [id.len() as u8];
        let mut rest = match out.split_first_chunk_mut::<FIXED_LEN>() {
            Some((head, tail)) => {
                *head = self.fixed();
                tail
            }
            None => out,
        };
        let parts: [&[u8]; 3] = [
            if self.command == Command::Acquire {
                &id_len
            } else {
                &[]
            },
            id,
            word,
        ];
        for part in parts {
            let n = part.len().min(rest.len());
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
            head.copy_from_slice(part.get(..n).unwrap_or_default());
            rest = tail;
        }
    }

    /// Splits a word written by [`Header::glued_to`] into the header and the
    /// command's own word, checking the header as strictly as a state.
    pub fn unglue(word: &[u8]) -> Result<(Header, &[u8]), DecodeError> {
        let mut input = Reader::new(word);
        let command = Command::of_code(input.u8()?).ok_or(DecodeError("unknown command"))?;
        let now_ms = input.timestamp("timestamp out of range")?;
        let expiry_slack_ms = input.u32()?;
        ensure(
            expiry_slack_ms <= MAX_EXPIRY_SLACK_MS,
            "expiry slack out of range",
        )?;
        let drawn_id = if command == Command::Acquire {
            let len = usize::from(input.u8()?);
            ensure(len <= MAX_ID_BYTES, "lease id length out of range")?;
            (len > 0)
                .then(|| input.bytes(len).map(<[u8]>::to_vec))
                .transpose()?
        } else {
            None
        };
        let rest = input.bytes(input.remaining())?;
        Ok((
            Header {
                command,
                now_ms,
                expiry_slack_ms,
                drawn_id,
            },
            rest,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::MAX_TIMESTAMP_MS;

    #[test]
    fn a_header_glued_to_a_word_comes_apart_as_it_went_in() {
        for header in [
            Header {
                command: Command::Check(1),
                now_ms: 1_700_000_000_123,
                expiry_slack_ms: 1000,
                drawn_id: None,
            },
            Header {
                command: Command::Acquire,
                now_ms: 0,
                expiry_slack_ms: 0,
                drawn_id: Some(b"0123456789abcdef0123456789abcdef".to_vec()),
            },
            Header {
                command: Command::Acquire,
                now_ms: MAX_TIMESTAMP_MS,
                expiry_slack_ms: MAX_EXPIRY_SLACK_MS,
                drawn_id: None,
            },
            Header {
                command: Command::All,
                now_ms: 5,
                expiry_slack_ms: 7,
                drawn_id: None,
            },
        ] {
            for word in [&b""[..], b"100", b"\x00\xff binary"] {
                let glued = header.glued_to(word);
                assert_eq!(Header::unglue(&glued), Ok((header.clone(), word)));
            }
        }
    }

    #[test]
    fn a_check_header_takes_thirteen_bytes() {
        let header = Header {
            command: Command::Check(4),
            now_ms: 1,
            expiry_slack_ms: 2,
            drawn_id: None,
        };
        assert_eq!(header.glued_to(b"100").len(), 13 + 3);
    }

    #[test]
    fn a_header_a_primary_could_not_have_written_is_refused() {
        let good = Header {
            command: Command::Release,
            now_ms: 1_700_000_000_000,
            expiry_slack_ms: 1000,
            drawn_id: None,
        }
        .glued_to(b"id");
        let bad = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut word = good.clone();
            f(&mut word);
            Header::unglue(&word).is_err()
        };
        assert!(!bad(&|_| {}));
        assert!(bad(&|w| w.truncate(12)));
        assert!(bad(&|w| w[0] = 0));
        assert!(bad(&|w| w[0] = 0x46));
        assert!(bad(&|w| w[8] = 0x80), "a negative time");
        assert!(bad(&|w| w[12] = 0xff), "a slack of more than a day");
        let acquire = Header {
            command: Command::Acquire,
            now_ms: 1,
            expiry_slack_ms: 0,
            drawn_id: None,
        }
        .glued_to(b"3");
        let mut long_id = acquire.clone();
        long_id[13] = 65;
        assert!(Header::unglue(&long_id).is_err());
        let mut missing_id = acquire;
        missing_id[13] = 2;
        missing_id.truncate(14);
        assert!(Header::unglue(&missing_id).is_err());
    }
}
