//! The parameter shapes several algorithms share, each in one place: its
//! words, how they are read, and what a decoded state may hold of them.
//! `capacity rate` is both buckets'; `limit window` is the window
//! algorithms' (fixed window, sliding counter, sliding log).

use crate::error::CommandError;
use crate::words::syntax::{Kind, Word};
use crate::words::values::{
    amount, duration_ms, is_rate, plain_amount, plain_duration_ms, plain_rate, rate, MAX_AMOUNT,
    MAX_DURATION_MS,
};

/// `capacity rate`, the words of both bucket commands.
#[inline(always)]
pub fn capacity_and_rate(words: &[&[u8]]) -> Result<(u64, f64), CommandError> {
    // Both in their plain forms, read in place (a check parses them on
    // every call); any other word, in full, with its refusal.
    if let [capacity, rate_per_s] = words {
        if let Some(capacity) = plain_amount(capacity) {
            if let Some(rate_per_s) = plain_rate(rate_per_s) {
                return Ok((capacity, rate_per_s));
            }
        }
    }
    capacity_and_rate_in_full(words)
}

/// [`capacity_and_rate`] in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn capacity_and_rate_in_full(words: &[&[u8]]) -> Result<(u64, f64), CommandError> {
    let [capacity, rate_per_s] = words else {
        return Err(CommandError::Arity);
    };
    Ok((amount(capacity, "capacity")?, rate(rate_per_s, "rate")?))
}

/// What both buckets accept: a capacity from 1 to [`MAX_AMOUNT`], a rate
/// the parser takes ([`is_rate`]).
pub fn check_capacity_and_rate(capacity: u64, rate_per_s: f64) -> Result<(), &'static str> {
    if !(1..=MAX_AMOUNT).contains(&capacity) {
        Err("capacity out of range")
    } else if !is_rate(rate_per_s) {
        Err("rate out of range")
    } else {
        Ok(())
    }
}

/// `limit window`, the words of the window commands.
#[inline(always)]
pub fn limit_and_window(words: &[&[u8]]) -> Result<(u64, u64), CommandError> {
    // Both in their plain forms, read in place (a check parses them on
    // every call); any other word, in full, with its refusal.
    if let [limit, window] = words {
        if let Some(limit) = plain_amount(limit) {
            if let Some(window_ms) = plain_duration_ms(window) {
                return Ok((limit, window_ms));
            }
        }
    }
    limit_and_window_in_full(words)
}

/// [`limit_and_window`] in full: every form, and the refusals.
#[cold]
#[inline(never)]
fn limit_and_window_in_full(words: &[&[u8]]) -> Result<(u64, u64), CommandError> {
    let [limit, window] = words else {
        return Err(CommandError::Arity);
    };
    Ok((amount(limit, "limit")?, duration_ms(window, "window")?))
}

/// What the window algorithms accept: a limit from 1 to [`MAX_AMOUNT`], a
/// window from 1 ms to [`MAX_DURATION_MS`].
pub fn check_limit_and_window(limit: u64, window_ms: u64) -> Result<(), &'static str> {
    if !(1..=MAX_AMOUNT).contains(&limit) {
        Err("limit out of range")
    } else if !(1..=MAX_DURATION_MS).contains(&window_ms) {
        Err("window out of range")
    } else {
        Ok(())
    }
}

/// A window algorithm's first word.
pub const LIMIT: Word = Word {
    name: "limit",
    kind: Kind::Integer,
    summary: "The most requests allowed in any window: a whole number from 1 to 2^53-1.",
};

/// A window algorithm's second word.
pub const WINDOW: Word = Word {
    name: "window",
    kind: Kind::Duration,
    summary: "The window's length: a decimal with an optional unit ms, s, m, h or d (seconds when none: 60, 1.5s, 250ms, 1h), from 1ms to 366d.",
};
