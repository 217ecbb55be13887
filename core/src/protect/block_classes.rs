//! Byte classes of 64 bytes at a time, one bit a byte.
//!
//! The shape gates ([`super::shape`]) read digits, separators and letters around every
//! digit of a document. Telemetry is dense in them (ids, timestamps, hex digests, `"key":`
//! colons), so a loop that classes one byte at a time spent about three cycles a byte there.
//! Here each class of a 64-byte block is one `u64` (bit `j` is byte `j`), made with SSE2
//! (part of every x86-64 processor) 16 bytes at a step, or byte by byte elsewhere; a gate is
//! then a few shifts and ands over the block.

/// Which of one block's 64 bytes are in each class the shape gates read: bit `j` is byte `j`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockClasses {
    /// `0`-`9`.
    pub digit: u64,
    /// `1`-`9`.
    pub nonzero_digit: u64,
    /// `2`-`6`: the first digit of a card number.
    pub card_first_digit: u64,
    /// `A`-`Z`.
    pub upper: u64,
    /// `0`-`9`, `a`-`f`, `A`-`F`.
    pub hex: u64,
    /// ` ` alone.
    pub space: u64,
    /// ` `, `\t`, `\n`, `\r`, vertical tab and form feed.
    pub white: u64,
    /// `.`.
    pub dot: u64,
    /// `-`.
    pub dash: u64,
    /// `:`.
    pub colon: u64,
    /// `+`.
    pub plus: u64,
}

impl BlockClasses {
    /// The classes of the 64 bytes of `b` from `at`; bytes past its end are in none.
    pub fn at(b: &[u8], at: usize) -> BlockClasses {
        block_at(b, at, classify)
    }
}

/// Which of the 64 bytes of `b` from `at` are ASCII letters or digits, bit `j` byte `j`;
/// bytes past its end are not. The learned values' pass reads word starts from it.
pub fn alphanumeric_at(b: &[u8], at: usize) -> u64 {
    block_at(b, at, alphanumeric)
}

/// Which of the 64 bytes of `b` from `at` are token bytes (letters, digits, `+ / _ -`: the
/// base64 alphabets, [`super::validators::is_token_byte`]); bytes past its end are not.
pub fn token_bytes_at(b: &[u8], at: usize) -> u64 {
    block_at(b, at, token_bytes)
}

/// `class` of the 64 bytes of `b` from `at`, padded with zero bytes (in no class) past its end;
/// nothing (`T::default()`) past the end.
#[inline]
fn block_at<T: Default>(b: &[u8], at: usize, class: impl Fn(&[u8; 64]) -> T) -> T {
    let Some(rest) = b.get(at..).filter(|r| !r.is_empty()) else {
        return T::default();
    };
    match rest.first_chunk::<64>() {
        Some(block) => class(block),
        None => {
            let mut padded = [0u8; 64];
            padded[..rest.len()].copy_from_slice(rest);
            class(&padded)
        }
    }
}

