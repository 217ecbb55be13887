//! Binding: an authenticated sender writes only the tenants it was given.
//!
//! The claim an item makes (its own `executor.tenant_id`, its resource's, the request's
//! `x-toolwatch-tenant` header, or its trace's) is honoured only when the sender may write
//! that tenant. Otherwise the item is filed under the sender's first tenant, keeps what it
//! claimed in `claimed_tenant`, and is marked `tenant_mismatch` (counted and raised as an
//! alarm downstream). A sender with one tenant needs no claim at all.

use std::sync::Arc;

use crate::event::{
    AuditFields, EventBatch, Field, LogRecord, Sender, Source, SourceKeys, SpanRecord,
    DEFAULT_TENANT,
};

/// The request's tenant header (for multi-tenant executors).
pub const TENANT_HEADER: &str = "x-toolwatch-tenant";

/// The fields binding reads and changes, of a span or a log record alike.
pub struct Tenancy<'a> {
    sender: &'a mut Option<Arc<Sender>>,
    tenant: &'a mut String,
    audit: &'a mut AuditFields,
    sources: &'a mut SourceKeys,
    mismatch: &'a mut bool,
    traced: bool,
}

/// An item whose tenant binding decides.
pub trait Bindable {
    /// Its tenancy fields.
    fn tenancy(&mut self) -> Tenancy<'_>;
}

impl Bindable for SpanRecord {
    fn tenancy(&mut self) -> Tenancy<'_> {
        Tenancy {
            sender: &mut self.sender,
            tenant: &mut self.tenant,
            audit: &mut self.audit,
            sources: &mut self.source_keys,
            mismatch: &mut self.tenant_mismatch,
            traced: true,
        }
    }
}

impl Bindable for LogRecord {
    fn tenancy(&mut self) -> Tenancy<'_> {
        Tenancy {
            sender: &mut self.sender,
            tenant: &mut self.tenant,
            audit: &mut self.audit,
            sources: &mut self.source_keys,
            mismatch: &mut self.tenant_mismatch,
            traced: self.trace_id.is_some(),
        }
    }
}

impl Tenancy<'_> {
    /// No claim of its own, none from its resource, none given yet.
    fn names_nothing(&self) -> bool {
        self.audit
            .claimed_tenant
            .as_deref()
            .is_none_or(str::is_empty)
            && *self.tenant == DEFAULT_TENANT
    }
}

/// Marks each item with its sender and gives items that name no tenant the request's header
/// claim; then items whose own claim the sender may not write are filed under its home
/// tenant. Runs before the trace's tenant is looked up, so a refused claim never names a
/// trace's tenant. Returns how many items were moved.
pub fn before_traces(
    batch: &mut EventBatch,
    sender: Option<&Arc<Sender>>,
    header_claim: Option<&str>,
) -> u64 {
    let header_claim = header_claim.filter(|h| !h.is_empty());
    let spans = batch.spans.iter_mut().map(|s| s.tenancy());
    let logs = batch.logs.iter_mut().map(|l| l.tenancy());
    spans
        .chain(logs)
        .map(|mut t| {
            *t.sender = sender.cloned();
            if t.names_nothing() {
                claim_from_header(&mut t, header_claim);
            }
            u64::from(own_claim(&mut t))
        })
        .sum()
}

/// After the trace's tenant was looked up: items that took a tenant their sender may not
/// write (a trace another sender named) go to the sender's home tenant, the trace's tenant
/// kept as their claim; a log record that names nothing and has no trace to learn from goes
/// to its sender's home. Returns how many were moved.
pub fn after_traces(batch: &mut EventBatch) -> u64 {
    let spans = batch.spans.iter_mut().map(|s| s.tenancy());
    let logs = batch.logs.iter_mut().map(|l| l.tenancy());
    spans
        .chain(logs)
        .map(|mut t| {
            if !t.names_nothing() {
                u64::from(refuse_outside(&mut t))
            } else {
                if !t.traced {
                    release(&mut t, None);
                }
                0
            }
        })
        .sum()
}

/// The tenant a held item goes on under, given its trace's tenant (`None`: the trace never
/// named one): the trace's if its sender may write it, else its sender's home tenant, with
/// the trace's tenant kept as its claim and the mismatch marked. True when it was moved.
pub fn release(t: &mut Tenancy<'_>, trace_tenant: Option<&str>) -> bool {
    match trace_tenant {
        Some(trace) => {
            *t.tenant = trace.to_string();
            refuse_outside(t)
        }
        None => {
            // It named nothing: its sender's home, or `default` for an unbound sender.
            if let Some(s) = t.sender.as_deref() {
                if let (Some(home), false) = (s.home_tenant(), s.permits(t.tenant)) {
                    *t.tenant = home.to_string();
                }
            }
            false
        }
    }
}

