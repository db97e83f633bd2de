//! The parameters a check command last read, kept per algorithm with the
//! words they were read from: a check whose words are those again (an
//! application checks each of its limits with the same words on every
//! request) takes them from here instead of parsing its numbers and
//! durations again. Parsing is a function of the words alone (no setting
//! enters it), so equal words give equal parameters; only words without
//! options are kept (`COST`, `PEEK`, `BLOCK` ... are read each time).

use super::super::ffi::main_thread::MainThreadCell;
use super::super::ffi::Ctx;
use crate::algorithms::gcra::GcraParams;
use crate::algorithms::registry::{IntoTier, Line, Tier, ALGORITHMS};
use crate::error::CommandError;
use crate::parse::{self, CheckOptions};
use crate::redis_cell::{cl_throttle, ClThrottleArgs};
use crate::words::same_bytes;
use crate::words::syntax::Syntax;

/// The most bytes of words kept (every word together): longer parameters
/// are parsed each time.
const KEPT_BYTES: usize = 32;

/// The most words kept: an algorithm's parameters are at most three words.
const KEPT_WORDS: usize = 3;

/// One algorithm's last parameters and the words they came from.
#[derive(Clone, Copy)]
pub struct Kept {
    /// The words, one after another.
    bytes: [u8; KEPT_BYTES],
    /// Where each word ends in `bytes`; the first `count` are used.
    ends: [u8; KEPT_WORDS],
    count: u8,
    /// The parameters read from them; `None` while nothing is kept.
    tier: Option<Tier>,
}

impl Kept {
    pub const NONE: Self = Self {
        bytes: [0; KEPT_BYTES],
        ends: [0; KEPT_WORDS],
        count: 0,
        tier: None,
    };

    /// The parameters kept, when they were read from exactly `words` and
    /// are `P`'s.
    #[inline(always)]
    pub fn of<P: IntoTier>(&self, words: &[&[u8]]) -> Option<P> {
        let tier = self.tier?;
        if words.len() != usize::from(self.count) {
            return None;
        }
        let mut start = 0;
        for (word, &end) in words.iter().zip(&self.ends) {
            let end = usize::from(end);
            if !same_bytes(self.bytes.get(start..end)?, word) {
                return None;
            }
            start = end;
        }
        P::of_tier(tier)
    }

    /// Keeps `params`, read from `words`, unless the words are too many or
    /// too long to keep (what was kept is then forgotten).
    pub fn keep<P: IntoTier>(&mut self, words: &[&[u8]], params: P) {
        self.tier = None;
        if words.len() > KEPT_WORDS {
            return;
        }
        let mut end = 0;
        for (word, slot) in words.iter().zip(&mut self.ends) {
            let Some(to) = self.bytes.get_mut(end..end + word.len()) else {
                return;
            };
            to.copy_from_slice(word);
            end += word.len();
            // At most KEPT_BYTES (the `get_mut` above), so it fits a byte.
            *slot = end as u8;
        }
        self.count = words.len() as u8;
        self.tier = Some(params.into_tier());
    }
}

/// Each algorithm's, at its registry line.
static KEPT: MainThreadCell<[Kept; ALGORITHMS]> = MainThreadCell::new([Kept::NONE; ALGORITHMS]);

