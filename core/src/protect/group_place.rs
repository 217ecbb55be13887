//! Where a detector's group stands in a match, known from the match alone.
//!
//! Finding a capture group costs the regex crate a second engine over every match (a bounded
//! backtracker, 0.2-0.6 µs on a 60-byte value): most of a marked value's scan. Most catalogue
//! rules have a shape whose group follows from the match's own bounds:
//! - zero-width assertions around the group (`\b(ghp_…)\b`): the group is the match;
//! - context on either side that no character of which may begin (end) the group: one
//!   character or the text's edge (`(?:^|[^A-Za-z0-9_\-])(sk-…)(?:[^A-Za-z0-9_\-]|$)`), or
//!   longer (`(?:[^\w\-.]|\.(?:[\s"]|$)|$)` after a phone number, which ends in a digit).
//!   Then the group begins at the match's first character that may begin it and ends after
//!   its last that may end it. Where some characters may be both (a phone number may begin
//!   with `(`, and `(` may stand before it), a match whose edge is one of them is left to
//!   the capture pass.
//!
//! The shape and the condition are read from the regex's syntax tree; any other rule keeps
//! the capture pass.

use regex_syntax::hir::{Class, ClassUnicode, Hir, HirKind};

/// How a detector's group is found in a match.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupPlace {
    /// By the regex's capture pass.
    Captured,
    /// The whole match.
    WholeMatch,
    /// From the match's first character of `first` to its last of `last`. A character of
    /// the context before the group may be in `first` only if it is in `unsure_first`, after
    /// it in `last` only if in `unsure_last`: where the match's first (last) character of
    /// `first` (`last`) is one of those, the capture pass tells.
    Trimmed {
        /// Every character the group may begin with.
        first: CharSet,
        /// Every character the group may end with.
        last: CharSet,
        /// The characters of `first` the context before may hold.
        unsure_first: CharSet,
        /// The characters of `last` the context after may hold.
        unsure_last: CharSet,
    },
}

impl GroupPlace {
    /// The place of capture group `group` of `pattern` (group 1 only; anything else, or a
    /// pattern that does not parse, is `Captured`).
    pub fn of(pattern: &str, group: usize) -> GroupPlace {
        if group != 1 {
            return GroupPlace::Captured;
        }
        let Ok(hir) = regex_syntax::Parser::new().parse(pattern) else {
            return GroupPlace::Captured;
        };
        let HirKind::Concat(items) = hir.kind() else {
            return GroupPlace::Captured;
        };
        let Some(at) = items
            .iter()
            .position(|h| matches!(h.kind(), HirKind::Capture(_)))
        else {
            return GroupPlace::Captured;
        };
        let HirKind::Capture(capture) = items[at].kind() else {
            return GroupPlace::Captured;
        };
        let body = &capture.sub;
        let (pre, post) = (&items[..at], &items[at + 1..]);
        // The group must be the only one, and never empty.
        if capture.index != 1
            || holds_capture(body)
            || pre.iter().chain(post).any(holds_capture)
            || body.properties().minimum_len().is_none_or(|n| n == 0)
        {
            return GroupPlace::Captured;
        }
        if pre
            .iter()
            .chain(post)
            .all(|h| matches!(h.kind(), HirKind::Look(_)))
        {
            return GroupPlace::WholeMatch;
        }
        let (Some(before), Some(after), Some(first), Some(last)) = (
            alphabet(pre),
            alphabet(post),
            edge_chars(body, End::First),
            edge_chars(body, End::Last),
        ) else {
            return GroupPlace::Captured;
        };
        let both = |a: &ClassUnicode, b: &ClassUnicode| {
            let mut both = a.clone();
            both.intersect(b);
            both
        };
        let (unsure_first, unsure_last) = (both(&first, &before), both(&last, &after));
        // Where every character that may begin (end) the group may also be context, the
        // match alone never tells.
        if unsure_first == first || unsure_last == last {
            return GroupPlace::Captured;
        }
        GroupPlace::Trimmed {
            first: CharSet::new(&first),
            last: CharSet::new(&last),
            unsure_first: CharSet::new(&unsure_first),
            unsure_last: CharSet::new(&unsure_last),
        }
    }

