//! Items held back in a journal consumer until their trace names its tenant.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::binding::{self, Bindable};
use super::traces::Remembered;
use super::{log_unnamed, span_unnamed, trace_key, TenancyConfig, TraceKey};
use crate::event::{EventBatch, LogRecord, SpanRecord};
use crate::maps::FastMap;

/// What a consumer is handed for a journal record.
pub enum Bound {
    /// The record as it is: every item has its tenant.
    AsIs,
    /// The record's items with their trace's tenant, less those held back, plus held items
    /// of earlier records whose trace named its tenant in this one.
    Changed(EventBatch),
}

/// Why held items went on without a tenant of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresolved {
    /// Held for `tenancy.wait`.
    Wait,
    /// The consumer held more than its share of the memory budget.
    Capacity,
    /// The daemon stopped.
    Shutdown,
}

impl Unresolved {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Unresolved::Wait => "wait",
            Unresolved::Capacity => "capacity",
            Unresolved::Shutdown => "shutdown",
        }
    }
}

/// With no waiting, unnamed items go on at once: under their sender's home tenant where it
/// has one, else as they are.
fn go_on_unnamed(batch: &EventBatch) -> Bound {
    let homed = |sender: &Option<std::sync::Arc<crate::event::Sender>>| {
        sender
            .as_deref()
            .and_then(crate::event::Sender::home_tenant)
            .is_some()
    };
    let any = batch
        .spans
        .iter()
        .any(|s| span_unnamed(s) && homed(&s.sender))
        || batch
            .logs
            .iter()
            .any(|l| log_unnamed(l) && homed(&l.sender));
    if !any {
        return Bound::AsIs;
    }
    let mut out = batch.clone();
    for s in out.spans.iter_mut().filter(|s| span_unnamed(s)) {
        binding::release(&mut s.tenancy(), None);
    }
    for l in out.logs.iter_mut().filter(|l| log_unnamed(l)) {
        binding::release(&mut l.tenancy(), None);
    }
    Bound::Changed(out)
}

enum Item {
    Span(Box<SpanRecord>),
    Log(Box<LogRecord>),
}

impl Item {
    /// About the memory the item holds: its texts, and a fixed share for the rest of the
    /// record (resource and scope are shared with its batch) and per attribute.
    fn bytes(&self) -> usize {
        match self {
            Item::Span(s) => {
                let attributes = s.attributes.0.len()
                    + s.events
                        .iter()
                        .map(|e| 1 + e.attributes.0.len())
                        .sum::<usize>();
                512 + 32 * attributes + s.text_bytes()
            }
            Item::Log(l) => 384 + 32 * l.attributes.0.len() + l.text_bytes(),
        }
    }
}

/// Where held items count: the archive's memory budget, of which one consumer may hold an
/// eighth (three consumers hold the same items).
pub struct HeldBudget {
    budget: std::sync::Arc<crate::archive::write::buffer::SharedBudget>,
    share: usize,
}

impl HeldBudget {
    /// A consumer's share of `budget`.
    pub fn of(budget: std::sync::Arc<crate::archive::write::buffer::SharedBudget>) -> HeldBudget {
        let share = (budget.limit() / 8).max(1);
        HeldBudget { budget, share }
    }
}

/// One consumer's held items (see the module notes of [`crate::tenancy`]).
///
/// Exactly once across a crash: the consumer's checkpoint stays before the record of every
/// held item, and before the record of every released item until the consumer says the
/// record that released it is durable. Released items count as items of the releasing
/// record. While the consumer replays records an earlier process read (before
/// `replay_before`) nothing is released for time or room, so a release is never earlier in
/// the journal than the one before the crash.
pub struct HeldItems {
    wait: Duration,
    /// Most bytes held (the share of the memory budget), and the budget they count in.
    max_bytes: usize,
    budget: Option<HeldBudget>,
    bytes: usize,
    tenants: Remembered,
    held: FastMap<TraceKey, Vec<(u64, Item)>>,
    /// Traces in the order their first item was held (stale entries skipped).
    expiry: VecDeque<(Instant, TraceKey)>,
    count: usize,
    /// How many held items come from each journal record.
    origins: BTreeMap<u64, usize>,
    /// (releasing record, earliest record among what it released).
    released: VecDeque<(u64, u64)>,
    replay_before: u64,
    unresolved: Vec<(Unresolved, u64)>,
    /// Released items filed under their sender's home tenant, not their trace's, by sender.
    moved: BTreeMap<std::sync::Arc<str>, u64>,
}

