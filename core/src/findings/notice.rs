//! Findings as alarms for the budget stage's targets: webhooks, Alertmanager and OTLP log
//! records to the export endpoints. A raised finding is an alarm at level `limit`, a
//! withdrawn one its resolution; the alarm id is the finding id, so a receiver de-duplicates
//! the redelivery a restart can cause (delivery is at least once).

use super::rows::{FindingRow, FindingStatus};
use crate::budget::evaluate::{Alarm, FindingEvidence, Level, Scope};

/// The alarm that carries a finding row, stamped `now_ns` (when toolwatch raised it).
pub fn alarm_of(row: &FindingRow, now_ns: i64) -> Alarm {
    let f = &row.finding;
    Alarm {
        time_ns: now_ns,
        alarm_id: row.finding_id.clone(),
        scope: Scope::Request,
        scope_id: f.request_id.clone(),
        tenant: f.tenant.clone(),
        budget: format!("finding:{}", f.rule.id()),
        level: match row.status {
            FindingStatus::Open => Level::Limit,
            FindingStatus::Withdrawn => Level::Resolved,
        },
        reason: f.reason.clone(),
        observed: 0.0,
        limit: 0.0,
        request_id: Some(f.request_id.clone()),
        trace_id: f.trace_ids.first().cloned(),
        finding: Some(Box::new(FindingEvidence {
            rule: f.rule.id(),
            severity: f.severity.as_str(),
            span_ids: f.span_ids.clone(),
            trace_ids: f.trace_ids.clone(),
        })),
    }
}