fn claim_from_header(t: &mut Tenancy<'_>, header: Option<&str>) {
    let Some(h) = header else { return };
    t.audit.claimed_tenant = Some(h.to_string());
    *t.tenant = h.to_string();
    t.sources.0.retain(|(f, _)| *f != Field::ClaimedTenant);
    t.sources.0.push((Field::ClaimedTenant, Source::Header));
    t.sources.0.sort_by_key(|(f, _)| *f);
}

/// The item's own claim against its sender's tenants; true when it was moved.
fn own_claim(t: &mut Tenancy<'_>) -> bool {
    let Some(sender) = t.sender.clone() else {
        return false;
    };
    if t.names_nothing() {
        if let Some(sole) = sender.sole_tenant() {
            *t.tenant = sole.to_string();
        }
        return false;
    }
    if sender.permits(t.tenant) {
        return false;
    }
    match sender.home_tenant() {
        Some(home) => {
            *t.tenant = home.to_string();
            *t.mismatch = true;
            true
        }
        None => false,
    }
}

fn refuse_outside(t: &mut Tenancy<'_>) -> bool {
    let Some(sender) = t.sender.clone() else {
        return false;
    };
    if sender.permits(t.tenant) {
        return false;
    }
    let Some(home) = sender.home_tenant() else {
        return false;
    };
    // Its own claim, if the sender may write it, decides over a trace's tenant it may not
    // (a conflict, not a mismatch).
    if let Some(own) = t.audit.claimed_tenant.as_deref().filter(|c| !c.is_empty()) {
        if sender.permits(own) {
            *t.tenant = own.to_string();
            return false;
        }
    } else {
        t.audit.claimed_tenant = Some(t.tenant.clone());
    }
    *t.tenant = home.to_string();
    // Counted once per item, though refused before and after the trace look-up.
    let counted = !*t.mismatch;
    *t.mismatch = true;
    counted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{fixtures, SenderTenants, DEFAULT_TENANT};
    use crate::tenancy::TraceTenants;

    fn sender(name: &str, tenants: &[&str]) -> Arc<Sender> {
        Arc::new(Sender {
            name: name.into(),
            tenants: if tenants == ["*"] {
                SenderTenants::Any
            } else {
                SenderTenants::Listed(tenants.iter().map(|t| t.to_string()).collect())
            },
        })
    }

    fn span(
        trace: u8,
        id: u8,
        parent: Option<u8>,
        claim: Option<&str>,
    ) -> crate::event::SpanRecord {
        let mut s = fixtures::span();
        s.trace_id = [trace; 16];
        s.span_id = [id; 8];
        s.parent_span_id = parent.map(|p| [p; 8]);
        s.audit.claimed_tenant = claim.map(str::to_string);
        s.tenant = claim.unwrap_or(DEFAULT_TENANT).to_string();
        s
    }

    /// The intake's order: bind own claims, resolve by trace, bind again.
    fn intake(
        traces: &TraceTenants,
        batch: &mut EventBatch,
        sender: Option<&Arc<Sender>>,
        header: Option<&str>,
    ) -> u64 {
        let before = before_traces(batch, sender, header);
        traces.resolve(batch);
        before + after_traces(batch)
    }

    fn filed(b: &EventBatch) -> Vec<(&str, Option<&str>, bool)> {
        b.spans
            .iter()
            .map(|s| {
                (
                    s.tenant.as_str(),
                    s.audit.claimed_tenant.as_deref(),
                    s.tenant_mismatch,
                )
            })
            .collect()
    }

    #[test]
    fn a_claim_outside_the_senders_tenants_is_filed_under_its_first_and_kept() {
        let traces = TraceTenants::new(64);
        let eu = sender("eu", &["acme", "globex"]);
        let mut b = EventBatch {
            spans: vec![
                span(1, 1, None, Some("victim")),
                span(1, 2, Some(1), None),
                span(2, 3, None, Some("globex")),
            ],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut b, Some(&eu), None), 1);
        assert_eq!(
            filed(&b),
            [
                ("acme", Some("victim"), true),
                ("acme", None, false),
                ("globex", Some("globex"), false)
            ]
        );
        assert!(b
            .spans
            .iter()
            .all(|s| s.sender.as_deref().map(|s| &*s.name) == Some("eu")));
    }

    #[test]
    fn a_sole_tenant_needs_no_claim_and_any_permits_every_claim() {
        let traces = TraceTenants::new(64);
        let one = sender("one", &["acme"]);
        let mut b = EventBatch {
            spans: vec![span(1, 2, Some(1), None), span(1, 3, Some(1), Some("acme"))],
            logs: vec![fixtures::log()],
        };
        assert_eq!(intake(&traces, &mut b, Some(&one), None), 0);
        assert_eq!(
            filed(&b),
            [("acme", None, false), ("acme", Some("acme"), false)]
        );
        assert_eq!(b.logs[0].tenant, "acme");

        let any = sender("gw", &["*"]);
        let mut b = EventBatch {
            spans: vec![span(5, 1, None, Some("initech"))],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut b, Some(&any), None), 0);
        assert_eq!(filed(&b), [("initech", Some("initech"), false)]);
    }

    #[test]
    fn the_header_claims_for_items_that_name_nothing_and_is_bound_too() {
        let traces = TraceTenants::new(64);
        let eu = sender("eu", &["acme", "globex"]);
        let mut b = EventBatch {
            spans: vec![span(1, 1, None, None), span(2, 1, None, Some("acme"))],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut b, Some(&eu), Some("globex")), 0);
        assert_eq!(
            filed(&b),
            [
                ("globex", Some("globex"), false),
                ("acme", Some("acme"), false)
            ]
        );
        assert_eq!(
            b.spans[0].source_keys.get(Field::ClaimedTenant),
            Some(Source::Header)
        );
        let mut b = EventBatch {
            spans: vec![span(3, 1, None, None)],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut b, Some(&eu), Some("victim")), 1);
        assert_eq!(filed(&b), [("acme", Some("victim"), true)]);
    }

    #[test]
    fn a_trace_named_by_another_sender_does_not_carry_this_senders_items_into_it() {
        let traces = TraceTenants::new(64);
        let a = sender("a", &["acme"]);
        let b_sender = sender("b", &["globex", "hooli"]);
        let mut first = EventBatch {
            spans: vec![span(7, 1, None, Some("acme"))],
            logs: Vec::new(),
        };
        intake(&traces, &mut first, Some(&a), None);
        // Sender b guesses acme's trace id and sends an unnamed child.
        let mut second = EventBatch {
            spans: vec![span(7, 9, Some(1), None)],
            logs: Vec::new(),
        };
        // Trace memory is kept per sender: the guessed id names nothing for b's items.
        assert_eq!(intake(&traces, &mut second, Some(&b_sender), None), 0);
        assert_eq!(filed(&second), [(DEFAULT_TENANT, None, false)]);
        // A one-tenant sender's unnamed item goes to its tenant, whoever named the trace.
        let c_sender = sender("c", &["hooli"]);
        let mut third = EventBatch {
            spans: vec![span(7, 10, Some(1), None)],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut third, Some(&c_sender), None), 0);
        assert_eq!(filed(&third), [("hooli", None, false)]);
    }

    #[test]
    fn a_refused_claim_does_not_name_the_trace_for_other_senders() {
        let traces = TraceTenants::new(64);
        let intruder = sender("b", &["globex"]);
        let owner = sender("a", &["acme"]);
        let mut forged = EventBatch {
            spans: vec![span(4, 1, None, Some("acme"))],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut forged, Some(&intruder), None), 1);
        let mut real = EventBatch {
            spans: vec![span(4, 2, Some(1), None)],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut real, Some(&owner), None), 0);
        assert_eq!(filed(&real), [("acme", None, false)]);
    }

    #[test]
    fn a_senders_own_allowed_claim_decides_over_a_trace_it_may_not_write() {
        let eu = sender("eu", &["acme", "globex"]);
        let mut s = span(6, 4, Some(1), Some("globex"));
        s.sender = Some(Arc::clone(&eu));
        s.tenant = "initech".into();
        assert!(!refuse_outside(&mut s.tenancy()));
        assert_eq!(
            (s.tenant.as_str(), s.tenant_mismatch),
            ("globex", false),
            "its own claim, no mismatch"
        );
        let mut v = span(6, 5, Some(1), Some("victim"));
        v.sender = Some(eu);
        v.tenant = "initech".into();
        assert!(refuse_outside(&mut v.tenancy()));
        assert_eq!((v.tenant.as_str(), v.tenant_mismatch), ("acme", true));
        // Refused again after the trace look-up: moved, but not counted a second time.
        v.tenant = "initech".into();
        assert!(!refuse_outside(&mut v.tenancy()), "counted once");
        assert_eq!((v.tenant.as_str(), v.tenant_mismatch), ("acme", true));
    }

    #[test]
    fn one_senders_trace_never_names_another_senders_items() {
        let traces = TraceTenants::new(64);
        let gateway = sender("gw", &["*"]);
        let downstream = sender("tool-server", &["globex"]);
        // The downstream sender sees trace 8 (traceparent) and names it with its own tenant.
        let mut down = EventBatch {
            spans: vec![span(8, 9, Some(1), None)],
            logs: Vec::new(),
        };
        intake(&traces, &mut down, Some(&downstream), None);
        assert_eq!(filed(&down), [("globex", None, false)]);
        // The gateway's unnamed child of trace 8 does not follow it.
        let mut gw = EventBatch {
            spans: vec![span(8, 2, Some(1), None)],
            logs: Vec::new(),
        };
        intake(&traces, &mut gw, Some(&gateway), None);
        assert_eq!(
            filed(&gw),
            [(DEFAULT_TENANT, None, false)],
            "waits for its own root"
        );
    }

    #[test]
    fn a_log_naming_a_tenant_through_its_resource_is_bound_too() {
        let traces = TraceTenants::new(64);
        let eu = sender("eu", &["acme", "globex"]);
        let mut l = fixtures::log();
        l.trace_id = Some([5; 16]);
        l.audit.claimed_tenant = Some(String::new());
        l.tenant = "victim".into();
        let mut b = EventBatch {
            spans: Vec::new(),
            logs: vec![l],
        };
        assert_eq!(intake(&traces, &mut b, Some(&eu), None), 1);
        assert_eq!(b.logs[0].tenant, "acme");
        assert!(b.logs[0].tenant_mismatch);
    }

    #[test]
    fn held_items_are_released_within_their_senders_tenants() {
        let eu = Some(sender("eu", &["acme", "globex"]));
        let mut s = span(1, 2, Some(1), None);
        s.sender = eu.clone();
        assert!(!release(&mut s.tenancy(), Some("globex")));
        assert_eq!(s.tenant, "globex");
        let mut s = span(1, 2, Some(1), None);
        s.sender = eu.clone();
        assert!(release(&mut s.tenancy(), Some("victim")));
        assert_eq!(
            (s.tenant.as_str(), s.audit.claimed_tenant.as_deref()),
            ("acme", Some("victim"))
        );
        let mut s = span(1, 3, Some(1), None);
        s.sender = eu;
        assert!(!release(&mut s.tenancy(), None));
        assert_eq!(s.tenant, "acme", "named nothing: its sender's home");
        let mut s = span(1, 3, Some(1), None);
        assert!(!release(&mut s.tenancy(), None));
        assert_eq!(s.tenant, DEFAULT_TENANT, "no sender: default, as before");
    }

    #[test]
    fn a_log_with_neither_claim_nor_trace_goes_to_its_senders_home() {
        let traces = TraceTenants::new(64);
        let eu = sender("eu", &["acme", "globex"]);
        let mut traced = fixtures::log();
        traced.trace_id = Some([9; 16]);
        let mut b = EventBatch {
            spans: Vec::new(),
            logs: vec![fixtures::log(), traced],
        };
        assert_eq!(intake(&traces, &mut b, Some(&eu), None), 0);
        assert_eq!(b.logs[0].tenant, "acme");
        assert!(!b.logs[0].tenant_mismatch && b.logs[0].audit.claimed_tenant.is_none());
        assert_eq!(
            b.logs[1].tenant, DEFAULT_TENANT,
            "held by the consumers for its trace"
        );
    }

    #[test]
    fn without_a_sender_nothing_changes() {
        let traces = TraceTenants::new(64);
        let mut b = EventBatch {
            spans: vec![span(1, 1, None, Some("victim")), span(1, 2, Some(1), None)],
            logs: Vec::new(),
        };
        assert_eq!(intake(&traces, &mut b, None, None), 0);
        assert_eq!(
            filed(&b),
            [("victim", Some("victim"), false), ("victim", None, false)]
        );
    }
}