impl HeldItems {
    /// Held items for one consumer; records before `replay_before` were read by an earlier
    /// process.
    ///
    /// Without [`HeldItems::counted_in`], at most 32 MiB is held.
    pub fn new(config: &TenancyConfig, replay_before: u64) -> HeldItems {
        HeldItems {
            wait: config.wait.0,
            max_bytes: 32 << 20,
            budget: None,
            bytes: 0,
            tenants: Remembered::new(config.remembered_traces.0),
            held: FastMap::default(),
            expiry: VecDeque::new(),
            count: 0,
            origins: BTreeMap::new(),
            released: VecDeque::new(),
            replay_before,
            unresolved: Vec::new(),
            moved: BTreeMap::new(),
        }
    }

    /// Held items count in `budget` and are bounded by the consumer's share of it.
    pub fn counted_in(mut self, budget: HeldBudget) -> HeldItems {
        self.max_bytes = budget.share;
        self.budget = Some(budget);
        self
    }

    /// Items held now.
    pub fn len(&self) -> usize {
        self.count
    }

    /// About the memory the held items take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn over_budget(&self) -> bool {
        self.bytes > self.max_bytes || self.budget.as_ref().is_some_and(|b| b.budget.far_over())
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Released items filed under their sender's home tenant because their trace's tenant
    /// is not one the sender may write, since the last call.
    pub fn take_moved(&mut self) -> BTreeMap<std::sync::Arc<str>, u64> {
        std::mem::take(&mut self.moved)
    }

    fn count_moved(&mut self, sender: &Option<std::sync::Arc<crate::event::Sender>>, moved: bool) {
        if let (true, Some(s)) = (moved, sender) {
            *self
                .moved
                .entry(std::sync::Arc::clone(&s.name))
                .or_default() += 1;
        }
    }

    /// Items that went on without a tenant since the last call, by reason.
    pub fn take_unresolved(&mut self) -> Vec<(Unresolved, u64)> {
        std::mem::take(&mut self.unresolved)
    }

    /// Binds journal record `seq`'s `batch`.
    pub fn bind(&mut self, seq: u64, batch: &EventBatch, now: Instant) -> Bound {
        if self.wait.is_zero() {
            return go_on_unnamed(batch);
        }
        // The intake filed every named item under its trace's tenant as known then: the
        // latest is the one to follow.
        let mut learned = Vec::new();
        for s in batch.spans.iter().filter(|s| !span_unnamed(s)) {
            let key = trace_key(&s.sender, s.trace_id);
            self.tenants.learn_latest(key, &s.tenant);
            if self.held.contains_key(&key) {
                learned.push(key);
            }
        }
        for l in batch.logs.iter().filter(|l| !log_unnamed(l)) {
            if let Some(trace) = l.trace_id {
                let key = trace_key(&l.sender, trace);
                self.tenants.learn_latest(key, &l.tenant);
                if self.held.contains_key(&key) {
                    learned.push(key);
                }
            }
        }
        // A root naming no tenant settles its trace: what waited for it goes on now.
        let settled: Vec<TraceKey> = batch
            .spans
            .iter()
            .filter(|s| s.parent_span_id.is_none() && span_unnamed(s))
            .map(|s| trace_key(&s.sender, s.trace_id))
            .filter(|key| self.held.contains_key(key))
            .collect();
        let known = |key: &TraceKey| self.tenants.get(key).is_some();
        let waits = batch.spans.iter().any(|s| {
            span_unnamed(s) && (s.tenant_pending || known(&trace_key(&s.sender, s.trace_id)))
        }) || batch.logs.iter().any(|l| {
            log_unnamed(l)
                && l.trace_id
                    .is_some_and(|t| l.tenant_pending || known(&trace_key(&l.sender, t)))
        });
        if !waits && learned.is_empty() && settled.is_empty() {
            return go_on_unnamed(batch);
        }
        let mut out = EventBatch::default();
        for s in &batch.spans {
            if !span_unnamed(s) {
                out.spans.push(s.clone());
                continue;
            }
            let key = trace_key(&s.sender, s.trace_id);
            match self.tenants.get(&key) {
                Some(t) => {
                    let t = std::sync::Arc::clone(t);
                    let mut s = s.clone();
                    let moved = binding::release(&mut s.tenancy(), Some(&*t));
                    self.count_moved(&s.sender, moved);
                    out.spans.push(s);
                }
                None if s.tenant_pending => {
                    self.hold(seq, key, Item::Span(Box::new(s.clone())), now);
                }
                None => {
                    let mut s = s.clone();
                    binding::release(&mut s.tenancy(), None);
                    out.spans.push(s);
                }
            }
        }
        for l in &batch.logs {
            let trace = l
                .trace_id
                .filter(|_| log_unnamed(l))
                .map(|t| trace_key(&l.sender, t));
            let Some(trace) = trace else {
                out.logs.push(l.clone());
                continue;
            };
            match self.tenants.get(&trace) {
                Some(t) => {
                    let t = std::sync::Arc::clone(t);
                    let mut l = l.clone();
                    let moved = binding::release(&mut l.tenancy(), Some(&*t));
                    self.count_moved(&l.sender, moved);
                    out.logs.push(l);
                }
                None if l.tenant_pending => {
                    self.hold(seq, trace, Item::Log(Box::new(l.clone())), now);
                }
                None => {
                    let mut l = l.clone();
                    binding::release(&mut l.tenancy(), None);
                    out.logs.push(l);
                }
            }
        }
        let mut earliest = u64::MAX;
        for trace in learned {
            earliest = earliest.min(self.release_trace(&trace, true, &mut out));
        }
        for trace in settled {
            earliest = earliest.min(self.release_trace(&trace, false, &mut out));
        }
        if seq >= self.replay_before {
            while self.over_budget() {
                let n = self.release_oldest(&mut out, &mut earliest);
                if n == 0 {
                    break;
                }
                self.count_unresolved(Unresolved::Capacity, n);
            }
        }
        if earliest != u64::MAX {
            self.released.push_back((seq, earliest));
        }
        Bound::Changed(out)
    }

