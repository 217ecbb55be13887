//! The keyword pass: every place any detector's keyword (or key-rule literal) stands in a
//! text, ASCII case ignored.
//!
//! The keywords begin with most letters, so an automaton stepped over every byte (a full
//! Aho-Corasick DFA, about 1.7 ns a byte with a few hundred keywords: one dependent table
//! look-up per byte) was the largest part of surveying a document. Here a table of the
//! keywords' first three bytes (hashed, case-folded) is read at every byte, which has no
//! chain from one byte to the next, and the automaton walks anchored only from the few places
//! that pass (about 3% of the bytes of JSON tool payloads). The hash of every trigram of an
//! eight-byte word comes from one shift-and-xor of the word, and the table holds a byte per
//! slot, not a bit: both cut the instructions per byte, the pass 3.6 -> 2.4 µs on a 2.2 KB
//! document. One-byte keywords are compared eight bytes at a time; two-byte ones stand in the
//! trigram table under every third byte.
//!
//! What it reports is exactly what an overlapping Aho-Corasick search reports, ordered by
//! start instead of end (a property test compares the two).

use std::ops::Range;

use aho_corasick::automaton::Automaton;
use aho_corasick::automaton::StateID;
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind, StartKind};

use super::lanes;

/// Slots in the trigram table, one byte each (64 KiB): a slot is read with no bit arithmetic.
const TRIGRAM_SLOTS: usize = 1 << 16;

/// The keyword search: a trigram filter and an anchored automaton.
#[derive(Debug, Clone)]
pub struct KeywordSearch {
    /// Anchored, ASCII case ignored, every match reported (standard semantics).
    dfa: DFA,
    /// Where every walk begins.
    start: StateID,
    /// Each keyword's length in bytes, by pattern index.
    lengths: Vec<usize>,
    /// Hashed case-folded first three bytes of the keywords of two bytes or more (a two-byte
    /// keyword under every possible third byte, zero standing for the text's end).
    trigrams: Box<[u8; TRIGRAM_SLOTS]>,
    /// Case-folded bytes that are whole keywords.
    single_bytes: Vec<u8>,
}

/// A keyword set the automaton cannot hold.
#[derive(Debug, thiserror::Error)]
#[error("keyword automaton: {0}")]
pub struct KeywordError(String);

impl KeywordSearch {
    /// The search for `keywords` (none empty: an empty keyword would stand everywhere, and
    /// the caller runs such a detector on every text instead).
    pub fn new(keywords: &[String]) -> Result<KeywordSearch, KeywordError> {
        if keywords.iter().any(String::is_empty) {
            return Err(KeywordError("an empty keyword".to_string()));
        }
        let dfa = DFA::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .start_kind(StartKind::Anchored)
            .prefilter(false)
            .build(keywords)
            .map_err(|e| KeywordError(e.to_string()))?;
        let start = dfa
            .start_state(Anchored::Yes)
            .map_err(|e| KeywordError(e.to_string()))?;
        let mut trigrams = Box::new([0u8; TRIGRAM_SLOTS]);
        let mut set = |t: u32| {
            trigrams[usize::from(hash(t))] = 1;
        };
        let mut single_bytes = Vec::new();
        for k in keywords {
            let b: Vec<u8> = k.bytes().map(|c| c.to_ascii_lowercase()).collect();
            match b.len() {
                1 => single_bytes.push(b[0]),
                2 => (0..=255u8).for_each(|c| set(trigram(b[0], b[1], c))),
                _ => set(trigram(b[0], b[1], b[2])),
            }
        }
        single_bytes.sort_unstable();
        single_bytes.dedup();
        Ok(KeywordSearch {
            dfa,
            start,
            lengths: keywords.iter().map(String::len).collect(),
            trigrams,
            single_bytes,
        })
    }

