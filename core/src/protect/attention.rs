//! Which values of a JSON document, read in place, need a scan of their own.
//!
//! A document with something to remove has each string and long number scanned on its own
//! (under its key, decoded, with its base64 and nested JSON), which cost three times the
//! one pass that finds a document clean. One pass over the whole document marks the places
//! where such a scan could find anything: keyword hits, learned values and the findings of
//! the detectors without keywords
//! ([`Redactor::scan_document`](super::engine::Redactor::scan_document)), escapes, percent
//! signs, and base64 tokens whose text holds a finding. A value that no mark
//! overlaps is left as it was sent, unscanned. The marks are a necessary condition for a
//! finding, never a sufficient one: a marked value is scanned exactly as before, except that
//! where it is written without an escape, the survey's keyword hits and shapes inside it are
//! handed to its scan, which replays them instead of passing over the value again.

use std::ops::Range;

use super::engine::KeywordHit;
use super::learned;
use super::shape::{ShapeCompletion, Shapes};

/// The places of one document where a value's scan could find something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attention {
    /// Sorted, apart; `None` when the rules cannot say (every value is scanned).
    marks: Option<Vec<Range<usize>>>,
    /// How many values the learning scope held when the marks were made.
    learned_at: u64,
    /// Base64 tokens that decode to readable text holding no finding when the marks were
    /// made: one may once a value it holds is learned. Sorted, apart.
    readable: Vec<Range<usize>>,
    /// Every keyword hit of the document, by start, when the survey's pass gave them.
    keyword_hits: Option<Vec<KeywordHit>>,
    /// Where each shape of the document was completed, and its gate, when the survey found
    /// them ([`Shapes::marks`]).
    shape_completions: Option<Vec<ShapeCompletion>>,
}

impl Attention {
    /// Every value needs its scan.
    pub fn everywhere() -> Attention {
        Attention {
            marks: None,
            learned_at: 0,
            readable: Vec::new(),
            keyword_hits: None,
            shape_completions: None,
        }
    }

    /// The marks `marks` (in any order, overlapping or not), made while the learning scope
    /// held `learned_at` values ([`learned::learned_in_scope`]).
    pub fn from_marks(marks: Vec<Range<usize>>, learned_at: u64) -> Attention {
        Attention::with_readable_base64(marks, learned_at, Vec::new())
    }

    /// As [`Attention::from_marks`], with the base64 tokens `readable` (in order, apart)
    /// that decode to readable text holding no finding yet.
    pub fn with_readable_base64(
        mut marks: Vec<Range<usize>>,
        learned_at: u64,
        readable: Vec<Range<usize>>,
    ) -> Attention {
        marks.sort_unstable_by_key(|m| m.start);
        // Overlapping or touching marks become one.
        marks.dedup_by(|next, last| {
            let joined = next.start <= last.end;
            if joined {
                last.end = last.end.max(next.end);
            }
            joined
        });
        Attention {
            marks: Some(marks),
            learned_at,
            readable,
            keyword_hits: None,
            shape_completions: None,
        }
    }

    /// The same, knowing, where the survey kept them, every keyword hit of the document (in
    /// the keyword pass's order) and where each of its shapes was completed
    /// ([`Shapes::marks`]).
    pub fn with_keyword_hits(
        self,
        hits: Option<Vec<KeywordHit>>,
        shape_completions: Option<Vec<ShapeCompletion>>,
    ) -> Attention {
        Attention {
            shape_completions: shape_completions.filter(|_| hits.is_some()),
            keyword_hits: hits,
            ..self
        }
    }

    /// The same, the document's keyword hits and shapes forgotten (tests compare the two).
    #[cfg(test)]
    pub fn without_keyword_hits(self) -> Attention {
        Attention {
            keyword_hits: None,
            shape_completions: None,
            ..self
        }
    }

