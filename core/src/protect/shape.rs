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

use super::block_classes::BlockClasses;

/// Where a shape was completed (a byte of the text) and its gate's bit, as
/// [`Shapes::marks`] reports it and [`Shapes::completed_within`] reads it.
pub type ShapeCompletion = (usize, u8);

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
    /// A run of digits and dots holding three dots, each right after a digit: a dotted IPv4
    /// address.
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
    /// In `completed`, each shape's gate (as [`Shapes::completed_within`] reads it) and the
    /// byte at which it is completed, in order of those bytes.
    pub fn marks(
        text: &str,
        out: &mut Vec<std::ops::Range<usize>>,
        completed: &mut Vec<ShapeCompletion>,
    ) -> Shapes {
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
            completed.push((i, gate.bit()));
            push(i..i + 1);
        });
        if ascii {
            Shapes(found)
        } else {
            Shapes::ALL
        }
    }

    /// The shapes of the ASCII string at `range` of a text whose shapes were completed where
    /// `completed` says ([`Shapes::marks`]), when bytes of no shape stand on either side of it
    /// (a JSON string's quotes): no shape runs across those, so the shapes completed inside
    /// it are the ones it holds alone.
    pub fn completed_within(
        completed: &[ShapeCompletion],
        range: std::ops::Range<usize>,
    ) -> Shapes {
        let from = completed.partition_point(|(at, _)| *at < range.start);
        let inside = &completed[from..];
        let to = inside.partition_point(|(at, _)| *at < range.end);
        Shapes(inside[..to].iter().fold(0, |bits, (_, gate)| bits | gate))
    }

    /// True when the text holds `gate`'s shape.
    pub fn has(self, gate: ShapeGate) -> bool {
        self.0 & gate.bit() != 0
    }
}

/// Calls `found` with each gate's shape and the byte at which it is completed, in order of
/// those bytes (at one byte, in the order of the list of gates below), 64 bytes a step.
///
/// Five shapes are a few bytes around one byte, tested for all 64 of a block at once with
/// shifts of its class masks. Three are runs that may cross blocks: a card's digits, a dotted
/// quad's dots, an IPv6 address's colons. Each is counted only at the few bytes that could
/// complete it, from where its run starts in the block, plus what the run carried in from the
/// blocks before ([`RunsCarried`]).
fn each_shape(b: &[u8], mut found: impl FnMut(ShapeGate, usize)) {
    let mut prev = BlockClasses::default();
    let mut cur = BlockClasses::at(b, 0);
    let mut carried = RunsCarried::default();
    let mut base = 0;
    while base < b.len() {
        let next = BlockClasses::at(b, base + 64);
        // Every shape holds a digit, a colon, a dot or a plus in the block where it is
        // completed; prose and JSON punctuation between numbers hold none.
        if cur.digit | cur.colon | cur.dot | cur.plus == 0 {
            carried = RunsCarried {
                // Hex letters alone go on an IPv6 run.
                colons: if cur.hex == u64::MAX {
                    carried.colons
                } else {
                    RunCount::default()
                },
                ..RunsCarried::default()
            };
            (prev, cur) = (cur, next);
            base += 64;
            continue;
        }
        let block = Block {
            prev: &prev,
            cur: &cur,
            next: &next,
        };
        let gates = [
            (
                ShapeGate::CountryAndCheckDigits,
                block.country_and_check_digits(),
            ),
            (ShapeGate::CardDigits, block.card_digits(&mut carried.card)),
            (ShapeGate::DottedQuad, block.dotted_quad(&mut carried.dots)),
            (ShapeGate::HexColons, block.hex_colons(&mut carried.colons)),
            (ShapeGate::PlusDigit, block.plus_digit()),
            (
                ShapeGate::DigitsSeparatorDigits,
                block.digits_separator_digits(),
            ),
            (ShapeGate::SocialSecurity, block.social_security()),
        ];
        let any = gates.iter().fold(0, |all, (_, m)| all | m);
        for j in set_bits(any) {
            for (gate, mask) in &gates {
                if mask & (1 << j) != 0 {
                    found(*gate, base + j as usize);
                }
            }
        }
        (prev, cur) = (cur, next);
        base += 64;
    }
}

/// One block's classes beside its neighbours' (for what stands a few bytes before or after).
struct Block<'a> {
    prev: &'a BlockClasses,
    cur: &'a BlockClasses,
    next: &'a BlockClasses,
}

/// What the runs that reach the end of a block carry into the next one.
#[derive(Default)]
struct RunsCarried {
    card: CardRun,
    dots: RunCount,
    colons: RunCount,
}

/// Within a run of digits and single spaces or dashes between digits: whether the card count
/// has begun (at a 2-6 with no digit before it) and how many digits it holds.
#[derive(Default, Clone, Copy)]
struct CardRun {
    begun: bool,
    digits: u64,
}

