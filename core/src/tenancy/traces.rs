//! The tenant each recent trace was named under, shared by the intake's request tasks.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use super::spaces::SenderSpaces;
use super::{log_unnamed, span_unnamed, trace_key, TraceKey, NAMING_MEMORY};
use crate::event::{EventBatch, Field, LogRecord, Source, SourceKeys, SpanRecord, DEFAULT_TENANT};
use crate::maps::{FastMap, FastSet};

/// Tenant names kept interned at most; past it the set starts again (it only saves memory).
const MAX_INTERNED: usize = 65_536;

/// How strongly an item names its tenant; a stronger claim decides its trace's tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Claim {
    /// A root span that named no tenant: the trace goes on under `default` (its sender's
    /// home); any claim outranks it.
    UnnamedRoot,
    /// Named by the resource the item came under (a service's default).
    Resource,
    /// Named by the item itself.
    Item,
    /// Named by a root span itself: where the request entered.
    Root,
}

impl Claim {
    fn of(own: bool, root: bool) -> Claim {
        match (own, root) {
            (false, _) => Claim::Resource,
            (true, false) => Claim::Item,
            (true, true) => Claim::Root,
        }
    }

    fn own(sources: &SourceKeys) -> bool {
        !matches!(
            sources.get(Field::ClaimedTenant),
            Some(Source::Resource | Source::Header)
        )
    }

    // An item whose claim its sender may not write names its trace (its sender's tenant)
    // only as weakly as a resource does, so any rightful claim outranks it.
    fn of_span(s: &SpanRecord) -> Claim {
        if s.tenant_mismatch {
            return Claim::Resource;
        }
        Claim::of(Claim::own(&s.source_keys), s.parent_span_id.is_none())
    }

    fn of_log(l: &LogRecord) -> Claim {
        if l.tenant_mismatch {
            return Claim::Resource;
        }
        Claim::of(Claim::own(&l.source_keys), false)
    }
}

/// Trace → tenant for the last `capacity` traces that named one (oldest forgotten first).
pub(super) struct Remembered {
    tenants: FastMap<TraceKey, (Arc<str>, Claim)>,
    order: VecDeque<TraceKey>,
    capacity: usize,
    names: FastSet<Arc<str>>,
}

impl Remembered {
    pub(super) fn new(capacity: usize) -> Remembered {
        Remembered {
            tenants: FastMap::default(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            names: FastSet::default(),
        }
    }

    /// The tenant of `trace`, if one is remembered.
    pub(super) fn get(&self, trace: &TraceKey) -> Option<&Arc<str>> {
        self.tenants.get(trace).map(|(t, _)| t)
    }

    /// Remembers `tenant` for `trace` unless the trace has a tenant from a claim at least as
    /// strong; true if the trace's tenant changed.
    pub(super) fn learn(&mut self, trace: TraceKey, tenant: &str, claim: Claim) -> bool {
        match self.tenants.get(&trace) {
            Some((_, held)) if *held >= claim => return false,
            Some((t, _)) if **t == *tenant => {
                let t = Arc::clone(t);
                self.tenants.insert(trace, (t, claim));
                return false;
            }
            Some(_) => {
                let name = self.intern(tenant);
                self.tenants.insert(trace, (name, claim));
                return true;
            }
            None => {}
        }
        let name = self.intern(tenant);
        self.tenants.insert(trace, (name, claim));
        self.order.push_back(trace);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.tenants.remove(&old);
            }
        }
        true
    }

    /// Remembers `tenant` for `trace`, whatever it had.
    pub(super) fn learn_latest(&mut self, trace: TraceKey, tenant: &str) {
        match self.get(&trace) {
            None => {
                self.learn(trace, tenant, Claim::Resource);
            }
            Some(t) if **t == *tenant => {}
            Some(_) => {
                let name = self.intern(tenant);
                if let Some(slot) = self.tenants.get_mut(&trace) {
                    slot.0 = name;
                }
            }
        }
    }

    fn intern(&mut self, tenant: &str) -> Arc<str> {
        if let Some(n) = self.names.get(tenant) {
            return Arc::clone(n);
        }
        if self.names.len() >= MAX_INTERNED {
            self.names.clear();
        }
        let n: Arc<str> = tenant.into();
        self.names.insert(Arc::clone(&n));
        n
    }
}

