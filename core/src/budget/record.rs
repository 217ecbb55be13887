//! Alarms as OTLP log records, for the redacted export stream (the export stage sends them
//! downstream beside the protected traces and logs).
//!
//! One `ResourceLogs` per tenant (resource attributes `service.name = toolwatch` and
//! `tenant.id`), scope `toolwatch.budget`, one record per alarm with `event_name`
//! `toolwatch.budget.alarm`, the alarm's fields as `toolwatch.alarm.*` attributes and the
//! request's trace id, so a backend links the alarm to the trace that crossed the budget.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::evaluate::{Alarm, Level};

/// The event name of every alarm record.
pub const EVENT_NAME: &str = "toolwatch.budget.alarm";

/// The event name of a finding's record (raised or withdrawn).
pub const FINDING_EVENT_NAME: &str = "toolwatch.finding";

fn attr(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn text(key: &str, v: &str) -> KeyValue {
    attr(key, any_value::Value::StringValue(v.to_string()))
}

/// One alarm as a log record.
pub fn log_record(a: &Alarm) -> LogRecord {
    if let Some(f) = &a.finding {
        return finding_record(a, f);
    }
    let (severity, severity_text) = match a.level {
        Level::Warning => (SeverityNumber::Warn, "WARN"),
        Level::Limit => (SeverityNumber::Error, "ERROR"),
        Level::Resolved => (SeverityNumber::Info, "INFO"),
    };
    let mut attributes = vec![
        text("toolwatch.alarm.id", &a.alarm_id),
        text("toolwatch.alarm.scope", a.scope.as_str()),
        text("toolwatch.alarm.scope_id", &a.scope_id),
        text("toolwatch.alarm.budget", &a.budget),
        text("toolwatch.alarm.level", a.level.as_str()),
        text("toolwatch.alarm.reason", &a.reason),
        attr(
            "toolwatch.alarm.observed",
            any_value::Value::DoubleValue(a.observed),
        ),
        attr(
            "toolwatch.alarm.limit",
            any_value::Value::DoubleValue(a.limit),
        ),
    ];
    if let Some(r) = &a.request_id {
        attributes.push(text("executor.request_id", r));
    }
    let trace = a.trace_id.as_deref();
    record(
        a.time_ns,
        (severity, severity_text),
        &a.reason,
        attributes,
        trace,
        EVENT_NAME,
    )
}

/// A log record of toolwatch's own: time, severity, a text body, attributes, the trace (hex;
/// left empty unless it is 16 bytes) and the event name.
fn record(
    time_ns: i64,
    (severity, severity_text): (SeverityNumber, &str),
    body: &str,
    attributes: Vec<KeyValue>,
    trace_hex: Option<&str>,
    event_name: &str,
) -> LogRecord {
    let time = u64::try_from(time_ns).unwrap_or(0);
    LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: time,
        severity_number: severity as i32,
        severity_text: severity_text.into(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(body.to_string())),
        }),
        attributes,
        trace_id: trace_hex
            .and_then(|t| hex::decode(t).ok())
            .filter(|b| b.len() == 16)
            .unwrap_or_default(),
        event_name: event_name.into(),
        ..Default::default()
    }
}

/// A finding as a log record: `toolwatch.finding.*` attributes, the first evidence trace.
fn finding_record(a: &Alarm, f: &super::evaluate::FindingEvidence) -> LogRecord {
    let withdrawn = a.level == Level::Resolved;
    let (severity, severity_text) = match (withdrawn, f.severity) {
        (true, _) => (SeverityNumber::Info, "INFO"),
        (false, "high") => (SeverityNumber::Error, "ERROR"),
        (false, _) => (SeverityNumber::Warn, "WARN"),
    };
    let spans = f
        .span_ids
        .iter()
        .map(|s| AnyValue {
            value: Some(any_value::Value::StringValue(s.clone())),
        })
        .collect();
    let attributes = vec![
        text("toolwatch.finding.id", &a.alarm_id),
        text("toolwatch.finding.rule", f.rule),
        text("toolwatch.finding.severity", f.severity),
        text(
            "toolwatch.finding.status",
            if withdrawn { "withdrawn" } else { "open" },
        ),
        text("toolwatch.finding.reason", &a.reason),
        attr(
            "toolwatch.finding.span_ids",
            any_value::Value::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
                values: spans,
            }),
        ),
        text("executor.request_id", &a.scope_id),
    ];
    let trace = f.trace_ids.first().map(String::as_str);
    record(
        a.time_ns,
        (severity, severity_text),
        f.rule,
        attributes,
        trace,
        FINDING_EVENT_NAME,
    )
}

/// Alarms as one export request, grouped by tenant.
pub fn export_request(alarms: &[Alarm]) -> ExportLogsServiceRequest {
    let mut by_tenant: BTreeMap<&str, Vec<LogRecord>> = BTreeMap::new();
    for a in alarms {
        by_tenant.entry(&a.tenant).or_default().push(log_record(a));
    }
    ExportLogsServiceRequest {
        resource_logs: by_tenant
            .into_iter()
            .map(|(tenant, log_records)| ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![text("service.name", "toolwatch"), text("tenant.id", tenant)],
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: "toolwatch.budget".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    log_records,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::evaluate::Scope;
    use super::*;

    fn alarm(tenant: &str, level: Level) -> Alarm {
        Alarm {
            time_ns: 1_700_000_000_000_000_000,
            alarm_id: "00112233aabbccdd".into(),
            scope: Scope::Request,
            scope_id: "req-1".into(),
            tenant: tenant.into(),
            budget: "repeated_calls".into(),
            level,
            reason: "repeated_call".into(),
            observed: 5.0,
            limit: 5.0,
            request_id: Some("req-1".into()),
            trace_id: Some("0102030405060708090a0b0c0d0e0f10".into()),
            finding: None,
        }
    }

    #[test]
    fn an_alarm_becomes_a_record_that_names_its_trace() {
        let r = log_record(&alarm("acme", Level::Limit));
        assert_eq!(r.severity_number, SeverityNumber::Error as i32);
        assert_eq!(r.event_name, EVENT_NAME);
        assert_eq!(r.trace_id, (1..=16).collect::<Vec<u8>>());
        assert_eq!(r.time_unix_nano, 1_700_000_000_000_000_000);
        let get = |k: &str| {
            r.attributes
                .iter()
                .find(|kv| kv.key == k)
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(
            get("toolwatch.alarm.reason"),
            Some(any_value::Value::StringValue("repeated_call".into()))
        );
        assert_eq!(
            get("toolwatch.alarm.observed"),
            Some(any_value::Value::DoubleValue(5.0))
        );
        assert_eq!(
            get("executor.request_id"),
            Some(any_value::Value::StringValue("req-1".into()))
        );
    }

    #[test]
    fn records_are_grouped_by_tenant() {
        let req = export_request(&[
            alarm("b", Level::Warning),
            alarm("a", Level::Limit),
            alarm("b", Level::Resolved),
        ]);
        let shape: Vec<(String, usize)> = req
            .resource_logs
            .iter()
            .map(|rl| {
                let tenant = rl
                    .resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|kv| kv.key == "tenant.id"))
                    .and_then(|kv| kv.value.clone())
                    .and_then(|v| v.value);
                let Some(any_value::Value::StringValue(t)) = tenant else {
                    panic!("no tenant.id")
                };
                (t, rl.scope_logs[0].log_records.len())
            })
            .collect();
        assert_eq!(shape, [("a".to_string(), 1), ("b".to_string(), 2)]);
    }
}
