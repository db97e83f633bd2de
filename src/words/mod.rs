//! The words of a command, below the algorithms: what a word holds
//! ([`values`]: amounts, rates, durations, and their bounds) and how an
//! algorithm's parameters are written and documented ([`syntax`]). The
//! algorithms read their parameters with these; the grammar of whole
//! commands (`crate::parse`: options, `RL.ALL`, `RL.TOP`) sits above the
//! algorithms.

pub mod syntax;
pub mod values;

/// Whether `a` and `b` hold the same bytes, for short words (a replay's
/// 13-byte header, a parameter of a few digits, a policy's name): a few
/// loads, not a call of `memcmp` (about 40 instructions a check).
#[inline(always)]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let u64_at = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .and_then(|w| w.first_chunk::<8>())
            .map(|w| u64::from_le_bytes(*w))
    };
    let u32_at = |s: &[u8], at: usize| {
        s.get(at..at + 4)
            .and_then(|w| w.first_chunk::<4>())
            .map(|w| u32::from_le_bytes(*w))
    };
    match n {
        0 => true,
        // The first, middle and last bytes cover every byte of 1 to 3.
        1..=3 => {
            a.first() == b.first() && a.get(n / 2) == b.get(n / 2) && a.get(n - 1) == b.get(n - 1)
        }
        // Two overlapping words cover them all.
        4..=7 => u32_at(a, 0) == u32_at(b, 0) && u32_at(a, n - 4) == u32_at(b, n - 4),
        8..=16 => u64_at(a, 0) == u64_at(b, 0) && u64_at(a, n - 8) == u64_at(b, n - 8),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::same_bytes;
    use proptest::prelude::*;

    proptest! {
        /// The compare by loads answers as `==` does, for every length it
        /// reads by loads (and beyond): on equal words, and on words that
        /// differ in one byte anywhere or in their length.
        #[test]
        fn same_bytes_answers_as_equality_does(
            a in proptest::collection::vec(any::<u8>(), 0..24),
            at in any::<proptest::sample::Index>(),
            flip in 1u8..=255,
            cut in any::<bool>(),
        ) {
            prop_assert!(same_bytes(&a, &a.clone()));
            let mut b = a.clone();
            if !b.is_empty() {
                let i = at.index(b.len());
                b[i] ^= flip;
                prop_assert_eq!(same_bytes(&a, &b), a == b);
                prop_assert!(!same_bytes(&a, &b));
            }
            if cut && !a.is_empty() {
                prop_assert!(!same_bytes(&a, &a[..a.len() - 1]));
            }
        }
    }
}