    /// The group's bytes in `text` for the match at `m`; `None` where the match alone does
    /// not tell (always for [`GroupPlace::Captured`]): the capture pass does.
    pub fn group(&self, text: &str, m: std::ops::Range<usize>) -> Option<std::ops::Range<usize>> {
        match self {
            GroupPlace::Captured => None,
            GroupPlace::WholeMatch => Some(m),
            GroupPlace::Trimmed {
                first,
                last,
                unsure_first,
                unsure_last,
            } => {
                let inside = text.get(m.clone())?;
                let (from, a) = inside.char_indices().find(|&(_, c)| first.holds(c))?;
                let (to, z) = inside.char_indices().rev().find(|&(_, c)| last.holds(c))?;
                if unsure_first.holds(a) || unsure_last.holds(z) {
                    return None;
                }
                let (start, end) = (m.start + from, m.start + to + z.len_utf8());
                (start < end).then_some(start..end)
            }
        }
    }
}

/// A set of characters, ASCII ones looked up in a bitmap: a context is mostly one or two
/// ASCII characters, and a Unicode class (`\w`) has hundreds of ranges.
#[derive(Debug, Clone, PartialEq)]
pub struct CharSet {
    ascii: u128,
    /// The ranges past ASCII, sorted.
    wide: Vec<(char, char)>,
}

impl CharSet {
    fn new(class: &ClassUnicode) -> CharSet {
        let mut ascii = 0u128;
        let mut wide = Vec::new();
        for r in class.ranges() {
            for c in r.start()..=r.end().min('\x7f') {
                ascii |= 1 << u32::from(c);
            }
            if r.end() > '\x7f' {
                wide.push((r.start().max('\u{80}'), r.end()));
            }
        }
        CharSet { ascii, wide }
    }

