//! Shape gates: cheap necessary conditions for the personal-data detectors that have no
//! keyword worth the name.
//!
//! Phone numbers, card numbers, IBANs, social security numbers and IP addresses have no
//! literal to look for, or only one character that nearly every string holds (`.`, `-`,
//! `:`), so the keyword pass flagged them on almost every string and the combined regex set
//! then ran over it. One pass over the bytes here finds, for each of them, the smallest shape
//! its regex cannot match without (three digits, a separator and four digits for a North
//! American number; thirteen digits from a 2-6, joined by single spaces or dashes, for a
//! card; ...), and a detector runs only where its shape is. Each gate is a necessary
//! condition of its detector's regex, never a sufficient one: a property test checks, for
//! every gated detector, that no string its regex matches is turned away. Text that is not
//! ASCII passes every gate (the regexes' `\d` and `\s` are Unicode classes; the byte tests
//! here are not).

use super::lanes;

/// A shape some detector's match cannot do without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeGate {
    /// `+` and a digit 1-9: an international phone number.
    PlusDigit,
    /// Three digits, one separator (space, `.`, `-`) and four digits: the end of every North
    /// American phone number.
    DigitsSeparatorDigits,
    /// `ddd-dd-dddd`: a US social security number.
    SocialSecurity,
    /// Thirteen digits in a run where single spaces or dashes may join digits, counted from
    /// a 2-6 with no digit before it: a card.
    CardDigits,
    /// Two capital letters and two digits: the start of an IBAN.
    CountryAndCheckDigits,
    /// A run of digits and dots holding three dots: a dotted IPv4 address.
    DottedQuad,
    /// A run of hex digits and colons holding `::` or seven colons: an IPv6 address.
    HexColons,
}

