//! Where a detector's group stands in a match, known from the match alone.
//!
//! Finding a capture group costs the regex crate a second engine over every match (a bounded
//! backtracker, 0.3-0.6 µs on a 60-byte value): most of a marked value's scan. Most catalogue
//! rules have one of two shapes whose group follows from the match's own bounds:
//! - zero-width assertions around the group (`\b(ghp_…)\b`): the group is the match;
//! - one character of context on each side, or the text's edge
//!   (`(?:^|[^A-Za-z0-9_\-])(sk-…)(?:[^A-Za-z0-9_\-]|$)`), where no string of the group
//!   begins with a character the context before may be, or ends with one the context after
//!   may be: then whether the match's first (last) character is context is decided by that
//!   character alone.
//!
//! The shape and both conditions are read from the regex's syntax tree; any other rule keeps
//! the capture pass.

use regex_syntax::hir::{Class, ClassUnicode, Hir, HirKind, Look};

/// How a detector's group is found in a match.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupPlace {
    /// By the regex's capture pass.
    Captured,
    /// The whole match.
    WholeMatch,
    /// The match less its first character where `before` holds it (else the match began at
    /// the text's start) and less its last where `after` holds it (else it ended at the end).
    Trimmed {
        /// The context before the group: one character of this class, or the text's start.
        before: ClassUnicode,
        /// The context after the group: one character of this class, or the text's end.
        after: ClassUnicode,
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
        // The group must be the only one, and never empty.
        if capture.index != 1
            || holds_capture(body)
            || body.properties().minimum_len().is_none_or(|n| n == 0)
        {
            return GroupPlace::Captured;
        }
        let (pre, post) = (&items[..at], &items[at + 1..]);
        if pre
            .iter()
            .chain(post)
            .all(|h| matches!(h.kind(), HirKind::Look(_)))
        {
            return GroupPlace::WholeMatch;
        }
        let ([pre], [post]) = (pre, post) else {
            return GroupPlace::Captured;
        };
        let (Some(before), Some(after), Some(first), Some(last)) = (
            one_char_or_edge(pre, Look::Start),
            one_char_or_edge(post, Look::End),
            edge_chars(body, End::First),
            edge_chars(body, End::Last),
        ) else {
            return GroupPlace::Captured;
        };
        let disjoint = |a: &ClassUnicode, b: &ClassUnicode| {
            let mut both = a.clone();
            both.intersect(b);
            both.ranges().is_empty()
        };
        if disjoint(&first, &before) && disjoint(&last, &after) {
            GroupPlace::Trimmed { before, after }
        } else {
            GroupPlace::Captured
        }
    }

    /// The group's bytes in `text` for the match at `m`; `None` for [`GroupPlace::Captured`].
    pub fn group(&self, text: &str, m: std::ops::Range<usize>) -> Option<std::ops::Range<usize>> {
        match self {
            GroupPlace::Captured => None,
            GroupPlace::WholeMatch => Some(m),
            GroupPlace::Trimmed { before, after } => {
                let inside = text.get(m.clone())?;
                let first = inside.chars().next()?;
                let last = inside.chars().next_back()?;
                // Past the text's start the context must be a character; at it, a character
                // of the class, since no string of the group begins with one.
                let start = if m.start > 0 || holds(before, first) {
                    m.start + first.len_utf8()
                } else {
                    m.start
                };
                let end = if m.end < text.len() || holds(after, last) {
                    m.end - last.len_utf8()
                } else {
                    m.end
                };
                (start < end).then_some(start..end)
            }
        }
    }
}

fn holds(class: &ClassUnicode, c: char) -> bool {
    class
        .ranges()
        .iter()
        .any(|r| r.start() <= c && c <= r.end())
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

/// The class of `(?:edge|[class])` (either order), where `edge` is the text's start or end.
fn one_char_or_edge(h: &Hir, edge: Look) -> Option<ClassUnicode> {
    let HirKind::Alternation(items) = h.kind() else {
        return None;
    };
    let mut class = None;
    let mut has_edge = false;
    for item in items {
        match item.kind() {
            HirKind::Look(look) if *look == edge => has_edge = true,
            HirKind::Class(Class::Unicode(c)) if class.is_none() => class = Some(c.clone()),
            _ => return None,
        }
    }
    class.filter(|_| has_edge && items.len() == 2)
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
        assert!(matches!(
            GroupPlace::of(
                r"(?:^|[^A-Za-z0-9_\-])(sk-[A-Za-z0-9]{20,})(?:[^A-Za-z0-9_\-]|$)",
                1
            ),
            GroupPlace::Trimmed { .. }
        ));
        for refused in [
            // The group may begin with what the context before may be.
            r"(?:^|[^a-z])([a-z0-9]+)(?:[^a-z0-9]|$)",
            // ... or end with what the context after may be.
            r"(?:^|[^a-z])([a-z]+[0-9]?)(?:[^a-z]|$)",
            // Multi-line edges, two groups, an empty group, more context.
            r"(?m)(?:^|[^a-z])([a-z]+)(?:[^a-z]|$)",
            r"(?:^|[^a-z])([a-z]+)(x)?(?:[^a-z]|$)",
            r"(?:^|[^a-z])([a-z]*)(?:[^a-z]|$)",
            r"key[:=](?:^|[^a-z])([a-z]+)(?:[^a-z]|$)",
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
}