    /// Items held for `wait` at `now`, under the tenant they have; `last_seq` is the last
    /// record read, which they count as. `None` when nothing is due (or during replay).
    pub fn expire(&mut self, now: Instant, last_seq: u64) -> Option<EventBatch> {
        if self.count == 0 || last_seq < self.replay_before {
            return None;
        }
        let mut out = EventBatch::default();
        let mut earliest = u64::MAX;
        let mut n = 0;
        while let Some(&(at, _)) = self.expiry.front() {
            if now.saturating_duration_since(at) < self.wait {
                break;
            }
            n += self.release_oldest(&mut out, &mut earliest);
        }
        self.finish_release(out, earliest, last_seq, Unresolved::Wait, n)
    }

    /// Everything held, at shutdown, under the tenant it has. Not while replaying: then it
    /// stays held, the checkpoint before it, for the next start.
    pub fn release_all(&mut self, last_seq: u64) -> Option<EventBatch> {
        if last_seq < self.replay_before {
            return None;
        }
        let mut out = EventBatch::default();
        let mut earliest = u64::MAX;
        let mut n = 0;
        while self.count > 0 {
            let released = self.release_oldest(&mut out, &mut earliest);
            if released == 0 {
                break;
            }
            n += released;
        }
        self.finish_release(out, earliest, last_seq, Unresolved::Shutdown, n)
    }

    fn finish_release(
        &mut self,
        out: EventBatch,
        earliest: u64,
        seq: u64,
        why: Unresolved,
        n: u64,
    ) -> Option<EventBatch> {
        if n == 0 {
            return None;
        }
        self.count_unresolved(why, n);
        self.released.push_back((seq, earliest));
        Some(out)
    }

    /// The consumer's checkpoint given that it has made everything before `durable` durable:
    /// not past a held item's record, nor past an unfinished release's.
    pub fn checkpoint(&mut self, durable: u64) -> u64 {
        while self.released.front().is_some_and(|&(at, _)| at < durable) {
            self.released.pop_front();
        }
        let held = self.origins.keys().next().copied();
        let released = self.released.iter().map(|&(_, first)| first).min();
        [held, released]
            .into_iter()
            .flatten()
            .fold(durable, u64::min)
    }

    fn hold(&mut self, seq: u64, trace: TraceKey, item: Item, now: Instant) {
        let bytes = item.bytes();
        self.bytes += bytes;
        if let Some(b) = &self.budget {
            b.budget
                .change(isize::try_from(bytes).unwrap_or(isize::MAX));
        }
        let items = self.held.entry(trace).or_default();
        if items.is_empty() {
            self.expiry.push_back((now, trace));
        }
        items.push((seq, item));
        self.count += 1;
        *self.origins.entry(seq).or_default() += 1;
    }