/// The intake's memory of which tenant each recent trace named (see the module notes).
pub struct TraceTenants {
    remembered: Mutex<(Remembered, SenderSpaces)>,
}

impl TraceTenants {
    /// Remembers up to `capacity` traces; which senders name tenants is kept for a day, in
    /// memory only.
    pub fn new(capacity: usize) -> TraceTenants {
        TraceTenants::with_spaces(capacity, SenderSpaces::new(NAMING_MEMORY, None))
    }

    /// As [`TraceTenants::new`], with `spaces` as the memory of which senders name tenants.
    pub fn with_spaces(capacity: usize, spaces: SenderSpaces) -> TraceTenants {
        TraceTenants {
            remembered: Mutex::new((Remembered::new(capacity), spaces)),
        }
    }

    /// Saves which senders name tenants when it changed and a minute passed (or `force`).
    pub fn save_spaces(&self, force: bool) {
        let mut r = self
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        r.1.save_if_due(crate::clock::now_ns() / 1_000_000_000, force);
    }

    /// Files every item of `batch` under its trace's tenant where one is known (from this
    /// batch or an earlier one); returns how many items named another tenant than their
    /// trace's (they keep the claim in `claimed_tenant`).
    ///
    /// Where a trace's items name different tenants, the strongest claim decides: a root
    /// span's own, then any item's own, then a resource's; among equals, the first seen.
    /// Items already journalled stay where they were filed.
    ///
    /// An item left without a tenant is marked `tenant_pending` (the consumers may hold it
    /// for its trace's tenant) unless its trace's root came naming none, or its sender's
    /// space is untenanted (see [`SenderSpaces`]).
    pub fn resolve(&self, batch: &mut EventBatch) -> u64 {
        let now_s = crate::clock::now_ns() / 1_000_000_000;
        let mut guard = self
            .remembered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (r, spaces) = &mut *guard;
        for s in batch.spans.iter().filter(|s| !span_unnamed(s)) {
            let key = trace_key(&s.sender, s.trace_id);
            spaces.named(key.0, now_s);
            r.learn(key, &s.tenant, Claim::of_span(s));
        }
        for l in batch.logs.iter().filter(|l| !log_unnamed(l)) {
            if let Some(trace) = l.trace_id {
                let key = trace_key(&l.sender, trace);
                spaces.named(key.0, now_s);
                r.learn(key, &l.tenant, Claim::of_log(l));
            }
        }
        // A root naming no tenant settles its trace (unless another item named one). Its space
        // counts as one that names none only when the root is a request's, with other items
        // (here or waiting): a lone span (an MCP notification, a health check) of a tenanted
        // deployment must not stop the rest of its space from waiting.
        let mut with_children: Option<FastSet<TraceKey>> = None;
        for s in batch
            .spans
            .iter()
            .filter(|s| s.parent_span_id.is_none() && span_unnamed(s))
        {
            let key = trace_key(&s.sender, s.trace_id);
            let others = with_children.get_or_insert_with(|| traces_with_children(batch));
            if spaces.waited(&key) || others.contains(&key) {
                spaces.unnamed_root(key.0, now_s);
            }
            r.learn(key, DEFAULT_TENANT, Claim::UnnamedRoot);
        }
        let mut conflicts = 0;
        for s in &mut batch.spans {
            if let Some(t) = r.get(&trace_key(&s.sender, s.trace_id)) {
                if *s.tenant != **t {
                    conflicts += u64::from(!span_unnamed(s));
                    s.tenant = t.to_string();
                }
            }
        }
        for l in &mut batch.logs {
            if let Some(t) = l
                .trace_id
                .and_then(|trace| r.get(&trace_key(&l.sender, trace)))
            {
                if *l.tenant != **t {
                    conflicts += u64::from(!log_unnamed(l));
                    l.tenant = t.to_string();
                }
            }
        }
        let may_wait = |key: &TraceKey| r.get(key).is_none() && !spaces.untenanted(key.0, now_s);
        let mut waiting = Vec::new();
        for s in batch.spans.iter_mut().filter(|s| span_unnamed(s)) {
            let key = trace_key(&s.sender, s.trace_id);
            s.tenant_pending = may_wait(&key);
            if s.tenant_pending {
                waiting.push(key);
            }
        }
        for l in batch.logs.iter_mut().filter(|l| log_unnamed(l)) {
            let key = l.trace_id.map(|trace| trace_key(&l.sender, trace));
            l.tenant_pending = key.as_ref().is_some_and(&may_wait);
            if let (true, Some(key)) = (l.tenant_pending, key) {
                waiting.push(key);
            }
        }
        for key in waiting {
            spaces.waiting(key);
        }
        conflicts
    }
}