/// How many of a kind of byte a run holds so far, and whether it holds a pair of them (`::`).
#[derive(Default, Clone, Copy)]
struct RunCount {
    count: u64,
    pair: bool,
}

/// Bit `j` set when byte `j - k` of the block is in the class (`k` in 1..64).
fn back(prev: u64, cur: u64, k: u32) -> u64 {
    (cur << k) | (prev >> (64 - k))
}

/// Bit `j` set when byte `j + k` of the block is in the class (`k` in 1..64).
fn ahead(cur: u64, next: u64, k: u32) -> u64 {
    (cur >> k) | (next << (64 - k))
}

/// Bits `from..=to`.
fn bits(from: u32, to: u32) -> u64 {
    (u64::MAX >> (63 - to)) & (u64::MAX << from)
}

/// Where the run `run` holding byte `j` starts in the block: `None` when it holds every byte
/// before `j` (it may have begun in an earlier block).
fn run_start(run: u64, j: u32) -> Option<u32> {
    let outside = !run & (u64::MAX >> (63 - j)) & !(1 << j);
    (outside != 0).then(|| 64 - outside.leading_zeros())
}

impl Block<'_> {
    /// Bit `j` set when byte `j - k` is a digit.
    fn digit_back(&self, k: u32) -> u64 {
        back(self.prev.digit, self.cur.digit, k)
    }

    /// Bit `j` set when the `n` bytes from `j + from` are digits.
    fn digits_ahead(&self, from: u32, n: u32) -> u64 {
        (from..from + n).fold(u64::MAX, |m, k| {
            m & ahead(self.cur.digit, self.next.digit, k)
        })
    }

    /// Bit `j` set when the three bytes before `j` are digits.
    fn three_digits_back(&self) -> u64 {
        self.digit_back(1) & self.digit_back(2) & self.digit_back(3)
    }

    /// `+` and a digit 1-9.
    fn plus_digit(&self) -> u64 {
        self.cur.plus & ahead(self.cur.nonzero_digit, self.next.nonzero_digit, 1)
    }

    /// Three digits, a separator and four digits: at the separator.
    fn digits_separator_digits(&self) -> u64 {
        let c = self.cur;
        (c.white | c.dot | c.dash) & self.three_digits_back() & self.digits_ahead(1, 4)
    }

    /// `ddd-dd-dddd`: at the first dash.
    fn social_security(&self) -> u64 {
        self.cur.dash
            & self.three_digits_back()
            & self.digits_ahead(1, 2)
            & ahead(self.cur.dash, self.next.dash, 3)
            & self.digits_ahead(4, 4)
    }

    /// Two capitals and two digits: at the first digit.
    fn country_and_check_digits(&self) -> u64 {
        let upper = |k| back(self.prev.upper, self.cur.upper, k);
        self.cur.digit & self.digits_ahead(1, 1) & upper(1) & upper(2)
    }

    /// Digits and the spaces or dashes joining two of them: a card number's run.
    fn card_run(c: &BlockClasses, digit_before: u64, digit_after: u64) -> u64 {
        c.digit | ((c.space | c.dash) & digit_before & digit_after)
    }

    fn card_digits(&self, carried: &mut CardRun) -> u64 {
        let c = self.cur;
        let run = Block::card_run(c, self.digit_back(1), ahead(c.digit, self.next.digit, 1));
        // Bit 0 of the previous block's run is not needed (only its last twelve are).
        let prev_run = Block::card_run(
            self.prev,
            self.prev.digit << 1,
            ahead(self.prev.digit, c.digit, 1),
        );
        // A digit that makes thirteen has twelve bytes of the run before it: thirteen in a
        // row, found by doubling (two, four, eight, twelve, thirteen) over the two blocks'
        // runs as one 128-bit mask rather than twelve shifts (dates, ids and hex runs of ten
        // and more took most of them).
        let both = (u128::from(run) << 64) | u128::from(prev_run);
        let two = both & (both << 1);
        let four = two & (two << 2);
        let eight = four & (four << 4);
        let thirteen = ((eight & (four << 8) & (both << 12)) >> 64) as u64;
        // Where the count may begin: a 2-6 with no digit before it.
        let begins = c.card_first_digit & !self.digit_back(1);
        let carried_in = *carried;
        let state_at = |j: u32| -> CardRun {
            let (from, before) = match run_start(run, j) {
                Some(s) => (s, CardRun::default()),
                None => (0, carried_in),
            };
            if before.begun {
                return CardRun {
                    begun: true,
                    digits: before.digits + u64::from((c.digit & bits(from, j)).count_ones()),
                };
            }
            match begins & bits(from, j) {
                0 => CardRun::default(),
                b => CardRun {
                    begun: true,
                    digits: u64::from((c.digit & bits(b.trailing_zeros(), j)).count_ones()),
                },
            }
        };
        completed_in_run(
            run,
            c.digit & thirteen,
            state_at,
            |n| n.digits >= 13,
            carried,
        )
    }

    /// A dot in a run of digits and dots that holds three dots after digits up to it.
    fn dotted_quad(&self, carried: &mut RunCount) -> u64 {
        let c = self.cur;
        let run = c.digit | c.dot;
        let prev_run = self.prev.digit | self.prev.dot;
        let after_digit = c.dot & self.digit_back(1);
        // Three dots after digits take six bytes of the run: five before the third.
        let candidates = (1..6).fold(after_digit, |m, k| m & back(prev_run, run, k));
        counted_run(run, after_digit, 0, candidates, carried, |n| n.count >= 3)
    }

    /// A colon in a run of hex digits and colons that holds seven colons, or `::`, up to it.
    fn hex_colons(&self, carried: &mut RunCount) -> u64 {
        let c = self.cur;
        let run = c.hex | c.colon;
        let prev_run = self.prev.hex | self.prev.colon;
        let pairs = c.colon & back(self.prev.colon, c.colon, 1);
        let candidates = c.colon & back(prev_run, run, 1);
        counted_run(run, c.colon, pairs, candidates, carried, |n| {
            n.count >= 7 || n.pair
        })
    }
}