    /// Releases the trace held longest; returns how many items went.
    fn release_oldest(&mut self, out: &mut EventBatch, earliest: &mut u64) -> u64 {
        while let Some((_, trace)) = self.expiry.pop_front() {
            if self.held.contains_key(&trace) {
                let before = out.spans.len() + out.logs.len();
                *earliest = (*earliest).min(self.release_trace(&trace, false, out));
                return (out.spans.len() + out.logs.len() - before) as u64;
            }
        }
        0
    }

    /// Moves a trace's held items to `out`, under the trace's tenant when `named`; returns
    /// the earliest record among them.
    fn release_trace(&mut self, trace: &TraceKey, named: bool, out: &mut EventBatch) -> u64 {
        let Some(items) = self.held.remove(trace) else {
            return u64::MAX;
        };
        let tenant = named.then(|| self.tenants.get(trace).cloned()).flatten();
        let mut earliest = u64::MAX;
        for (seq, item) in items {
            earliest = earliest.min(seq);
            self.count -= 1;
            let bytes = item.bytes();
            self.bytes = self.bytes.saturating_sub(bytes);
            if let Some(b) = &self.budget {
                b.budget
                    .change(-isize::try_from(bytes).unwrap_or(isize::MAX));
            }
            if let Some(n) = self.origins.get_mut(&seq) {
                *n -= 1;
                if *n == 0 {
                    self.origins.remove(&seq);
                }
            }
            let t = tenant.as_deref();
            match item {
                Item::Span(mut s) => {
                    let moved = binding::release(&mut s.tenancy(), t);
                    self.count_moved(&s.sender, moved);
                    out.spans.push(*s);
                }
                Item::Log(mut l) => {
                    let moved = binding::release(&mut l.tenancy(), t);
                    self.count_moved(&l.sender, moved);
                    out.logs.push(*l);
                }
            }
        }
        earliest
    }

    fn count_unresolved(&mut self, why: Unresolved, n: u64) {
        match self.unresolved.iter_mut().find(|(w, _)| *w == why) {
            Some((_, total)) => *total += n,
            None => self.unresolved.push((why, n)),
        }
    }
}

