//! A byte every match of a detector's regex holds, read from its syntax tree.
//!
//! Most of a marked value's scan is the flagged detectors' regexes, each a search of its own
//! (0.1-0.4 µs on a short value, found or not). Many catalogue rules cannot match without
//! one particular byte (`@` of a URL's user information, `:` of a scheme, the `_` of a
//! vendor prefix): where the text lacks it, one `memchr` answers for the search. The byte is
//! a necessary condition only, derived soundly: literal bytes of a concatenation, bytes
//! every branch of an alternation holds, the body of a repetition that runs at least once.

use regex_syntax::hir::{Class, Hir, HirKind};

/// The bytes every match holds, as a 128-bit set of ASCII bytes.
type AsciiSet = u128;

/// The byte of `pattern` a text must hold for it to match, the rarest of those every match
/// holds by [`RARITY`]; `None` when there is none (or the pattern does not parse).
pub fn of(pattern: &str) -> Option<u8> {
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    rarest(required(&hir))
}

/// The ASCII bytes every string `hir` matches holds.
fn required(hir: &Hir) -> AsciiSet {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => 0,
        HirKind::Literal(lit) => lit
            .0
            .iter()
            .filter(|b| b.is_ascii())
            .fold(0, |set, &b| set | 1 << b),
        HirKind::Class(class) => single_ascii(class).map_or(0, |b| 1 << b),
        HirKind::Repetition(rep) if rep.min >= 1 => required(&rep.sub),
        HirKind::Repetition(_) => 0,
        HirKind::Capture(cap) => required(&cap.sub),
        HirKind::Concat(items) => items.iter().fold(0, |set, h| set | required(h)),
        HirKind::Alternation(items) => items.iter().map(required).reduce(|a, b| a & b).unwrap_or(0),
    }
}

/// The one ASCII byte `class` matches, if it matches exactly one character and it is ASCII.
fn single_ascii(class: &Class) -> Option<u8> {
    match class {
        Class::Unicode(c) => match c.ranges() {
            [r] if r.start() == r.end() && r.start().is_ascii() => Some(r.start() as u8),
            _ => None,
        },
        Class::Bytes(c) => match c.ranges() {
            [r] if r.start() == r.end() && r.start().is_ascii() => Some(r.start()),
            _ => None,
        },
    }
}

/// Bytes from rarest to most common in the text agents send (JSON, prose, code): the first
/// of a set's bytes in this order is the one looked for.
const RARITY: &[u8] = b"@$#~^|`\\!?;&%*<>[]{}()'+=ZQJXKVWYUFGHBPMCDLONTRSIEAzqjxkvwyufgbphmcdlontrsiea_/:,.-\"9876543210 \t\n\r";

fn rarest(set: AsciiSet) -> Option<u8> {
    RARITY
        .iter()
        .copied()
        .find(|&b| set & (1 << b) != 0)
        .or_else(|| {
            // A byte not ranked (a control character): any will do.
            (0..128u8).find(|&b| set & (1 << b) != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_byte_is_one_every_match_holds() {
        let cases: &[(&str, Option<u8>)] = &[
            // The rarest of `:`, `/` and `@`.
            (r"[a-z]+://[^:@/\s]+:([^@\s]+)@", Some(b'@')),
            // Each branch holds `@`; only one holds `:`.
            (r"x(?:@a|:@b)", Some(b'@')),
            // Optional bytes are not required.
            (r"(?:@)?x", Some(b'x')),
            (r"@{0,3}q", Some(b'q')),
            // A branch without the byte: nothing required.
            (r"@|b", None),
            // Case-insensitive letters are classes of two.
            (r"(?i)abc", None),
            (r"(?i)abc=", Some(b'=')),
            // Assertions hold no byte.
            (r"\b\w+\b", None),
            // Bytes that are not ASCII are not looked for.
            (r"é", None),
            (r"(", None),
        ];
        for &(pattern, byte) in cases {
            assert_eq!(of(pattern), byte, "{pattern}");
        }
    }

    /// Small patterns from literals, classes, groups, alternations and repetitions.
    fn pattern() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            "[a-c@:=_]".prop_map(|c| regex_syntax::escape(&c)),
            Just("[a-c]".to_string()),
            Just("[@:]".to_string()),
            Just(r"\d".to_string()),
            Just("(?i:b)".to_string()),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..4).prop_map(|v| v.concat()),
                prop::collection::vec(inner.clone(), 2..4)
                    .prop_map(|v| format!("(?:{})", v.join("|"))),
                (inner.clone(), 0..3u32, 0..3u32)
                    .prop_map(|(p, lo, extra)| format!("(?:{p}){{{lo},{}}}", lo + extra)),
                inner.prop_map(|p| format!("({p})")),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Every string a pattern matches holds the byte said to be required.
        #[test]
        fn every_match_holds_the_byte(
            (pattern, samples) in pattern().prop_flat_map(|p| {
                let strings = proptest::string::string_regex(&p).expect("generator");
                (Just(p), prop::collection::vec(strings, 1..16))
            })
        ) {
            let hir = regex_syntax::Parser::new().parse(&pattern).expect("parses");
            let set = required(&hir);
            let matcher = regex::Regex::new(&format!("^(?:{pattern})$")).expect("compiles");
            for s in &samples {
                prop_assert!(matcher.is_match(s), "{s:?} from {pattern}");
                for b in 0..128u8 {
                    if set & (1 << b) != 0 {
                        prop_assert!(s.as_bytes().contains(&b), "{:?} lacks {:?} ({pattern})", s, b as char);
                    }
                }
            }
        }
    }

    /// Every catalogue rule's true positives (as the catalogue's own tests list them) hold
    /// its byte.
    #[test]
    fn catalogue_true_positives_hold_their_byte() {
        let detectors = crate::protect::catalogue::default_detectors();
        let mut checked = 0;
        for (rule, text, _) in crate::protect::catalogue::tests::true_positives() {
            let Some(d) = detectors.iter().find(|d| d.id == rule) else {
                continue;
            };
            let Some(b) = of(&d.regex) else { continue };
            let re = regex::Regex::new(&d.regex).expect("catalogue regex");
            for m in re.find_iter(&text) {
                assert!(m.as_str().as_bytes().contains(&b), "{} on {text:?}", d.id);
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }
}
