//! Tenancy: which tenant each span and log record is filed under.
//!
//! Promise: every item of a trace is filed under the trace's tenant, whichever item names it
//! and in whatever order the items arrive. Multi-tenant executors usually name the tenant
//! once, where a request enters (its root span); the model, tool and downstream spans that
//! auto-instrumentation adds do not repeat it, and they end (and so are exported) before the
//! root. Two places make that work:
//!
//! - [`TraceTenants`], at the intake before `protect` (so the tenant's own redaction rules
//!   apply): an item with no claim takes the tenant claimed by another item of its trace in
//!   the same request, or in an earlier one still remembered. An item that claims another
//!   tenant than its trace's keeps its claim in `claimed_tenant` and is counted
//!   (`toolwatch_tenant_conflicts_total`). The journal then holds the resolved tenant.
//!   The intake also decides whether waiting can help an item left without a tenant
//!   (`tenant_pending`): not when its trace's root already came naming none, nor when its
//!   sender names no tenants ([`SenderSpaces`]). A deployment that names no tenant pays
//!   nothing for tenancy.
//! - [`HeldItems`], in every journal consumer: an item that may wait and still has no tenant
//!   (it came before any item of its trace that names one) is held back until one arrives, or
//!   its trace's root arrives naming none (then it goes on under `default` at once), for at
//!   most `tenancy.wait` and its share of the archive's memory budget; past either it goes on
//!   under the tenant it has (`default`) and is counted
//!   (`toolwatch_tenant_unresolved_items_total`). The consumer's checkpoint stays before every
//!   held item, so a crash loses none.
//!
//! Only trace ids link items: request ids are chosen by executors and repeat across tenants,
//! so linking by them would file one tenant's data under another's.

pub mod binding;
mod held;
mod spaces;
mod traces;

pub use held::{Bound, HeldBudget, HeldItems};
pub use spaces::SenderSpaces;
pub use traces::TraceTenants;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::event::{LogRecord, SpanRecord, DEFAULT_TENANT};
use crate::units::{HumanDuration, PositiveUsize};

/// The `[tenancy]` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenancyConfig {
    /// Longest a span or log record without a tenant waits in a consumer for an item of its
    /// trace that names one; then it is filed under `default`. `"0s"`: never wait.
    pub wait: HumanDuration,
    /// No longer used: held items are bounded in bytes by their share of
    /// `archive.buffer_bytes` (accepted so older configs still load).
    pub max_held_items: PositiveUsize,
    /// Traces whose tenant the intake and each consumer remember (oldest forgotten first).
    pub remembered_traces: PositiveUsize,
    /// How long a sender (with auth off: every unauthenticated sender together) counts as
    /// one that names tenants after its last item that named one. Its items without a tenant
    /// may wait for their trace's; once it sent a root naming none and named none for this
    /// long, they go on at once.
    pub naming_memory: HumanDuration,
}

/// The default of `tenancy.naming_memory`.
pub const NAMING_MEMORY: Duration = Duration::from_secs(24 * 3600);

impl Default for TenancyConfig {
    fn default() -> Self {
        TenancyConfig {
            wait: HumanDuration(Duration::from_secs(30)),
            max_held_items: PositiveUsize(200_000),
            remembered_traces: PositiveUsize(262_144),
            naming_memory: HumanDuration(NAMING_MEMORY),
        }
    }
}

/// A trace as one sender sends it. A tenant learned from one sender's items never names
/// another sender's items of the same trace id: a trace id is no credential, and a sender that
/// sees (or guesses) another's trace ids must not pull that sender's unnamed items into its
/// own tenant, nor be pulled into another. Items without a sender (auth off) share one space.
pub type TraceKey = (u64, crate::event::TraceId);

/// The [`TraceKey`] of an item of `sender` in `trace`.
pub fn trace_key(
    sender: &Option<std::sync::Arc<crate::event::Sender>>,
    trace: crate::event::TraceId,
) -> TraceKey {
    // FNV-1a: stable across restarts, so consumers replaying the journal key alike.
    let id = sender.as_deref().map_or(0, |s| {
        s.name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) | 1
    });
    (id, trace)
}

/// True when an item names no tenant anywhere (item, trace-level claim or resource) and was
/// not given its trace's: it is filed under `default` only for want of a better answer.
pub fn span_unnamed(span: &SpanRecord) -> bool {
    span.audit
        .claimed_tenant
        .as_deref()
        .is_none_or(str::is_empty)
        && span.tenant == DEFAULT_TENANT
}

/// [`span_unnamed`] for a log record; one without a trace id can never learn a tenant.
pub fn log_unnamed(log: &LogRecord) -> bool {
    log.trace_id.is_some()
        && log
            .audit
            .claimed_tenant
            .as_deref()
            .is_none_or(str::is_empty)
        && log.tenant == DEFAULT_TENANT
}