impl Drop for HeldItems {
    /// What is still held leaves the shared budget with the consumer.
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.budget
                .change(-isize::try_from(self.bytes).unwrap_or(isize::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{fixtures, DEFAULT_TENANT};
    use crate::units::{HumanDuration, PositiveUsize};

    fn span(trace: u8, id: u8, claim: Option<&str>) -> SpanRecord {
        let mut s = fixtures::span();
        s.trace_id = [trace; 16];
        s.span_id = [id; 8];
        s.parent_span_id = claim.is_none().then_some([1; 8]);
        s.audit.claimed_tenant = claim.map(str::to_string);
        s.tenant = claim.unwrap_or(DEFAULT_TENANT).to_string();
        s.tenant_pending = claim.is_none();
        s
    }

    /// An unnamed root span of `trace`.
    fn unnamed_root(trace: u8, id: u8) -> SpanRecord {
        let mut s = span(trace, id, None);
        s.parent_span_id = None;
        s.tenant_pending = false;
        s
    }

    /// A budget of which a consumer's share holds `items` of the test's spans.
    fn budget_for(items: usize) -> HeldBudget {
        let one = Item::Span(Box::new(span(1, 1, None))).bytes();
        HeldBudget::of(crate::archive::write::buffer::SharedBudget::new(
            8 * items * one,
        ))
    }

    fn batch(spans: Vec<SpanRecord>) -> EventBatch {
        EventBatch {
            spans,
            logs: Vec::new(),
        }
    }

    fn config(wait_s: u64) -> TenancyConfig {
        TenancyConfig {
            wait: HumanDuration(Duration::from_secs(wait_s)),
            remembered_traces: PositiveUsize(100),
            ..TenancyConfig::default()
        }
    }

    fn filed(b: &Bound) -> Vec<(u8, &str)> {
        match b {
            Bound::AsIs => vec![],
            Bound::Changed(b) => b
                .spans
                .iter()
                .map(|s| (s.span_id[0], s.tenant.as_str()))
                .collect(),
        }
    }

    #[test]
    fn children_before_their_root_wait_for_its_tenant_and_hold_the_checkpoint() {
        let mut h = HeldItems::new(&config(30), 0);
        let now = Instant::now();
        let b = h.bind(
            1,
            &batch(vec![span(7, 2, None), span(8, 5, Some("globex"))]),
            now,
        );
        assert_eq!(filed(&b), [(5, "globex")]);
        assert_eq!(h.len(), 1);
        assert!(matches!(
            h.bind(2, &batch(vec![span(9, 6, Some("x"))]), now),
            Bound::AsIs
        ));
        assert_eq!(h.checkpoint(3), 1, "record 1 holds a held span");
        let b = h.bind(
            3,
            &batch(vec![span(7, 3, None), span(7, 1, Some("acme"))]),
            now,
        );
        assert_eq!(filed(&b), [(3, "acme"), (1, "acme"), (2, "acme")]);
        assert!(h.is_empty());
        // Released in record 3: the checkpoint stays at 1 until record 3 is durable.
        assert_eq!(h.checkpoint(3), 1);
        assert_eq!(h.checkpoint(4), 4);
    }

    #[test]
    fn at_the_bound_held_items_go_on_as_they_are_and_are_counted() {
        let budget = budget_for(2);
        let shared = std::sync::Arc::clone(&budget.budget);
        let mut h = HeldItems::new(&config(30), 0).counted_in(budget);
        let t0 = Instant::now();
        h.bind(1, &batch(vec![span(1, 1, None)]), t0);
        h.bind(2, &batch(vec![span(2, 2, None)]), t0);
        assert_eq!(shared.used(), h.bytes(), "held bytes count in the budget");
        // A third trace past the share of the budget (two spans): the oldest goes.
        let b = h.bind(3, &batch(vec![span(3, 3, None)]), t0);
        assert_eq!(filed(&b), [(1, DEFAULT_TENANT)]);
        assert_eq!(h.take_unresolved(), [(Unresolved::Capacity, 1)]);
        assert!(h.expire(t0 + Duration::from_secs(29), 3).is_none());
        let out = h.expire(t0 + Duration::from_secs(30), 3).expect("due");
        assert_eq!(out.spans.len(), 2);
        assert_eq!(h.take_unresolved(), [(Unresolved::Wait, 2)]);
        // Two releases in record 3 (trace 1 for room, from record 1; traces 2 and 3 for time).
        assert_eq!(h.checkpoint(3), 1);
        assert_eq!(h.checkpoint(4), 4);
        assert_eq!(shared.used(), 0, "nothing held, nothing counted");
    }

    #[test]
    fn nothing_is_released_for_time_or_room_while_replaying() {
        let mut h = HeldItems::new(&config(30), 10).counted_in(budget_for(1));
        let t0 = Instant::now();
        h.bind(4, &batch(vec![span(1, 1, None)]), t0);
        h.bind(5, &batch(vec![span(2, 2, None)]), t0);
        assert_eq!(h.len(), 2);
        assert!(h.expire(t0 + Duration::from_secs(60), 5).is_none());
        assert!(h.release_all(5).is_none(), "kept for the next start");
        assert_eq!(h.checkpoint(6), 4);
        let out = h.release_all(10).expect("at shutdown, replay done");
        assert_eq!(out.spans.len(), 2);
        assert_eq!(h.take_unresolved(), [(Unresolved::Shutdown, 2)]);
    }

    #[test]
    fn a_zero_wait_holds_nothing() {
        let mut h = HeldItems::new(&config(0), 0);
        assert!(matches!(
            h.bind(1, &batch(vec![span(1, 1, None)]), Instant::now()),
            Bound::AsIs
        ));
    }

    #[test]
    fn a_root_naming_no_tenant_lets_its_held_children_go_at_once() {
        let mut h = HeldItems::new(&config(30), 0);
        let now = Instant::now();
        h.bind(1, &batch(vec![span(7, 2, None), span(8, 3, None)]), now);
        assert_eq!(h.len(), 2);
        let b = h.bind(2, &batch(vec![unnamed_root(7, 1)]), now);
        assert_eq!(filed(&b), [(1, DEFAULT_TENANT), (2, DEFAULT_TENANT)]);
        assert_eq!(h.len(), 1, "trace 8 still waits for its root");
        assert!(h.take_unresolved().is_empty(), "settled, not unresolved");
        assert_eq!(
            h.checkpoint(2),
            1,
            "released in record 2, held from record 1"
        );
        assert_eq!(h.checkpoint(3), 1, "trace 8 holds record 1");
    }

    #[test]
    fn items_that_may_not_wait_go_on_at_once() {
        let mut h = HeldItems::new(&config(30), 0);
        let mut child = span(7, 2, None);
        child.tenant_pending = false;
        let b = h.bind(1, &batch(vec![child]), Instant::now());
        assert!(
            matches!(b, Bound::AsIs),
            "nothing to change for a sender with no home"
        );
        assert!(h.is_empty());
        assert_eq!(h.checkpoint(2), 2);
    }
}