    /// Calls `hit` with each keyword's index and range where it stands in `text`, by start
    /// (shorter first at one start); stops, and returns false, as soon as `hit` says false.
    pub fn each(&self, text: &str, mut hit: impl FnMut(usize, Range<usize>) -> bool) -> bool {
        let b = text.as_bytes();
        // Sixteen bytes at a time, case-folded at once: the trigrams of the first fourteen
        // positions, tested without a branch; only a step with a candidate branches. (Eight
        // bytes a step gave six positions for the same load, fold and spread.)
        let mut i = 0;
        while let (Some(lo), Some(hi)) = (lanes::load(b, i), lanes::load(b, i + 8)) {
            let (lo, hi) = (lanes::fold_ascii(lo), lanes::fold_ascii(hi));
            let mut candidates =
                (self.single_byte_positions(lo) | self.single_byte_positions(hi) << 8) & 0x3fff;
            let z = spread_wide(u128::from(lo) | u128::from(hi) << 64);
            for k in 0..14 {
                candidates |= u32::from(self.trigrams[usize::from((z >> (8 * k)) as u16)]) << k;
            }
            if !self.walk_each(b, i, candidates, &mut hit) {
                return false;
            }
            i += 14;
        }
        // Then eight: the first six positions of a word.
        while let Some(x) = lanes::load(b, i) {
            let x = lanes::fold_ascii(x);
            let mut candidates = self.single_byte_positions(x) & 0x3f;
            let z = spread(x);
            for k in 0..6 {
                candidates |= u32::from(self.trigrams[usize::from((z >> (8 * k)) as u16)]) << k;
            }
            if !self.walk_each(b, i, candidates, &mut hit) {
                return false;
            }
            i += 6;
        }
        // The last few positions one by one, zero past the end.
        let folded = |i: usize| b.get(i).map_or(0, u8::to_ascii_lowercase);
        for i in i..b.len() {
            let candidate = self.may_start(trigram(folded(i), folded(i + 1), folded(i + 2)))
                || self.single_bytes.contains(&folded(i));
            if candidate && !self.walk(b, i, &mut hit) {
                return false;
            }
        }
        true
    }

    /// [`Self::walk`] from `at` plus each set bit of `candidates`, lowest first; false when
    /// `hit` said stop.
    fn walk_each(
        &self,
        b: &[u8],
        at: usize,
        mut candidates: u32,
        hit: &mut impl FnMut(usize, Range<usize>) -> bool,
    ) -> bool {
        while candidates != 0 {
            let k = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            if !self.walk(b, at + k, hit) {
                return false;
            }
        }
        true
    }

    /// False when no keyword of two bytes or more begins with the folded trigram `t`.
    fn may_start(&self, t: u32) -> bool {
        self.trigrams[usize::from(hash(t))] != 0
    }

    /// Bit k set where byte k of the folded word `x` is a one-byte keyword.
    fn single_byte_positions(&self, x: u64) -> u32 {
        let at = self
            .single_bytes
            .iter()
            .fold(0, |at, &c| at | lanes::equal(x, c));
        lanes::bits(at)
    }

    /// The keywords that start at `start`, through `hit`; false when `hit` said stop.
    fn walk(
        &self,
        b: &[u8],
        start: usize,
        hit: &mut impl FnMut(usize, Range<usize>) -> bool,
    ) -> bool {
        let mut sid = self.start;
        for (end, &c) in b.iter().enumerate().skip(start) {
            sid = self.dfa.next_state(Anchored::Yes, sid, c);
            if !self.dfa.is_special(sid) {
                continue;
            }
            if self.dfa.is_dead(sid) {
                break;
            }
            if self.dfa.is_match(sid) {
                let len = end + 1 - start;
                // A match state also holds the keywords that end here and began later
                // (suffixes of this one): they are reported from their own start.
                for k in 0..self.dfa.match_len(sid) {
                    let p = self.dfa.match_pattern(sid, k).as_usize();
                    if self.lengths.get(p) == Some(&len) && !hit(p, start..end + 1) {
                        return false;
                    }
                }
            }
        }
        true
    }
}

/// Three case-folded bytes as one number, the first lowest (as a little-endian load has them).
fn trigram(a: u8, b: u8, c: u8) -> u32 {
    u32::from(a) | (u32::from(b) << 8) | (u32::from(c) << 16)
}

/// A trigram's slot in the table: the low 16 bits of [`spread`] of its three bytes.
fn hash(t: u32) -> u16 {
    // The table holds exactly the 16 bits: no bounds check at the look-up.
    const _: () = assert!(TRIGRAM_SLOTS == 1 << 16);
    spread(u64::from(t & 0xff_ffff)) as u16
}