/// Which bytes of `block` are ASCII letters or digits.
#[inline]
fn alphanumeric(block: &[u8; 64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE2 is part of the x86-64 baseline (as for `classify`).
        unsafe { sse2::alphanumeric(block, false) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        bytewise(block, u8::is_ascii_alphanumeric)
    }
}

/// Which bytes of `block` are token bytes.
#[inline]
fn token_bytes(block: &[u8; 64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as above.
        unsafe { sse2::alphanumeric(block, true) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        bytewise(block, is_token_byte)
    }
}

/// A token byte, as [`super::validators::is_token_byte`] has it.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn is_token_byte(x: &u8) -> bool {
    super::validators::is_token_byte(*x)
}

/// Which bytes of `block` pass `test`, one byte at a time: the definition.
pub fn bytewise(block: &[u8; 64], test: impl Fn(&u8) -> bool) -> u64 {
    block
        .iter()
        .enumerate()
        .filter(|(_, x)| test(x))
        .fold(0, |m, (j, _)| m | 1 << j)
}

/// The classes of `block`.
fn classify(block: &[u8; 64]) -> BlockClasses {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE2 is part of the x86-64 baseline: every processor that runs this
        // target has it.
        unsafe { sse2::classify(block) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        classify_bytewise(block)
    }
}

/// The classes of `block`, one byte at a time: the definition.
pub fn classify_bytewise(block: &[u8; 64]) -> BlockClasses {
    let mut c = BlockClasses::default();
    for (j, &x) in block.iter().enumerate() {
        let bit = 1u64 << j;
        let set = |class: &mut u64, member: bool| {
            if member {
                *class |= bit;
            }
        };
        set(&mut c.digit, x.is_ascii_digit());
        set(&mut c.nonzero_digit, matches!(x, b'1'..=b'9'));
        set(&mut c.card_first_digit, matches!(x, b'2'..=b'6'));
        set(&mut c.upper, x.is_ascii_uppercase());
        set(&mut c.hex, x.is_ascii_hexdigit());
        set(&mut c.space, x == b' ');
        set(
            &mut c.white,
            matches!(x, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c),
        );
        set(&mut c.dot, x == b'.');
        set(&mut c.dash, x == b'-');
        set(&mut c.colon, x == b':');
        set(&mut c.plus, x == b'+');
    }
    c
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::BlockClasses;
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_set_epi64x, _mm_sub_epi8,
    };

    /// Bytes of `v` from `lo` to `hi` (unsigned): `v - lo` is at most `hi - lo`.
    #[target_feature(enable = "sse2")]
    fn within(v: __m128i, lo: u8, hi: u8) -> __m128i {
        let t = _mm_sub_epi8(v, _mm_set1_epi8(lo as i8));
        _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8((hi - lo) as i8)), t)
    }

    /// Bytes of `v` equal to `c`.
    #[target_feature(enable = "sse2")]
    fn equal(v: __m128i, c: u8) -> __m128i {
        _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8))
    }

    /// The 16 bytes of `sixteen` in one register.
    #[target_feature(enable = "sse2")]
    fn load(sixteen: &[u8]) -> __m128i {
        let half = |from: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&sixteen[from..from + 8]);
            i64::from_le_bytes(word)
        };
        _mm_set_epi64x(half(8), half(0))
    }

    /// Which bytes of `block` are ASCII letters or digits, and with `token` also `+ / _ -`,
    /// 16 bytes at a step.
    #[target_feature(enable = "sse2")]
    pub fn alphanumeric(block: &[u8; 64], token: bool) -> u64 {
        let mut m = 0;
        for (q, sixteen) in block.chunks_exact(16).enumerate() {
            let v = load(sixteen);
            let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
            let mut set = _mm_or_si128(within(v, b'0', b'9'), within(folded, b'a', b'z'));
            if token {
                // `+` and `/` are 0x2b and 0x2f; `-` is 0x2d; `_` is 0x5f.
                let marks = _mm_or_si128(equal(v, b'+'), equal(v, b'/'));
                let joins = _mm_or_si128(equal(v, b'-'), equal(v, b'_'));
                set = _mm_or_si128(set, _mm_or_si128(marks, joins));
            }
            m |= u64::from(_mm_movemask_epi8(set) as u16) << (16 * q);
        }
        m
    }

    /// The classes of `block`, 16 bytes at a step.
    #[target_feature(enable = "sse2")]
    pub fn classify(block: &[u8; 64]) -> BlockClasses {
        let mut c = BlockClasses::default();
        for (q, sixteen) in block.chunks_exact(16).enumerate() {
            let v = load(sixteen);
            let bits = |m: __m128i| u64::from(_mm_movemask_epi8(m) as u16) << (16 * q);
            let digit = within(v, b'0', b'9');
            c.digit |= bits(digit);
            c.nonzero_digit |= bits(within(v, b'1', b'9'));
            c.card_first_digit |= bits(within(v, b'2', b'6'));
            c.upper |= bits(within(v, b'A', b'Z'));
            let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
            c.hex |= bits(_mm_or_si128(digit, within(folded, b'a', b'f')));
            let space = equal(v, b' ');
            c.space |= bits(space);
            c.white |= bits(_mm_or_si128(space, within(v, 0x09, 0x0d)));
            c.dot |= bits(equal(v, b'.'));
            c.dash |= bits(equal(v, b'-'));
            c.colon |= bits(equal(v, b':'));
            c.plus |= bits(equal(v, b'+'));
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_short_text_is_padded_with_bytes_of_no_class() {
        let c = BlockClasses::at(b"a1 -:+.Z\t", 0);
        assert_eq!(c.digit, 0b10);
        assert_eq!(c.nonzero_digit, 0b10);
        assert_eq!(c.card_first_digit, 0);
        assert_eq!(c.hex, 0b11);
        assert_eq!(c.space, 0b100);
        assert_eq!(c.white, 0b1_0000_0100);
        assert_eq!(c.dash, 0b1000);
        assert_eq!(c.colon, 0b1_0000);
        assert_eq!(c.plus, 0b10_0000);
        assert_eq!(c.dot, 0b100_0000);
        assert_eq!(c.upper, 0b1000_0000);
        assert_eq!(BlockClasses::at(b"a1", 2), BlockClasses::default());
        assert_eq!(BlockClasses::at(b"a1", usize::MAX), BlockClasses::default());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// The 16-bytes-a-step classes are the bytewise definition, for any bytes (those past
        /// ASCII included: no signed comparison may take them for digits).
        #[test]
        fn each_class_is_its_bytewise_definition(
            bytes in proptest::collection::vec(
                prop_oneof![any::<u8>(), "[0-9a-fA-Z .:+\\-\\t\\n]".prop_map(|s| s.as_bytes()[0])],
                64,
            ),
        ) {
            let mut block = [0u8; 64];
            block.copy_from_slice(&bytes);
            prop_assert_eq!(classify(&block), classify_bytewise(&block));
            prop_assert_eq!(BlockClasses::at(&bytes, 0), classify_bytewise(&block));
        }

        /// The same for letters and digits and for token bytes, a short tail padded with
        /// bytes in neither (`@`, `[`, `` ` `` and `{` stand beside the letters; `0xc1` and
        /// `0xfa` fold onto them; `,` and `.` beside `+`, `-` and `/`).
        #[test]
        fn letters_digits_and_token_bytes_are_their_bytewise_definition(
            bytes in proptest::collection::vec(
                prop_oneof![any::<u8>(), "[0-9a-zA-Z@\\[`{/:+,.\\-_^]".prop_map(|s| s.as_bytes()[0])],
                64,
            ),
            cut in 0usize..=64,
        ) {
            let mut block = [0u8; 64];
            block.copy_from_slice(&bytes);
            prop_assert_eq!(alphanumeric(&block), bytewise(&block, u8::is_ascii_alphanumeric));
            prop_assert_eq!(token_bytes(&block), bytewise(&block, is_token_byte));
            let mut short = [0u8; 64];
            short[..cut].copy_from_slice(&bytes[..cut]);
            let cut = &bytes[..cut];
            prop_assert_eq!(alphanumeric_at(cut, 0), bytewise(&short, u8::is_ascii_alphanumeric));
            prop_assert_eq!(token_bytes_at(cut, 0), bytewise(&short, is_token_byte));
        }
    }
}