/// The parameters `P`'s algorithm's last check without options read, when
/// `words` are its words again: a check that may skip the parsing (its
/// options are then the defaults: a plain take of 1).
#[inline(always)]
pub fn kept<P: IntoTier + Syntax>(ctx: Ctx<'_>, words: &[&[u8]]) -> Option<P>
where
    P::Algorithm: Line,
{
    if words.len() != P::PARAMS.len() {
        return None;
    }
    KEPT.with(ctx, |kept| kept.get(P::Algorithm::LINE)?.of::<P>(words))
        .flatten()
}

/// `parse::check_args` for `P`'s check command, whose words [`kept`] did
/// not find: the parameters read are kept with their words when there are
/// no options, for the next check to find.
#[inline(always)]
pub fn check_args<P: IntoTier + Syntax>(
    ctx: Ctx<'_>,
    words: &[&[u8]],
) -> Result<(P, CheckOptions), CommandError>
where
    P::Algorithm: Line,
{
    let parsed = parse::check_args::<P>(words);
    if let (true, Ok((params, _))) = (words.len() == P::PARAMS.len(), &parsed) {
        KEPT.with(ctx, |kept| {
            if let Some(kept) = kept.get_mut(P::Algorithm::LINE) {
                kept.keep(words, *params);
            }
        });
    }
    parsed
}

/// `CL.THROTTLE`'s, apart from the algorithms' (its words are redis-cell's:
/// a period in seconds).
static KEPT_THROTTLE: MainThreadCell<Kept> = MainThreadCell::new(Kept::NONE);

/// The parameters the last `CL.THROTTLE` without a quantity read, when
/// `words` are its words again: a call that may skip the parsing (its
/// quantity is then 1, a take).
#[inline(always)]
pub fn kept_throttle(ctx: Ctx<'_>, words: &[&[u8]]) -> Option<GcraParams> {
    if words.len() != 3 {
        return None;
    }
    KEPT_THROTTLE
        .with(ctx, |kept| kept.of::<GcraParams>(words))
        .flatten()
}

/// `redis_cell::cl_throttle`, for words [`kept_throttle`] did not find:
/// the parameters read are kept with their words when no quantity is
/// given, for the next call to find. Parsing is a function of the words
/// alone.
#[inline(always)]
pub fn cl_throttle_args(ctx: Ctx<'_>, words: &[&[u8]]) -> Result<ClThrottleArgs, CommandError> {
    let parsed = cl_throttle(words);
    if let (3, Ok(args)) = (words.len(), &parsed) {
        KEPT_THROTTLE.with(ctx, |kept| kept.keep(words, args.params));
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::token_bucket::TokenBucketParams;

    fn parsed<P: Syntax>(words: &[&[u8]]) -> P {
        parse::check_args::<P>(words).unwrap().0
    }

    #[test]
    fn the_same_words_give_the_parameters_read_from_them() {
        let mut kept = Kept::NONE;
        let words: &[&[u8]] = &[b"100", b"0.01"];
        assert_eq!(
            kept.of::<TokenBucketParams>(words),
            None,
            "nothing kept yet"
        );
        kept.keep(words, parsed::<TokenBucketParams>(words));
        assert_eq!(
            kept.of::<TokenBucketParams>(words),
            Some(parsed::<TokenBucketParams>(words))
        );
    }

    #[test]
    fn other_words_or_another_algorithm_find_nothing() {
        let mut kept = Kept::NONE;
        let words: &[&[u8]] = &[b"100", b"0.01"];
        kept.keep(words, parsed::<TokenBucketParams>(words));
        for other in [
            &[b"100".as_slice(), b"0.02"][..],
            &[b"10", b"00.01"],
            &[b"1000", b".01"],
            &[b"100"],
            &[b"100", b"0.01", b"1"],
            &[b"100", b"0.0"],
        ] {
            assert_eq!(kept.of::<TokenBucketParams>(other), None, "{other:?}");
        }
        assert_eq!(kept.of::<GcraParams>(&[b"100", b"0.01", b"1"]), None);
    }

    #[test]
    fn words_too_long_to_keep_forget_what_was_kept() {
        let mut kept = Kept::NONE;
        let words: &[&[u8]] = &[b"100", b"0.01"];
        kept.keep(words, parsed::<TokenBucketParams>(words));
        let long: &[&[u8]] = &[b"100", b"0.0100000000000000000000000000000001"];
        kept.keep(long, parsed::<TokenBucketParams>(long));
        assert_eq!(kept.of::<TokenBucketParams>(long), None);
        assert_eq!(kept.of::<TokenBucketParams>(words), None);
        let fits: &[&[u8]] = &[b"9007199254740991", b"1000000.00000000"];
        kept.keep(fits, parsed::<TokenBucketParams>(fits));
        assert_eq!(
            kept.of::<TokenBucketParams>(fits),
            Some(parsed::<TokenBucketParams>(fits))
        );
    }
}
