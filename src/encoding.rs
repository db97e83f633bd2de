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
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
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