impl ShapeGate {
    /// The gate of a built-in detector, if it has one.
    pub fn of_detector(id: &str) -> Option<ShapeGate> {
        Some(match id {
            "phone_number_international" => ShapeGate::PlusDigit,
            "phone_number_north_american" => ShapeGate::DigitsSeparatorDigits,
            "us_social_security_number" => ShapeGate::SocialSecurity,
            "payment_card_number" => ShapeGate::CardDigits,
            "iban" => ShapeGate::CountryAndCheckDigits,
            "ipv4_address" => ShapeGate::DottedQuad,
            "ipv6_address" => ShapeGate::HexColons,
            _ => return None,
        })
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The gates a text passes, found in one pass over its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shapes(u8);

impl Shapes {
    /// Every gate open (text that is not ASCII).
    const ALL: Shapes = Shapes(u8::MAX);

    /// The shapes `text` holds.
    pub fn of(text: &str) -> Shapes {
        if !text.is_ascii() {
            return Shapes::ALL;
        }
        let mut found = 0u8;
        each_shape(text.as_bytes(), |gate, _| found |= gate.bit());
        Shapes(found)
    }

    /// The shapes `text` holds, and in `out` where some string of it may pass a gate: the
    /// byte at which each shape is completed, and every run of bytes that are not ASCII (a
    /// string holding one passes every gate). A string of `text` bounded by bytes of no
    /// shape (a JSON string's quotes) that holds none of these passes no gate on its own.
    pub fn marks(text: &str, out: &mut Vec<std::ops::Range<usize>>) -> Shapes {
        let b = text.as_bytes();
        let mut push = |at: std::ops::Range<usize>| match out.last_mut() {
            Some(last) if last.end >= at.start && last.start <= at.start => {
                last.end = last.end.max(at.end);
            }
            _ => out.push(at),
        };
        let ascii = text.is_ascii();
        if !ascii {
            let mut i = 0;
            while i < b.len() {
                if b[i].is_ascii() {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < b.len() && !b[i].is_ascii() {
                    i += 1;
                }
                push(start..i);
            }
        }
        let mut found = 0u8;
        each_shape(b, |gate, i| {
            found |= gate.bit();
            push(i..i + 1);
        });
        if ascii {
            Shapes(found)
        } else {
            Shapes::ALL
        }
    }

    /// True when the text holds `gate`'s shape.
    pub fn has(self, gate: ShapeGate) -> bool {
        self.0 & gate.bit() != 0
    }
}

/// Calls `found` with each gate's shape and the byte at which it is completed, in one pass
/// over `b` (bytes that are not ASCII end every run).
fn each_shape(b: &[u8], mut found: impl FnMut(ShapeGate, usize)) {
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let digits = |from: usize, n: usize| (from..from + n).all(digit);
    // Runs: digits joined by single spaces or dashes (cards), digits and dots (IPv4), hex
    // digits and colons (IPv6). Most bytes of most strings are letters and punctuation
    // of no shape (`OTHER`): they end every run and cost one table look-up.
    let (mut card, mut dots, mut colons, mut double_colon) = (0usize, 0usize, 0usize, false);
    let mut i = 0;
    while i < b.len() {
        // Eight bytes with no digit, `:` or `+` hold no part of any shape worth keeping
        // a run across (every shape has a digit or a colon within any eight bytes of it,
        // and every check at a separator looks at digits beside it): skip them at once.
        if let Some(x) = lanes::load(b, i) {
            if lanes::within(x, b'0', b':') | lanes::equal(x, b'+') == 0 {
                (card, dots, colons, double_colon) = (0, 0, 0, false);
                i += 8;
                continue;
            }
        }
        let c = b[i];
        let class = BYTE_CLASS[usize::from(c)];
        if class == DIGIT {
            // A run of digits at once (ids, amounts and timestamps are full of them). No
            // digit is before `i`: runs are taken whole, and eight bytes skipped hold none.
            let start = i;
            i += 1 + b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            // A card number begins with 2-6 where no digit is before it (its regex reads
            // a byte that is not one there): the run counts from its first such digit,
            // so long ids of zeros and epoch milliseconds (`1733385600000`) stay shut.
            // Two capitals before two digits: an IBAN's country and check digits.
            if start >= 2
                && i - start >= 2
                && b[start - 1].is_ascii_uppercase()
                && b[start - 2].is_ascii_uppercase()
            {
                found(ShapeGate::CountryAndCheckDigits, start);
            }
            if card > 0 || matches!(c, b'2'..=b'6') {
                // Each digit that makes the count 13 or more completes the shape.
                let from = start + 12_usize.saturating_sub(card);
                card += i - start;
                for at in from..i {
                    found(ShapeGate::CardDigits, at);
                }
            }
            continue;
        }
        if class == OTHER || class == HEX_LETTER {
            // Letters and bytes of no shape up to the next digit or separator, in one step:
            // any of no shape ends every run; hex letters alone (inside an IPv6 run) end a
            // card's and a dotted quad's run, and no check looks at a letter (hex ids and
            // digests are mostly these and digits). No eight bytes from one of them are
            // skipped whole: the eight from `i` hold a digit, `:` or `+`, at or after the
            // next digit or separator.
            let mut no_shape = class == OTHER;
            i += 1;
            while let Some(&c) = b.get(i) {
                match BYTE_CLASS[usize::from(c)] {
                    OTHER => no_shape = true,
                    HEX_LETTER => {}
                    _ => break,
                }
                i += 1;
            }
            if no_shape {
                (card, dots, colons, double_colon) = (0, 0, 0, false);
            } else {
                (card, dots) = (0, 0);
            }
            continue;
        }
        i += 1;
        // The body below reads `i` as the byte's own position.
        let i = i - 1;
        // Not a digit: the card run goes on only over one space or dash between digits.
        let between_digits = i >= 1 && digit(i - 1) && digit(i + 1);
        if !(matches!(c, b' ' | b'-') && between_digits) {
            card = 0;
        }
        if c == b'.' {
            dots += 1;
            if dots >= 3 {
                found(ShapeGate::DottedQuad, i);
            }
        } else {
            dots = 0;
        }
        if c == b':' {
            colons += 1;
            double_colon |= i >= 1 && b[i - 1] == b':';
            if colons >= 7 || double_colon {
                found(ShapeGate::HexColons, i);
            }
        } else {
            (colons, double_colon) = (0, false);
        }
        match c {
            b'+' if matches!(b.get(i + 1), Some(b'1'..=b'9')) => {
                found(ShapeGate::PlusDigit, i);
            }
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | b'.' | b'-'
                if i >= 3 && digits(i - 3, 3) && digits(i + 1, 4) =>
            {
                found(ShapeGate::DigitsSeparatorDigits, i);
            }
            _ => {}
        }
        if c == b'-'
            && i >= 3
            && digits(i - 3, 3)
            && digits(i + 1, 2)
            && b.get(i + 3) == Some(&b'-')
            && digits(i + 4, 4)
        {
            found(ShapeGate::SocialSecurity, i);
        }
    }
}

/// Bytes of no shape: letters other than hex digits and capitals before digits, quotes,
/// brackets, ... (an IBAN's capitals are looked at from its digits).
const OTHER: u8 = 0;
const DIGIT: u8 = 1;
/// `a`-`f` and `A`-`F`: inside an IPv6 run.
const HEX_LETTER: u8 = 2;
/// Separators and signs some shape is made of: whitespace, `.`, `-`, `:`, `+`.
const MARK: u8 = 3;

/// The class of each byte.
const BYTE_CLASS: [u8; 256] = {
    let mut t = [OTHER; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = if c.is_ascii_digit() {
            DIGIT
        } else if c.is_ascii_hexdigit() {
            HEX_LETTER
        } else if matches!(
            c,
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | b'.' | b'-' | b':' | b'+'
        ) {
            MARK
        } else {
            OTHER
        };
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_gate_opens_on_its_shape_and_stays_shut_on_look_alikes() {
        let cases: &[(&str, ShapeGate, bool)] = &[
            ("call +44 20 7946 0958", ShapeGate::PlusDigit, true),
            ("a+b and +0", ShapeGate::PlusDigit, false),
            ("(415) 555-0132", ShapeGate::DigitsSeparatorDigits, true),
            ("415.555.0132", ShapeGate::DigitsSeparatorDigits, true),
            (
                "2026-11-30T05:17:14.133Z",
                ShapeGate::DigitsSeparatorDigits,
                false,
            ),
            ("ssn 078-05-1120", ShapeGate::SocialSecurity, true),
            ("2026-11-30", ShapeGate::SocialSecurity, false),
            ("4111 1111 1111 1111", ShapeGate::CardDigits, true),
            ("4111-1111-1111-1", ShapeGate::CardDigits, true),
            ("ORD-00007919 and 2026-11-30", ShapeGate::CardDigits, false),
            ("4111  1111 1111 1111", ShapeGate::CardDigits, false),
            (
                "DE89 3704 0044 0532 0130 00",
                ShapeGate::CountryAndCheckDigits,
                true,
            ),
            ("ORD-1234 DE8", ShapeGate::CountryAndCheckDigits, false),
            ("host 10.1.2.3", ShapeGate::DottedQuad, true),
            ("version 1.2 and 3.4", ShapeGate::DottedQuad, false),
            ("fe80::1", ShapeGate::HexColons, true),
            (
                "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
                ShapeGate::HexColons,
                true,
            ),
            ("05:17:14 {\"a\":\"b\"}", ShapeGate::HexColons, false),
        ];
        for &(text, gate, open) in cases {
            assert_eq!(Shapes::of(text).has(gate), open, "{gate:?} on {text:?}");
        }
        assert!(Shapes::of("٤١٥-٥٥٥-٠١٣٢ façade").has(ShapeGate::SocialSecurity));
    }

    /// The gated detectors' regexes, from the catalogue (compiled once).
    fn gated() -> &'static [(ShapeGate, regex::Regex)] {
        static GATED: std::sync::LazyLock<Vec<(ShapeGate, regex::Regex)>> =
            std::sync::LazyLock::new(|| {
                crate::protect::catalogue::default_detectors()
                    .into_iter()
                    .filter_map(|d| {
                        let gate = d.gate?;
                        Some((gate, regex::Regex::new(&d.regex).expect("catalogue regex")))
                    })
                    .collect()
            });
        &GATED
    }

    /// Every gated regex that matches `text` finds its gate open on it.
    fn gates_hold(text: &str) -> Result<(), TestCaseError> {
        let shapes = Shapes::of(text);
        for (gate, regex) in gated() {
            if regex.is_match(text) {
                prop_assert!(shapes.has(*gate), "{:?} shut on {:?}", gate, text);
            }
        }
        Ok(())
    }

    #[test]
    fn every_gate_names_a_catalogue_detector() {
        assert_eq!(gated().len(), 7);
    }

    /// The gates one byte at a time, as the definitions read (eight bytes without a digit,
    /// `:` or `+` end every run; no run taken whole, no class table): what `each_shape` must
    /// report exactly.
    fn each_shape_bytewise(b: &[u8]) -> Vec<(ShapeGate, usize)> {
        let mut out = Vec::new();
        let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
        let digits = |from: usize, n: usize| (from..from + n).all(digit);
        let (mut card, mut dots, mut colons, mut double_colon) = (0usize, 0usize, 0usize, false);
        let mut next = 0;
        while next < b.len() {
            let i = next;
            next += 1;
            let plain = |c: &u8| !(c.is_ascii_digit() || matches!(c, b':' | b'+'));
            if b.get(i..i + 8).is_some_and(|w| w.iter().all(plain)) {
                (card, dots, colons, double_colon) = (0, 0, 0, false);
                next = i + 8;
                continue;
            }
            let c = b[i];
            if c.is_ascii_digit() {
                if card > 0 || (matches!(c, b'2'..=b'6') && !(i >= 1 && digit(i - 1))) {
                    card += 1;
                }
                if i >= 2
                    && digit(i + 1)
                    && b[i - 1].is_ascii_uppercase()
                    && b[i - 2].is_ascii_uppercase()
                {
                    out.push((ShapeGate::CountryAndCheckDigits, i));
                }
                if card >= 13 {
                    out.push((ShapeGate::CardDigits, i));
                }
                continue;
            }
            let between_digits = i >= 1 && digit(i - 1) && digit(i + 1);
            if !(matches!(c, b' ' | b'-') && between_digits) {
                card = 0;
            }
            dots = if c == b'.' { dots + 1 } else { 0 };
            if dots >= 3 {
                out.push((ShapeGate::DottedQuad, i));
            }
            if c == b':' {
                colons += 1;
                double_colon |= i >= 1 && b[i - 1] == b':';
                if colons >= 7 || double_colon {
                    out.push((ShapeGate::HexColons, i));
                }
            } else if !c.is_ascii_hexdigit() {
                (colons, double_colon) = (0, false);
            }
            match c {
                b'+' if matches!(b.get(i + 1), Some(b'1'..=b'9')) => {
                    out.push((ShapeGate::PlusDigit, i));
                }
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | b'.' | b'-'
                    if i >= 3 && digits(i - 3, 3) && digits(i + 1, 4) =>
                {
                    out.push((ShapeGate::DigitsSeparatorDigits, i));
                }
                _ => {}
            }
            if c == b'-'
                && i >= 3
                && digits(i - 3, 3)
                && digits(i + 1, 2)
                && b.get(i + 3) == Some(&b'-')
                && digits(i + 4, 4)
            {
                out.push((ShapeGate::SocialSecurity, i));
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Each shape is reported where it is completed, exactly as the byte-at-a-time
        /// definitions say, whatever runs of digits, hex letters and other bytes hold it.
        #[test]
        fn the_one_pass_reports_what_the_byte_at_a_time_definitions_do(
            text in "([0-9]{1,16}|[a-fA-F]{1,6}|[g-zG-Z\"{},_]{1,12}|[ .:+\\-]|:[0-9a-fA-F]{1,4}){0,24}"
        ) {
            let mut fast = Vec::new();
            each_shape(text.as_bytes(), |g, i| fast.push((g, i)));
            fast.sort_by_key(|&(g, i)| (i, g as u8));
            let mut slow = each_shape_bytewise(text.as_bytes());
            slow.sort_by_key(|&(g, i)| (i, g as u8));
            prop_assert_eq!(fast, slow, "{:?}", text);
        }

        /// No string a gated detector's regex matches is turned away by its gate: strings of
        /// the characters these shapes are made of, in any order.
        #[test]
        fn a_gate_never_turns_away_a_match(text in "[0-9 .:+()\\-A-Fa-fDEGBxZ\\t]{0,40}") {
            gates_hold(&text)?;
        }

        /// The same for strings built around each detector's own shape.
        #[test]
        fn a_gate_never_turns_away_a_built_match(
            pre in "[a-z0-9 .:+\\-]{0,6}",
            a in "[0-9]{1,4}", s1 in "[ .\\-:]?", b in "[0-9]{1,4}", s2 in "[ .\\-:]?",
            c in "[0-9]{1,4}", s3 in "[ .\\-:]?", d in "[0-9]{1,5}",
            post in "[a-z0-9 .:+\\-]{0,6}",
            plus in proptest::bool::ANY, paren in proptest::bool::ANY,
            cc in "[A-Z]{2}",
            octets in proptest::array::uniform4(0u8..=255),
            hextets in proptest::collection::vec("[0-9a-fA-F]{1,4}", 3..=8),
            gap in 0usize..8,
            ssn in "[0-9]{3}-[0-9]{2}-[0-9]{4}",
            phone in "(\\([2-9][0-9]{2}\\) ?|[2-9][0-9]{2}[ .\\-])[2-9][0-9]{2}[ .\\-][0-9]{4}",
            card in "[2-6][0-9]{3}([ \\-]?[0-9]{4}){2}[ \\-]?[0-9]{1,4}([ \\-]?[0-9]{1,3})?",
            // Long runs with no digit or colon around the shape: what the eight-byte skip
            // passes over.
            long in "[g-zG-Z\"'{},_ ]{8,24}",
        ) {
            let ipv4 = format!("{}.{}.{}.{}", octets[0], octets[1], octets[2], octets[3]);
            let cut = gap.min(hextets.len());
            let ipv6 = if hextets.len() == 8 {
                hextets.join(":")
            } else {
                format!("{}::{}", hextets[..cut].join(":"), hextets[cut..].join(":"))
            };
            let core = if paren { format!("({a}){s1}{b}{s2}{c}{s3}{d}") } else { format!("{a}{s1}{b}{s2}{c}{s3}{d}") };
            for text in [
                format!("{pre}{}{core}{post}", if plus { "+" } else { "" }),
                format!("{pre}{cc}{a}{b}{c}{d}{post}"),
                format!("{pre}{cc}{a} {b} {c} {d}{post}"),
                format!("{pre} {ipv4} {post}"),
                format!("{pre} {ssn} {post}"),
                format!("{pre} {phone} {post}"),
                format!("{pre} {card} {post}"),
                format!("{pre} {ipv6} {post}"),
            ] {
                gates_hold(&text)?;
                gates_hold(&format!("{long}{text}{long}"))?;
                gates_hold(&format!("{long}{text}"))?;
            }
        }
    }
}
