//! Eight bytes tested at once, as the lanes of one `u64` (SWAR: no `unsafe`, no target
//! features).
//!
//! The passes over whole documents (keywords, digits, JSON strings) test every byte against
//! a class. One byte at a time, each class test is a branch, and text ends runs of a class so
//! often that the mispredicted branches were most of the time. Here a class test gives the
//! high bit of each byte of the class, and the positions come out of the mask bit by bit.
//! (Passes that read whole 64-byte blocks use [`super::block_classes`] instead.)

/// One in every byte.
pub const ONES: u64 = 0x0101_0101_0101_0101;

/// The high bit of every byte.
pub const HIGH: u64 = 0x80 * ONES;

/// The eight bytes of `b` from `at`, the first lowest; `None` past the end.
pub fn load(b: &[u8], at: usize) -> Option<u64> {
    let chunk = b.get(at..at.checked_add(8)?)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(chunk);
    Some(u64::from_le_bytes(word))
}

/// The high bit of each byte of `x` from `lo` to `hi` (both ASCII, `lo <= hi`); bytes that
/// are not ASCII are never within.
pub fn within(x: u64, lo: u8, hi: u8) -> u64 {
    debug_assert!(lo <= hi && hi < 0x80);
    let seven = x & (0x7f * ONES);
    // A byte's low seven bits plus (0x80 - lo) carry into its high bit when they are lo or
    // more, plus (0x7f - hi) when they are above hi; no sum carries into the next byte.
    let from_lo = seven + u64::from(0x80 - lo) * ONES;
    let above_hi = seven + u64::from(0x7f - hi) * ONES;
    from_lo & !above_hi & !x & HIGH
}

/// The high bit of each byte of `x` equal to `c` (any byte).
pub fn equal(x: u64, c: u8) -> u64 {
    within(x ^ (u64::from(c) * ONES), 0, 0)
}

/// `x` with its ASCII capitals made small, other bytes as they are.
pub fn fold_ascii(x: u64) -> u64 {
    x | (within(x, b'A', b'Z') >> 2)
}

/// The byte positions (0-7) of a mask of high bits, lowest first.
pub fn positions(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let k = mask.trailing_zeros() as usize / 8;
            mask &= mask - 1;
            k
        })
    })
}

/// A mask of high bits as one bit per byte: bit k set where byte k's high bit is.
pub fn bits(mask: u64) -> u32 {
    // Byte k's bit, moved to bit 8k, times this constant lands at bit 56 + k with no carry
    // from the bytes below (each column sums to less than 256).
    (((mask & HIGH) >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn each(x: u64, test: impl Fn(u8) -> bool) -> u64 {
        let mut mask = 0;
        for (k, b) in x.to_le_bytes().into_iter().enumerate() {
            if test(b) {
                mask |= 0x80 << (8 * k);
            }
        }
        mask
    }

    #[test]
    fn load_reads_eight_bytes_first_lowest() {
        assert_eq!(
            load(b"abcdefghi", 1),
            Some(u64::from_le_bytes(*b"bcdefghi"))
        );
        assert_eq!(load(b"abcdefgh", 1), None);
        assert_eq!(load(b"abcdefgh", usize::MAX), None);
        assert_eq!(
            positions(each(u64::from_le_bytes(*b"a1,B\x80zZ9"), |b| b
                .is_ascii_alphanumeric()))
            .collect::<Vec<_>>(),
            [0, 1, 3, 5, 6, 7]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        /// Each lane test is its byte-at-a-time definition, on any eight bytes.
        #[test]
        fn each_lane_test_is_its_bytewise_definition(x in any::<u64>(), c in any::<u8>(), lo in 0u8..0x80, span in 0u8..0x80) {
            let hi = lo.saturating_add(span).min(0x7f);
            prop_assert_eq!(within(x, lo, hi), each(x, |b| (lo..=hi).contains(&b)));
            prop_assert_eq!(equal(x, c), each(x, |b| b == c));
            let folded = u64::from_le_bytes(x.to_le_bytes().map(|b| b.to_ascii_lowercase()));
            prop_assert_eq!(fold_ascii(x), folded);
            let mask = each(x, |b| b % 3 == 0);
            let want: Vec<usize> = (0..8).filter(|k| x.to_le_bytes()[*k] % 3 == 0).collect();
            prop_assert_eq!(positions(mask).collect::<Vec<_>>(), want.clone());
            prop_assert_eq!(bits(mask), want.iter().fold(0, |m, k| m | 1 << k));
        }

        /// The same on bytes near the class edges, where a carry would go wrong.
        #[test]
        fn lane_tests_hold_at_the_edges(bytes in proptest::array::uniform8(prop_oneof![Just(0u8), Just(0x7f), Just(0x80), Just(0xff), Just(b'0' - 1), Just(b'9' + 1), Just(b'@'), Just(b'['), Just(b'`'), Just(b'{'), 0u8..=255])) {
            let x = u64::from_le_bytes(bytes);
            prop_assert_eq!(within(x, b'0', b'9'), each(x, |b| b.is_ascii_digit()));
            prop_assert_eq!(within(x, 0, 0x1f), each(x, |b| b < 0x20));
            prop_assert_eq!(equal(x, 0x80), each(x, |b| b == 0x80));
        }
    }
}