    /// The shapes of the string `inner` of the document (between its quotes), `text`, where
    /// the survey found them and it is ASCII (a string that is not passes every gate).
    pub fn shapes_within(&self, inner: Range<usize>, text: &str) -> Option<Shapes> {
        let completed = self.shape_completions.as_deref()?;
        text.is_ascii()
            .then(|| Shapes::completed_within(completed, inner))
    }

    /// The keyword hits that lie wholly within `range` of the document, moved to start from
    /// it, in the pass's order: every hit a pass over that text alone reports. `None` when
    /// the document's hits are not known.
    pub fn keyword_hits_within(
        &self,
        range: Range<usize>,
    ) -> Option<impl Iterator<Item = KeywordHit> + '_> {
        let hits = self.keyword_hits.as_deref()?;
        let from = hits.partition_point(|(_, h)| h.start < range.start);
        let inside = &hits[from..];
        let to = inside.partition_point(|(_, h)| h.start < range.end);
        Some(
            inside[..to]
                .iter()
                .filter(move |(_, h)| h.end <= range.end)
                .map(move |(p, h)| (*p, h.start - range.start..h.end - range.start)),
        )
    }

    /// True when the key or value at `range` of `text` must be scanned: it holds an escape or
    /// a `%` (it is scanned decoded, where marks on the text as written say nothing), a mark
    /// overlaps it, or a value learned after the marks were made (a secret removed earlier in
    /// the same document) stands in it or may stand behind a readable base64 token of it.
    pub fn needs_scan(&self, text: &str, range: Range<usize>) -> bool {
        let Some(marks) = &self.marks else {
            return true;
        };
        let Some(raw) = text.get(range.clone()) else {
            return true;
        };
        if memchr::memchr2(b'\\', b'%', raw.as_bytes()).is_some() {
            return true;
        }
        let i = marks.partition_point(|m| m.end <= range.start);
        if marks.get(i).is_some_and(|m| m.start < range.end) {
            return true;
        }
        if learned::learned_in_scope() == self.learned_at {
            return false;
        }
        let i = self.readable.partition_point(|m| m.end <= range.start);
        if self.readable.get(i).is_some_and(|m| m.start < range.end) {
            return true;
        }
        let mut hits = Vec::new();
        learned::find_in_scope(raw, &mut hits);
        !hits.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hits_within_a_range_are_those_wholly_inside_it_moved_to_its_start() {
        let hits = vec![
            (0, 2..6),
            (1, 4..7),
            (2, 5..9),
            (3, 5..11),
            (4, 9..10),
            (5, 11..12),
        ];
        let a = Attention::from_marks(vec![], 0).with_keyword_hits(Some(hits), None);
        let within = |r: Range<usize>| a.keyword_hits_within(r).map(Iterator::collect::<Vec<_>>);
        assert_eq!(
            within(4..11),
            Some(vec![(1, 0..3), (2, 1..5), (3, 1..7), (4, 5..6)])
        );
        assert_eq!(within(5..10), Some(vec![(2, 0..4), (4, 4..5)]));
        assert_eq!(within(12..20), Some(vec![]));
        assert_eq!(
            Attention::everywhere()
                .keyword_hits_within(0..4)
                .map(|h| h.count()),
            None
        );
    }

    #[test]
    fn a_value_is_scanned_where_a_mark_overlaps_it_and_only_there() {
        let a = Attention::from_marks(vec![30..31, 10..12, 11..15, 15..16], 0);
        assert_eq!(a.marks, Some(vec![10..16, 30..31]));
        let text = "x".repeat(40);
        let scanned: Vec<bool> = [0..10, 9..11, 16..30, 15..17, 29..31, 31..40, 12..13]
            .into_iter()
            .map(|r| a.needs_scan(&text, r))
            .collect();
        assert_eq!(
            scanned,
            [false, true, false, true, true, false, true],
            "touching is not overlapping"
        );
        assert!(Attention::everywhere().needs_scan(&text, 0..1));
        assert!(!Attention::from_marks(vec![], 0).needs_scan(&text, 0..40));
    }
}