    fn holds(&self, c: char) -> bool {
        match u32::from(c) {
            n @ 0..=0x7f => self.ascii & (1 << n) != 0,
            _ => self
                .wide
                .binary_search_by(|&(lo, hi)| {
                    if hi < c {
                        std::cmp::Ordering::Less
                    } else if lo > c {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .is_ok(),
        }
    }
}

/// True when `h` holds a capture group.
fn holds_capture(h: &Hir) -> bool {
    match h.kind() {
        HirKind::Capture(_) => true,
        HirKind::Concat(items) | HirKind::Alternation(items) => items.iter().any(holds_capture),
        HirKind::Repetition(r) => holds_capture(&r.sub),
        _ => false,
    }
}

/// Every character any string of the concatenation `items` may hold; `None` where the tree
/// holds what this does not read (bytes classes, text that is not UTF-8).
fn alphabet(items: &[Hir]) -> Option<ClassUnicode> {
    let mut all = ClassUnicode::empty();
    for h in items {
        match h.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(lit) => {
                for c in std::str::from_utf8(&lit.0).ok()?.chars() {
                    all.union(&ClassUnicode::new([
                        regex_syntax::hir::ClassUnicodeRange::new(c, c),
                    ]));
                }
            }
            HirKind::Class(Class::Unicode(c)) => all.union(c),
            HirKind::Class(Class::Bytes(_)) => return None,
            HirKind::Repetition(r) => all.union(&alphabet(std::slice::from_ref(&r.sub))?),
            HirKind::Capture(c) => all.union(&alphabet(std::slice::from_ref(&c.sub))?),
            HirKind::Concat(items) | HirKind::Alternation(items) => all.union(&alphabet(items)?),
        }
    }
    Some(all)
}

/// Which end of a string.
#[derive(Clone, Copy)]
enum End {
    First,
    Last,
}

/// Every character a string `h` matches can begin (end) with, or more; `None` where the
/// tree holds what this does not read (bytes classes).
fn edge_chars(h: &Hir, end: End) -> Option<ClassUnicode> {
    let nullable = |h: &Hir| h.properties().minimum_len() == Some(0);
    Some(match h.kind() {
        HirKind::Empty | HirKind::Look(_) => ClassUnicode::empty(),
        HirKind::Literal(lit) => {
            let s = std::str::from_utf8(&lit.0).ok()?;
            let c = match end {
                End::First => s.chars().next()?,
                End::Last => s.chars().next_back()?,
            };
            ClassUnicode::new([regex_syntax::hir::ClassUnicodeRange::new(c, c)])
        }
        HirKind::Class(Class::Unicode(c)) => c.clone(),
        HirKind::Class(Class::Bytes(_)) => return None,
        HirKind::Repetition(r) => edge_chars(&r.sub, end)?,
        HirKind::Capture(c) => edge_chars(&c.sub, end)?,
        HirKind::Alternation(items) => {
            let mut all = ClassUnicode::empty();
            for item in items {
                all.union(&edge_chars(item, end)?);
            }
            all
        }
        HirKind::Concat(items) => {
            let mut all = ClassUnicode::empty();
            let ordered: Box<dyn Iterator<Item = &Hir>> = match end {
                End::First => Box::new(items.iter()),
                End::Last => Box::new(items.iter().rev()),
            };
            for item in ordered {
                all.union(&edge_chars(item, end)?);
                if !nullable(item) {
                    break;
                }
            }
            all
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_two_shapes_and_refuses_the_rest() {
        assert_eq!(
            GroupPlace::of(r"\b(ghp_[A-Za-z0-9]{36})\b", 1),
            GroupPlace::WholeMatch
        );
        for placed in [
            r"(?:^|[^A-Za-z0-9_\-])(sk-[A-Za-z0-9]{20,})(?:[^A-Za-z0-9_\-]|$)",
            // Context of more than one character, none of which may end the group.
            r#"(?:^|[^\w+\-.])([2-9]\d{2}[\s.\-]\d{4})(?:[^\w\-.]|\.(?:[\s"]|$)|$)"#,
            r"(?m)(?:^|[^a-z])([a-z]+)(?:[^a-z]|$)",
            r"(?:^|[^a-z])([a-z]+)",
        ] {
            assert!(
                matches!(GroupPlace::of(placed, 1), GroupPlace::Trimmed { .. }),
                "{placed}"
            );
        }
        for refused in [
            // Every character that may begin the group may be context before it.
            r"[^\n]{0,24}?(?:^|[^A-Za-z0-9+/_\-])([A-Za-z0-9+/_\-]{24,})",
            // ... or end it, after it.
            r"(?:^|[^a-z])([a-z]+)[a-z\-]*",
            // Two groups, an empty group, groups in an alternation.
            r"(?:^|[^a-z])([a-z]+)(x)?(?:[^a-z]|$)",
            r"(x)?(?:^|[^a-z])([a-z]+)(?:[^a-z]|$)",
            r"(?:^|[^a-z])([a-z]*)(?:[^a-z]|$)",
            r"(?:^|[^a-z])(?:([a-z]+)|([0-9]+))(?:[^a-z0-9]|$)",
        ] {
            assert_eq!(
                GroupPlace::of(refused, 1),
                GroupPlace::Captured,
                "{refused}"
            );
        }
        assert_eq!(GroupPlace::of(r"\b(a)\b", 0), GroupPlace::Captured);
    }

    #[test]
    fn trims_context_characters_and_keeps_edges() {
        let place = GroupPlace::of(r"(?:^|[^a-z])([a-z]+)(?:[^a-z]|$)", 1);
        let at = |text: &str| {
            let m = regex::Regex::new(r"(?:^|[^a-z])([a-z]+)(?:[^a-z]|$)")
                .expect("compiles")
                .find(text)
                .expect("matches");
            place.group(text, m.range()).map(|r| text[r].to_string())
        };
        assert_eq!(at("abc"), Some("abc".to_string()));
        assert_eq!(at("1abc"), Some("abc".to_string()));
        assert_eq!(at("abc2"), Some("abc".to_string()));
        assert_eq!(at("é abc é"), Some("abc".to_string()));
        assert_eq!(at("éabcé"), Some("abc".to_string()));
    }

    /// Where the character at a placed group's edge may also be context, the capture pass
    /// is asked; elsewhere the group is placed.
    #[test]
    fn an_edge_character_that_may_be_context_is_left_to_the_capture_pass() {
        for (pattern, text, placed) in [
            // The group may begin with a digit, which the context before may be.
            (r"(?:^|[^a-z])([a-z0-9]+)(?:[^a-z0-9]|$)", "1abc", None),
            (
                r"(?:^|[^a-z])([a-z0-9]+)(?:[^a-z0-9]|$)",
                "!abc1!",
                Some("abc1"),
            ),
            // ... or end with one, which the context after may be.
            (r"(?:^|[^a-z])([a-z]+[0-9]?)(?:[^a-z]|$)", "abc12", None),
            (
                r"(?:^|[^a-z])([a-z]+[0-9]?)(?:[^a-z]|$)",
                "abc!",
                Some("abc"),
            ),
            // `\d` is Unicode's: a digit past ASCII after the group.
            (r"(?:^|[^0-9a-z])([a-z]+\d)(?:[^0-9a-z]|$)", "ab1٣", None),
            (
                r"(?:^|[^0-9a-z])([a-z]+\d)(?:[^0-9a-z]|$)",
                "ab1 ",
                Some("ab1"),
            ),
            // Literal context holding what the group may begin with.
            (r"key[:=](?:^|[^a-z])([a-z]+)(?:[^a-z]|$)", "key=:abc", None),
            // A phone number in parentheses.
            (
                r#"(?:^|[^\w+\-.])((?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.\-])[2-9]\d{2}[\s.\-]\d{4})(?:[^\w\-.]|$)"#,
                "((415) 555-0132",
                None,
            ),
            (
                r#"(?:^|[^\w+\-.])((?:\([2-9]\d{2}\)\s?|[2-9]\d{2}[\s.\-])[2-9]\d{2}[\s.\-]\d{4})(?:[^\w\-.]|$)"#,
                " 415-555-0132 ",
                Some("415-555-0132"),
            ),
        ] {
            let place = GroupPlace::of(pattern, 1);
            assert!(matches!(place, GroupPlace::Trimmed { .. }), "{pattern}");
            let m = regex::Regex::new(pattern)
                .expect("compiles")
                .captures(text)
                .expect("matches");
            let group = place.group(text, m.get(0).expect("a match").range());
            assert_eq!(
                group.clone().map(|r| &text[r]),
                placed,
                "{pattern} on {text:?}"
            );
            if let Some(r) = group {
                assert_eq!(
                    m.get(1).map(|g| g.range()),
                    Some(r),
                    "{pattern} on {text:?}"
                );
            }
        }
    }

    #[test]
    fn trims_longer_context_to_the_groups_edge_characters() {
        let pattern = r#"(?:^|[^\w+\-.])([2-9]\d{2}[\s.\-]\d{4})(?:[^\w\-.]|\.(?:[\s"]|$)|$)"#;
        let place = GroupPlace::of(pattern, 1);
        let re = regex::Regex::new(pattern).expect("compiles");
        for (text, group) in [
            ("call 555-0132. now", "555-0132"),
            ("555-0132.", "555-0132"),
            ("(555-0132\")", "555-0132"),
            ("é 555 0132 é", "555 0132"),
            ("x 555.0132!", "555.0132"),
        ] {
            let m = re.captures(text).expect("matches");
            let placed = place.group(text, m.get(0).expect("a match").range());
            assert_eq!(placed.map(|r| &text[r]), Some(group), "{text}");
            assert_eq!(m.get(1).map(|g| g.as_str()), Some(group), "{text}");
        }
    }
}