/// The traces with an item in `batch` other than a root span.
fn traces_with_children(batch: &EventBatch) -> FastSet<TraceKey> {
    let spans = batch
        .spans
        .iter()
        .filter(|s| s.parent_span_id.is_some())
        .map(|s| trace_key(&s.sender, s.trace_id));
    let logs = batch
        .logs
        .iter()
        .filter_map(|l| Some(trace_key(&l.sender, l.trace_id?)));
    spans.chain(logs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{fixtures, SpanRecord, DEFAULT_TENANT};

    fn span(trace: u8, id: u8, parent: Option<u8>, claim: Option<&str>) -> SpanRecord {
        let mut s = fixtures::span();
        s.trace_id = [trace; 16];
        s.span_id = [id; 8];
        s.parent_span_id = parent.map(|p| [p; 8]);
        s.audit.claimed_tenant = claim.map(str::to_string);
        s.tenant = claim.unwrap_or(DEFAULT_TENANT).to_string();
        s
    }

    fn tenants(b: &EventBatch) -> Vec<&str> {
        b.spans.iter().map(|s| s.tenant.as_str()).collect()
    }

    #[test]
    fn children_take_the_root_tenant_in_the_same_batch_and_in_later_ones() {
        let t = TraceTenants::new(16);
        let mut b = EventBatch {
            spans: vec![
                span(1, 2, Some(1), None),
                span(1, 1, None, Some("acme")),
                span(2, 9, Some(8), None),
            ],
            logs: Vec::new(),
        };
        assert_eq!(t.resolve(&mut b), 0);
        assert_eq!(tenants(&b), ["acme", "acme", DEFAULT_TENANT]);
        assert_eq!(b.spans[0].audit.claimed_tenant, None, "no claim invented");
        let mut later = EventBatch {
            spans: vec![span(1, 3, Some(1), None)],
            logs: Vec::new(),
        };
        t.resolve(&mut later);
        assert_eq!(tenants(&later), ["acme"]);
    }

    #[test]
    fn a_claim_against_the_trace_keeps_the_claim_and_is_counted() {
        let t = TraceTenants::new(16);
        // The child claims first in the batch; the root decides.
        let mut b = EventBatch {
            spans: vec![
                span(1, 2, Some(1), Some("globex")),
                span(1, 1, None, Some("acme")),
            ],
            logs: Vec::new(),
        };
        assert_eq!(t.resolve(&mut b), 1);
        assert_eq!(tenants(&b), ["acme", "acme"]);
        assert_eq!(b.spans[0].audit.claimed_tenant.as_deref(), Some("globex"));
        // A later item's own claim does not move the trace off its root's tenant.
        let mut late = EventBatch {
            spans: vec![span(1, 3, Some(1), Some("initech"))],
            logs: Vec::new(),
        };
        assert_eq!(t.resolve(&mut late), 1);
        assert_eq!(tenants(&late), ["acme"]);
    }

    #[test]
    fn an_item_claim_outranks_a_resource_claim_seen_before() {
        let t = TraceTenants::new(16);
        let mut from_resource = span(1, 2, Some(1), Some("globex"));
        from_resource
            .source_keys
            .0
            .push((Field::ClaimedTenant, Source::Resource));
        let mut first = EventBatch {
            spans: vec![from_resource.clone()],
            logs: Vec::new(),
        };
        assert_eq!(t.resolve(&mut first), 0);
        assert_eq!(tenants(&first), ["globex"], "filed as it came");
        let mut own = EventBatch {
            spans: vec![span(1, 3, Some(1), Some("initech"))],
            logs: Vec::new(),
        };
        assert_eq!(t.resolve(&mut own), 0);
        assert_eq!(tenants(&own), ["initech"]);
        let mut again = EventBatch {
            spans: vec![from_resource],
            logs: Vec::new(),
        };
        assert_eq!(t.resolve(&mut again), 1);
        assert_eq!(tenants(&again), ["initech"]);
    }

    #[test]
    fn the_oldest_trace_is_forgotten_past_capacity() {
        let mut r = Remembered::new(2);
        assert!(r.learn((0, [1; 16]), "a", Claim::Item));
        assert!(
            !r.learn((0, [1; 16]), "b", Claim::Item),
            "the first equal claim stays"
        );
        assert!(
            r.learn((0, [1; 16]), "b", Claim::Root),
            "a stronger one wins"
        );
        assert_eq!(r.get(&(0, [1; 16])).map(|t| &**t), Some("b"));
        assert!(r.learn((0, [2; 16]), "a", Claim::Item));
        assert!(r.learn((0, [3; 16]), "a", Claim::Item));
        assert!(r.get(&(0, [1; 16])).is_none());
        assert_eq!(r.get(&(0, [3; 16])).map(|t| &**t), Some("a"));
    }

    fn pending(b: &EventBatch) -> Vec<bool> {
        b.spans.iter().map(|s| s.tenant_pending).collect()
    }

    #[test]
    fn items_wait_only_where_a_tenant_may_still_come() {
        let t = TraceTenants::new(16);
        // Unseen senders: a child whose root has not come may wait; a child beside its
        // unnamed root may not.
        let mut first = EventBatch {
            spans: vec![span(1, 2, Some(1), None)],
            logs: Vec::new(),
        };
        t.resolve(&mut first);
        assert_eq!(pending(&first), [true]);
        let mut rooted = EventBatch {
            spans: vec![span(2, 5, Some(4), None), span(2, 4, None, None)],
            logs: Vec::new(),
        };
        t.resolve(&mut rooted);
        assert_eq!(pending(&rooted), [false, false]);
        assert_eq!(tenants(&rooted), [DEFAULT_TENANT; 2]);
        // The unnamed root made the (sender-less) space untenanted: nothing waits now.
        let mut later = EventBatch {
            spans: vec![span(3, 2, Some(1), None)],
            logs: Vec::new(),
        };
        t.resolve(&mut later);
        assert_eq!(pending(&later), [false]);
        // Once an item names a tenant, children of unknown traces may wait again.
        let mut named = EventBatch {
            spans: vec![span(4, 1, None, Some("acme")), span(5, 2, Some(1), None)],
            logs: Vec::new(),
        };
        t.resolve(&mut named);
        assert_eq!(pending(&named), [false, true]);
        assert_eq!(tenants(&named), ["acme", DEFAULT_TENANT]);
    }

    #[test]
    fn only_a_request_naming_no_tenant_stops_its_space_from_waiting() {
        let t = TraceTenants::new(16);
        let resolve = |spans: Vec<SpanRecord>| {
            let mut b = EventBatch {
                spans,
                logs: Vec::new(),
            };
            t.resolve(&mut b);
            pending(&b)
        };
        // A lone unnamed root (an MCP notification, a health check) settles only itself: a
        // tenanted deployment's children exported before their root still wait.
        assert_eq!(resolve(vec![span(1, 1, None, None)]), [false]);
        assert_eq!(resolve(vec![span(2, 2, Some(1), None)]), [true]);
        // Its root arrives naming no tenant, after its child waited: a request that names
        // none. From now on nothing of the space waits.
        assert_eq!(resolve(vec![span(2, 1, None, None)]), [false]);
        assert_eq!(resolve(vec![span(3, 2, Some(1), None)]), [false]);

        // The same with the child beside its root, in a fresh memory.
        let t = TraceTenants::new(16);
        let mut b = EventBatch {
            spans: vec![span(1, 1, None, None)],
            logs: Vec::new(),
        };
        t.resolve(&mut b);
        let mut b = EventBatch {
            spans: vec![span(2, 2, Some(1), None), span(2, 1, None, None)],
            logs: Vec::new(),
        };
        t.resolve(&mut b);
        let mut later = EventBatch {
            spans: vec![span(3, 2, Some(1), None)],
            logs: Vec::new(),
        };
        t.resolve(&mut later);
        assert_eq!(pending(&later), [false]);
    }
}
