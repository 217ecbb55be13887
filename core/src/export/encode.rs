//! Protected events back to OTLP export requests, under the attribute names the sender used.
//!
//! Items are grouped by resource and scope (the same `Arc`, or equal values) into
//! `ResourceSpans`/`ScopeSpans` (`ResourceLogs`/`ScopeLogs`) in first-seen order. Resource and
//! scope attributes go out as received. Each typed field goes back as an attribute under the
//! name it was read from ([`SourceKeys`]): the canonical name, an older GenAI name, or the
//! OpenInference or OpenLLMetry (`traceloop.*`) one. A field copied from the resource (`executor.request_id`, ...) is not
//! repeated on the item, since the resource still carries it; an operation inferred from
//! `openinference.span.kind` or `traceloop.span.kind` is not added, since that attribute is
//! still there. So
//! `normalize` reading the output gives back the same events.
//!
//! Where the values differ from what was sent:
//! - a field normalize converted goes out in the converted form: structured tool arguments
//!   and results as the JSON text normalize made of them, a finish-reasons list as the
//!   comma-joined string, a number sent as a string as a number (and the reverse for text
//!   fields);
//! - the raw idempotency key is never sent, only its hash, as
//!   `executor.idempotency_key_hash` (protect removes the key; this is a second guard);
//! - the values are the protected ones: redacted, hashed, truncated;
//! - two attributes are added to every span and log record: `toolwatch.tenant` (the trusted
//!   tenant) and, when any redaction rule fired, `toolwatch.redactions`, rule ids with counts
//!   (`aws_key:1,email:2`), never what they removed. Attributes of those names that the
//!   sender sent are dropped, so a sender cannot pose as toolwatch downstream;
//! - what the event model does not keep goes out empty: schema URLs, trace flags, dropped
//!   counts of resources, scopes, events and links, and the attribute order (typed fields
//!   first, then the rest in the order received).

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord as OtlpLog, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource as OtlpResource;
use opentelemetry_proto::tonic::trace::v1::{
    span::{Event, Link},
    ResourceSpans, ScopeSpans, Span, Status,
};

use crate::event::{
    AttrValue, Attributes, AuditFields, Field, GenAiFields, LogRecord, Redactions, Resource, Scope,
    SourceKeys, SpanKind, SpanRecord, StatusCode,
};

/// Span and log attribute carrying the trusted tenant.
pub const TENANT_KEY: &str = "toolwatch.tenant";
/// Span and log attribute listing the redaction rules that fired, with counts.
pub const REDACTIONS_KEY: &str = "toolwatch.redactions";
/// Attribute carrying the idempotency key's hash.
pub const IDEMPOTENCY_HASH_KEY: &str = "executor.idempotency_key_hash";