/// Each byte's bits mixed with the next two bytes' (shifts of at most eight bits, no carry):
/// the 16 bits from byte k of the result depend on bytes k to k+2 of `x` only, so one call
/// gives the hash of every trigram of a word.
fn spread(x: u64) -> u64 {
    x ^ (x >> 3) ^ (x >> 8) ^ (x >> 6)
}

/// [`spread`] over sixteen bytes: the 16 bits from byte k of the result are the hash of
/// bytes k to k+2, for every k up to 13.
fn spread_wide(x: u128) -> u128 {
    x ^ (x >> 3) ^ (x >> 8) ^ (x >> 6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aho_corasick::AhoCorasick;
    use proptest::prelude::*;

    fn overlapping(keywords: &[String], text: &str) -> Vec<(usize, Range<usize>)> {
        let ac = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(keywords)
            .expect("builds");
        let mut all: Vec<_> = ac
            .find_overlapping_iter(text)
            .map(|m| (m.pattern().as_usize(), m.range()))
            .collect();
        all.sort_by_key(|(p, r)| (r.start, r.end, *p));
        all
    }

    fn found(keywords: &[String], text: &str) -> Vec<(usize, Range<usize>)> {
        let mut all = Vec::new();
        KeywordSearch::new(keywords)
            .expect("builds")
            .each(text, |p, r| {
                all.push((p, r));
                true
            });
        all
    }

    #[test]
    fn finds_each_keyword_where_it_stands_by_start_case_ignored() {
        let k: Vec<String> = ["@", "sk", "sk-", "token", "ok", "kty"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            found(&k, "TOKEN sk-1 a@b sk"),
            vec![
                (3, 0..5),
                (4, 1..3),
                (1, 6..8),
                (2, 6..9),
                (0, 12..13),
                (1, 15..17)
            ]
        );
        assert_eq!(found(&k, ""), vec![]);
        assert_eq!(found(&k, "s"), vec![]);
    }

    #[test]
    fn stops_when_told() {
        let k: Vec<String> = ["a"].map(String::from).to_vec();
        let search = KeywordSearch::new(&k).expect("builds");
        let mut seen = 0;
        assert!(!search.each("aaaa", |_, _| {
            seen += 1;
            seen < 2
        }));
        assert_eq!(seen, 2);
    }

    #[test]
    fn an_empty_keyword_is_refused() {
        assert!(KeywordSearch::new(&["a".to_string(), String::new()]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// One spread of a word gives each of its first six positions' trigram hash, and one
        /// of two words each of their first fourteen (across the seam too): the hash the
        /// table was filled by.
        #[test]
        fn one_spread_hashes_every_trigram_of_its_words(x in any::<u128>()) {
            let (narrow, wide) = (spread(x as u64), spread_wide(x));
            for k in 0..14 {
                let t = (x >> (8 * k)) as u32 & 0xff_ffff;
                if k < 6 {
                    prop_assert_eq!((narrow >> (8 * k)) as u16, hash(t), "position {}", k);
                }
                prop_assert_eq!((wide >> (8 * k)) as u16, hash(t), "position {} of two", k);
            }
        }

        /// The trigram filter never hides a keyword: the hits are the overlapping
        /// automaton's, by start.
        #[test]
        fn the_hits_are_the_overlapping_automatons(
            keywords in proptest::collection::vec("[a-dA-D@é~-]{1,5}", 1..12),
            parts in proptest::collection::vec(
                prop_oneof!["[a-dA-D@é~ -]{1,6}", "[a-z]{0,3}"],
                0..16,
            ),
            keyword_parts in proptest::collection::vec(0usize..12, 0..6),
        ) {
            let mut text = parts.concat();
            for (n, k) in keyword_parts.iter().enumerate() {
                let kw = &keywords[k % keywords.len()];
                let kw = if n % 2 == 0 { kw.to_ascii_uppercase() } else { kw.clone() };
                let at = (n * 7) % (text.len() + 1);
                let at = (at..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
                text.insert_str(at, &kw);
            }
            let keywords: Vec<String> = keywords.iter().map(|k| k.to_ascii_lowercase()).collect();
            let mut hits = found(&keywords, &text);
            prop_assert!(hits.windows(2).all(|w| w[0].1.start <= w[1].1.start));
            hits.sort_by_key(|(p, r)| (r.start, r.end, *p));
            prop_assert_eq!(hits, overlapping(&keywords, &text));
        }
    }
}
