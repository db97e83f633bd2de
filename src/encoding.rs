//! The one binary encoding of every state: what RDB files hold, what the
//! effect-replication command `RL.SETSTATE` carries, what AOF rewrite emits
//! and what `DEBUG DIGEST-VALUE` hashes.
//!
//! Layout: one tag byte naming the algorithm, then its fields in little-endian
//! order (see each algorithm's `encode_body`). The tag doubles as the format
//! version: a change of layout takes a new tag, and a reader refuses tags it
//! does not know. Decoding is strict: a buffer that this code could not have
//! written (wrong length, a value out of range, trailing bytes) is an error,
//! never a panic.

use std::fmt;

/// The largest timestamp a state may carry (year 287,396): far beyond any real
/// clock, small enough that arithmetic on it in `i128` or `f64` stays exact,
/// and the largest expiry `RL.SETSTATE ... PXAT` takes.
pub const MAX_TIMESTAMP_MS: i64 = 1 << 53;

/// The longest window, period, lease or penalty: 366 days.
pub const MAX_DURATION_MS: u64 = 366 * 86_400_000;

/// How far ahead of this server's clock the times of a state a client sends
/// (`RL.SETSTATE`, `RESTORE`) may be: two longest durations. A state carries
/// times up to one longest duration after the clock of the server that made
/// it (a lease or a penalty taken then); the other leaves room for that
/// server's clock to be ahead of this one's by up to a year. Anything
/// further out is no state a command could have made, and would deny its
/// key for centuries.
pub const MAX_AHEAD_MS: i64 = 2 * MAX_DURATION_MS as i64;

/// The latest time a state being read may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon {
    pub latest_ms: i64,
}

impl Horizon {
    /// No clock: any time up to [`MAX_TIMESTAMP_MS`]. For a copy of a
    /// state a server held (what a replica takes from its primary, a server
    /// from its own RDB or AOF), which is not judged again by this server's
    /// clock: the original was judged when a client sent it, and a command
    /// on it may have added a longest duration since; so a replica whose
    /// clock is behind its primary's, or a server restarted with its clock
    /// set back, takes every state the original held (a refused RDB value
    /// would stop the replica, or the server's start). Also a replay's
    /// header, which carries the primary's clock itself; tests.
    pub const NONE: Horizon = Horizon {
        latest_ms: MAX_TIMESTAMP_MS,
    };

    /// A state a client sends at `now_ms`: [`MAX_AHEAD_MS`] after it.
    pub fn client(now_ms: i64) -> Self {
        Self::after(now_ms, MAX_AHEAD_MS)
    }

    fn after(now_ms: i64, ahead_ms: i64) -> Self {
        Self {
            latest_ms: now_ms.saturating_add(ahead_ms).clamp(0, MAX_TIMESTAMP_MS),
        }
    }
}

/// Why a buffer is not a valid state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A cursor over an encoded state.
pub struct Reader<'a> {
    bytes: &'a [u8],
    /// The latest time [`Reader::timestamp`] accepts.
    latest_ms: i64,
}

impl<'a> Reader<'a> {
    /// A reader with no clock ([`Horizon::NONE`]).
    pub fn new(bytes: &'a [u8]) -> Self {
        Self::within(bytes, Horizon::NONE)
    }

    /// A reader whose times end at `horizon`.
    pub fn within(bytes: &'a [u8], horizon: Horizon) -> Self {
        Self {
            bytes,
            latest_ms: horizon.latest_ms,
        }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or(DecodeError("state is truncated"))?;
        self.bytes = rest;
        Ok(*head)
    }

    /// The next `len` bytes as they are.
    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if len > self.bytes.len() {
            return Err(DecodeError("state is truncated"));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.take()?))
    }

    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_le_bytes(self.take()?))
    }

    /// A point in time (Unix ms, an i64): from 0 to the latest this reader
    /// accepts. Every time a state carries is read with this, so that no
    /// state holds a time beyond what a command could have made.
    pub fn timestamp(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        let ms = self.i64()?;
        ensure((0..=self.latest_ms).contains(&ms), what)?;
        Ok(ms)
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// Succeeds only when every byte was read.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("state has trailing bytes"))
        }
    }
}

/// Checks a decoded value, naming the field when it is out of range.
pub fn ensure(ok: bool, what: &'static str) -> Result<(), DecodeError> {
    if ok {
        Ok(())
    } else {
        Err(DecodeError(what))
    }
}

pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000;

    fn stamp(ms: i64, horizon: Horizon) -> Result<i64, DecodeError> {
        Reader::within(&ms.to_le_bytes(), horizon).timestamp("timestamp out of range")
    }

    #[test]
    fn a_clients_state_may_be_stamped_up_to_two_longest_durations_ahead() {
        let horizon = Horizon::client(T0);
        assert_eq!(stamp(T0 + MAX_AHEAD_MS, horizon), Ok(T0 + MAX_AHEAD_MS));
        assert!(stamp(T0 + MAX_AHEAD_MS + 1, horizon).is_err());
        assert_eq!(stamp(0, horizon), Ok(0));
        assert!(stamp(-1, horizon).is_err());
    }

    #[test]
    fn no_horizon_passes_the_last_time_a_state_carries() {
        for now in [MAX_TIMESTAMP_MS - 1, MAX_TIMESTAMP_MS, i64::MAX] {
            assert_eq!(Horizon::client(now), Horizon::NONE);
            assert!(stamp(MAX_TIMESTAMP_MS + 1, Horizon::client(now)).is_err());
        }
        assert_eq!(stamp(MAX_TIMESTAMP_MS, Horizon::NONE), Ok(MAX_TIMESTAMP_MS));
        assert_eq!(Horizon::client(i64::MIN).latest_ms, 0);
    }
}