/// The candidates `candidates` (members of `run`) at which the count of `members` (and of
/// `pairs`) in their run, from where it starts (or, run from an earlier block, from what it
/// carried), passes `complete`; `carried` then becomes what the run at the block's end holds.
fn counted_run(
    run: u64,
    members: u64,
    pairs: u64,
    candidates: u64,
    carried: &mut RunCount,
    complete: impl Fn(RunCount) -> bool,
) -> u64 {
    let carried_in = *carried;
    let state_at = |j: u32| {
        let (from, before) = match run_start(run, j) {
            Some(s) => (s, RunCount::default()),
            None => (0, carried_in),
        };
        // `count_ones` is a dozen instructions without POPCNT (not in the x86-64
        // baseline): most runs hold no member.
        let held = members & bits(from, j);
        RunCount {
            count: before.count
                + if held == 0 {
                    0
                } else {
                    u64::from(held.count_ones())
                },
            pair: before.pair || pairs & bits(from, j) != 0,
        }
    };
    completed_in_run(run, candidates, state_at, complete, carried)
}

/// The candidates `candidates` (members of `run`) whose state, as `state_at` tells it, passes
/// `complete`; `carried` then becomes the state at the block's last byte when the run reaches
/// it, and starts afresh when it does not.
fn completed_in_run<S: Default>(
    run: u64,
    candidates: u64,
    state_at: impl Fn(u32) -> S,
    complete: impl Fn(S) -> bool,
    carried: &mut S,
) -> u64 {
    let out = set_bits(candidates)
        .filter(|&j| complete(state_at(j)))
        .fold(0, |out, j| out | 1 << j);
    *carried = if run >> 63 != 0 {
        state_at(63)
    } else {
        S::default()
    };
    out
}

/// The positions of the bits set in `mask`, lowest first.
fn set_bits(mut mask: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let j = mask.trailing_zeros();
            mask &= mask - 1;
            j
        })
    })
}

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

    /// The gates one byte at a time, as the definitions read (no class table, no run taken
    /// whole, no block): what `each_shape` must report exactly.
    fn each_shape_bytewise(b: &[u8]) -> Vec<(ShapeGate, usize)> {
        let mut out = Vec::new();
        let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
        let digits = |from: usize, n: usize| (from..from + n).all(digit);
        let (mut card, mut dots, mut colons, mut double_colon) = (0usize, 0usize, 0usize, false);
        for (i, &c) in b.iter().enumerate() {
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
            // Digits go on a dotted quad's run; only a dot right after a digit counts.
            match c {
                b'.' if i >= 1 && digit(i - 1) => dots += 1,
                b'.' => {}
                _ => dots = 0,
            }
            if c == b'.' && i >= 1 && digit(i - 1) && dots >= 3 {
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

        /// The shapes completed inside a quoted string of a text are the string's own shapes,
        /// whatever stands around its quotes.
        #[test]
        fn a_quoted_strings_shapes_are_those_completed_inside_it(
            parts in proptest::collection::vec(
                "([0-9]{1,16}|[a-fA-F]{1,6}|[g-zG-Z{},_]{1,12}|[ .:+\\-]|:[0-9a-fA-F]{1,4}){0,8}",
                1..6,
            ),
        ) {
            let text = parts.join("\"");
            let (mut marks, mut completed) = (Vec::new(), Vec::new());
            Shapes::marks(&text, &mut marks, &mut completed);
            let mut at = 0;
            for part in &parts {
                let inner = at..at + part.len();
                prop_assert_eq!(
                    Shapes::completed_within(&completed, inner).0,
                    Shapes::of(part).0,
                    "{:?} in {:?}", part, text
                );
                at += part.len() + 1;
            }
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