/// The spans as one trace export request.
pub fn trace_request(spans: &[SpanRecord]) -> ExportTraceServiceRequest {
    let groups = group(spans, |s| (&s.resource, &s.scope));
    ExportTraceServiceRequest {
        resource_spans: groups
            .into_iter()
            .map(|(res, scopes)| ResourceSpans {
                resource: Some(resource(res)),
                scope_spans: scopes
                    .into_iter()
                    .map(|(sc, items)| ScopeSpans {
                        scope: Some(scope(sc)),
                        spans: items.into_iter().map(span).collect(),
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url: String::new(),
            })
            .collect(),
    }
}

/// The log records as one logs export request.
pub fn logs_request(logs: &[LogRecord]) -> ExportLogsServiceRequest {
    let groups = group(logs, |l| (&l.resource, &l.scope));
    ExportLogsServiceRequest {
        resource_logs: groups
            .into_iter()
            .map(|(res, scopes)| ResourceLogs {
                resource: Some(resource(res)),
                scope_logs: scopes
                    .into_iter()
                    .map(|(sc, items)| ScopeLogs {
                        scope: Some(scope(sc)),
                        log_records: items.into_iter().map(log).collect(),
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url: String::new(),
            })
            .collect(),
    }
}

type Groups<'a, T> = Vec<(&'a Resource, Vec<(&'a Scope, Vec<&'a T>)>)>;

/// Groups items by resource, then scope, in first-seen order. The same `Arc` is the usual
/// case (one request's items share them); equal values from different requests merge too.
fn group<'a, T>(
    items: &'a [T],
    key: impl Fn(&'a T) -> (&'a Arc<Resource>, &'a Arc<Scope>),
) -> Groups<'a, T> {
    let mut out: Groups<'a, T> = Vec::new();
    for item in items {
        let (res, sc) = key(item);
        // Items of one group are usually adjacent: look from the newest group back.
        let ri = match out
            .iter()
            .rposition(|(r, _)| std::ptr::eq(*r, &**res) || *r == &**res)
        {
            Some(i) => i,
            None => {
                out.push((res, Vec::new()));
                out.len() - 1
            }
        };
        let scopes = &mut out[ri].1;
        match scopes
            .iter()
            .rposition(|(s, _)| std::ptr::eq(*s, &**sc) || *s == &**sc)
        {
            Some(si) => scopes[si].1.push(item),
            None => scopes.push((sc, vec![item])),
        }
    }
    out
}

fn resource(r: &Resource) -> OtlpResource {
    OtlpResource {
        attributes: key_values(&r.attributes),
        ..Default::default()
    }
}

fn scope(s: &Scope) -> InstrumentationScope {
    InstrumentationScope {
        name: s.name.clone(),
        version: s.version.clone(),
        attributes: key_values(&s.attributes),
        dropped_attributes_count: 0,
    }
}

/// An event-model value as OTLP's `AnyValue`; `Empty` is an `AnyValue` with nothing set.
pub fn any_value(v: &AttrValue) -> AnyValue {
    use any_value::Value as V;
    let value = match v {
        AttrValue::Str(s) => Some(V::StringValue(s.clone())),
        AttrValue::Bool(b) => Some(V::BoolValue(*b)),
        AttrValue::Int(i) => Some(V::IntValue(*i)),
        AttrValue::Double(d) => Some(V::DoubleValue(*d)),
        AttrValue::Bytes(b) => Some(V::BytesValue(b.clone())),
        AttrValue::Array(items) => Some(V::ArrayValue(ArrayValue {
            values: items.iter().map(any_value).collect(),
        })),
        AttrValue::Map(attrs) => Some(V::KvlistValue(KeyValueList {
            values: key_values(attrs),
        })),
        AttrValue::Empty => None,
    };
    AnyValue { value }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(value),
        ..Default::default()
    }
}

fn key_values(attrs: &Attributes) -> Vec<KeyValue> {
    attrs.0.iter().map(|(k, v)| kv(k, any_value(v))).collect()
}

fn unix_nanos(ns: i64) -> u64 {
    // normalize reads OTLP's u64 into i64 and refuses what does not fit, so nothing is < 0.
    u64::try_from(ns).unwrap_or(0)
}

fn text(v: &Option<String>) -> Option<AttrValue> {
    v.as_ref().map(|s| AttrValue::Str(s.clone()))
}

fn int(v: &Option<i64>) -> Option<AttrValue> {
    v.map(AttrValue::Int)
}

/// Every typed GenAI field with its value. Destructured whole, so a new field that is not
/// sent back fails to compile instead of going missing downstream.
fn gen_ai_values(g: &GenAiFields) -> [(Field, Option<AttrValue>); 20] {
    let GenAiFields {
        operation,
        provider,
        request_model,
        response_model,
        response_id,
        finish_reasons,
        input_tokens,
        output_tokens,
        cache_read_input_tokens,
        cache_creation_input_tokens,
        conversation_id,
        agent_id,
        agent_name,
        tool_name,
        tool_call_id,
        tool_type,
        tool_arguments,
        tool_result,
        mcp_method,
        mcp_session_id,
    } = g;
    [
        (Field::Operation, text(operation)),
        (Field::Provider, text(provider)),
        (Field::RequestModel, text(request_model)),
        (Field::ResponseModel, text(response_model)),
        (Field::ResponseId, text(response_id)),
        (Field::FinishReasons, text(finish_reasons)),
        (Field::InputTokens, int(input_tokens)),
        (Field::OutputTokens, int(output_tokens)),
        (Field::CacheReadInputTokens, int(cache_read_input_tokens)),
        (
            Field::CacheCreationInputTokens,
            int(cache_creation_input_tokens),
        ),
        (Field::ConversationId, text(conversation_id)),
        (Field::AgentId, text(agent_id)),
        (Field::AgentName, text(agent_name)),
        (Field::ToolName, text(tool_name)),
        (Field::ToolCallId, text(tool_call_id)),
        (Field::ToolType, text(tool_type)),
        (Field::ToolArguments, text(tool_arguments)),
        (Field::ToolResult, text(tool_result)),
        (Field::McpMethod, text(mcp_method)),
        (Field::McpSessionId, text(mcp_session_id)),
    ]
}

/// Every audit field with its value, the raw idempotency key left out (see the header);
/// destructured whole for the same reason as [`gen_ai_values`].
fn audit_values(a: &AuditFields) -> [(Field, Option<AttrValue>); 20] {
    let AuditFields {
        request_id,
        claimed_tenant,
        principal_id,
        resource_id,
        resource_version,
        tool_version,
        tool_schema_version,
        prompt_version,
        effect_class,
        policy_decision,
        policy_reason,
        idempotency_key: _,
        idempotency_key_hash: _,
        retry_attempt,
        timeout_ms,
        result_code,
        result_bytes,
        confirmation_status,
        confirmation_digest,
        cancelled,
        stop_reason,
        claimed_cost_usd,
    } = a;
    [
        (Field::RequestId, text(request_id)),
        (Field::ClaimedTenant, text(claimed_tenant)),
        (Field::PrincipalId, text(principal_id)),
        (Field::ResourceId, text(resource_id)),
        (Field::ResourceVersion, text(resource_version)),
        (Field::ToolVersion, text(tool_version)),
        (Field::ToolSchemaVersion, text(tool_schema_version)),
        (Field::PromptVersion, text(prompt_version)),
        (Field::EffectClass, text(effect_class)),
        (Field::PolicyDecision, text(policy_decision)),
        (Field::PolicyReason, text(policy_reason)),
        (Field::RetryAttempt, int(retry_attempt)),
        (Field::TimeoutMs, int(timeout_ms)),
        (Field::ResultCode, text(result_code)),
        (Field::ResultBytes, int(result_bytes)),
        (Field::ConfirmationStatus, text(confirmation_status)),
        (Field::ConfirmationDigest, text(confirmation_digest)),
        (Field::Cancelled, cancelled.map(AttrValue::Bool)),
        (Field::StopReason, text(stop_reason)),
        (
            Field::ClaimedCostUsd,
            claimed_cost_usd.map(AttrValue::Double),
        ),
    ]
}

/// An item's attributes: typed fields under their source names, the rest as received, then
/// toolwatch's own.
fn item_attributes(
    typed: impl IntoIterator<Item = (Field, Option<AttrValue>)>,
    sources: &SourceKeys,
    audit: &AuditFields,
    rest: &Attributes,
    tenant: &str,
    redactions: &Redactions,
) -> Vec<KeyValue> {
    let mut out = Vec::with_capacity(rest.0.len() + 8);
    for (field, value) in typed {
        if let (Some(value), Some(key)) = (value, sources.key(field)) {
            out.push(kv(key, any_value(&value)));
        }
    }
    if let Some(hash) = &audit.idempotency_key_hash {
        out.push(kv(
            IDEMPOTENCY_HASH_KEY,
            any_value(&AttrValue::Str(hash.clone())),
        ));
    }
    out.extend(
        rest.0
            .iter()
            .filter(|(k, _)| k != TENANT_KEY && k != REDACTIONS_KEY)
            .map(|(k, v)| kv(k, any_value(v))),
    );
    out.push(kv(
        TENANT_KEY,
        any_value(&AttrValue::Str(tenant.to_string())),
    ));
    if !redactions.is_empty() {
        let list = redactions
            .iter()
            .map(|(rule, n)| format!("{rule}:{n}"))
            .collect::<Vec<_>>()
            .join(",");
        out.push(kv(REDACTIONS_KEY, any_value(&AttrValue::Str(list))));
    }
    out
}

fn span_kind(k: SpanKind) -> i32 {
    match k {
        SpanKind::Unspecified => 0,
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn status_code(c: StatusCode) -> i32 {
    match c {
        StatusCode::Unset => 0,
        StatusCode::Ok => 1,
        StatusCode::Error => 2,
    }
}

fn span(s: &SpanRecord) -> Span {
    let typed = gen_ai_values(&s.gen_ai)
        .into_iter()
        .chain(audit_values(&s.audit));
    Span {
        trace_id: s.trace_id.to_vec(),
        span_id: s.span_id.to_vec(),
        trace_state: s.trace_state.clone(),
        parent_span_id: s.parent_span_id.map(|p| p.to_vec()).unwrap_or_default(),
        flags: 0,
        name: s.name.clone(),
        kind: span_kind(s.kind),
        start_time_unix_nano: unix_nanos(s.start_ns),
        end_time_unix_nano: unix_nanos(s.end_ns),
        attributes: item_attributes(
            typed,
            &s.source_keys,
            &s.audit,
            &s.attributes,
            &s.tenant,
            &s.redactions,
        ),
        dropped_attributes_count: s.dropped.attributes,
        events: s
            .events
            .iter()
            .map(|e| Event {
                time_unix_nano: unix_nanos(e.time_ns),
                name: e.name.clone(),
                attributes: key_values(&e.attributes),
                dropped_attributes_count: 0,
            })
            .collect(),
        dropped_events_count: s.dropped.events,
        links: s
            .links
            .iter()
            .map(|l| Link {
                trace_id: l.trace_id.to_vec(),
                span_id: l.span_id.to_vec(),
                trace_state: l.trace_state.clone(),
                attributes: key_values(&l.attributes),
                dropped_attributes_count: 0,
                flags: 0,
            })
            .collect(),
        dropped_links_count: s.dropped.links,
        status: (s.status_code != StatusCode::Unset || !s.status_message.is_empty()).then(|| {
            Status {
                message: s.status_message.clone(),
                code: status_code(s.status_code),
            }
        }),
    }
}

fn log(l: &LogRecord) -> OtlpLog {
    OtlpLog {
        time_unix_nano: unix_nanos(l.time_ns),
        observed_time_unix_nano: unix_nanos(l.observed_time_ns),
        severity_number: l.severity_number,
        severity_text: l.severity_text.clone(),
        body: (l.body != AttrValue::Empty).then(|| any_value(&l.body)),
        attributes: item_attributes(
            audit_values(&l.audit),
            &l.source_keys,
            &l.audit,
            &l.attributes,
            &l.tenant,
            &l.redactions,
        ),
        dropped_attributes_count: l.dropped_attributes,
        flags: 0,
        trace_id: l.trace_id.map(|t| t.to_vec()).unwrap_or_default(),
        span_id: l.span_id.map(|s| s.to_vec()).unwrap_or_default(),
        event_name: l.event_name.clone(),
    }
}

#[cfg(test)]
mod tests;
