//! OTLP messages to the event model: ids checked, fields typed, dialects mapped.
//!
//! The mapping from attribute names to fields is one table, [`FIELD_SOURCES`] (kept in the
//! event model, which reads the names back from the journal); where several names carry the
//! same fact (newer and older GenAI names, the OpenInference dialect), the entry with the
//! lowest rank wins. An attribute whose value cannot be read as its field's type stays in the
//! remaining attributes, so nothing the sender said is lost.

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource as OtlpResource;

use crate::event::{
    AttrValue, Attributes, AuditFields, DroppedCounts, EventBatch, GenAiFields, LogRecord,
    Resource, Scope, Source, SourceKeys, SpanClass, SpanEventRecord, SpanId, SpanKind,
    SpanLinkRecord, SpanRecord, StatusCode, TraceId, DEFAULT_TENANT,
};

use crate::event::{field_index, logfire_template, LOGFIRE_TEMPLATE_KEY, TOOL_SPAN_SOURCES};
/// The typed fields and the attribute names read into them live in the event model (a
/// journal record's [`SourceKeys`] names them); re-exported where the mapping is applied.
pub use crate::event::{Field, FIELD_SOURCES};

/// Why an OTLP request cannot be normalized; the request is rejected whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {problem}")]
pub struct NormalizeError {
    /// Where in the request, e.g. `resourceSpans[0].scopeSpans[1].spans[3]`.
    pub location: String,
    /// What is wrong.
    pub problem: String,
}

const OPENINFERENCE_KIND: &str = "openinference.span.kind";
const TRACELOOP_KIND: &str = "traceloop.span.kind";

impl Field {
    /// The slot of a field whose text a string value is, as sent ([`as_text`] and
    /// [`as_json_text`] of a string are the string itself); `None` for the fields that parse
    /// or convert what they read.
    fn text_slot<'a>(
        self,
        gen_ai: &'a mut GenAiFields,
        audit: &'a mut AuditFields,
    ) -> Option<&'a mut Option<String>> {
        use Field as F;
        Some(match self {
            F::Operation => &mut gen_ai.operation,
            F::Provider => &mut gen_ai.provider,
            F::RequestModel => &mut gen_ai.request_model,
            F::ResponseModel => &mut gen_ai.response_model,
            F::ResponseId => &mut gen_ai.response_id,
            F::ConversationId => &mut gen_ai.conversation_id,
            F::AgentId => &mut gen_ai.agent_id,
            F::AgentName => &mut gen_ai.agent_name,
            F::ToolName => &mut gen_ai.tool_name,
            F::ToolCallId => &mut gen_ai.tool_call_id,
            F::ToolType => &mut gen_ai.tool_type,
            F::ToolArguments => &mut gen_ai.tool_arguments,
            F::ToolResult => &mut gen_ai.tool_result,
            F::McpMethod => &mut gen_ai.mcp_method,
            F::McpSessionId => &mut gen_ai.mcp_session_id,
            F::RequestId => &mut audit.request_id,
            F::ClaimedTenant => &mut audit.claimed_tenant,
            F::PrincipalId => &mut audit.principal_id,
            F::ResourceId => &mut audit.resource_id,
            F::ResourceVersion => &mut audit.resource_version,
            F::ToolVersion => &mut audit.tool_version,
            F::ToolSchemaVersion => &mut audit.tool_schema_version,
            F::PromptVersion => &mut audit.prompt_version,
            F::EffectClass => &mut audit.effect_class,
            F::PolicyDecision => &mut audit.policy_decision,
            F::PolicyReason => &mut audit.policy_reason,
            F::IdempotencyKey => &mut audit.idempotency_key,
            F::ResultCode => &mut audit.result_code,
            F::ConfirmationStatus => &mut audit.confirmation_status,
            F::ConfirmationDigest => &mut audit.confirmation_digest,
            F::StopReason => &mut audit.stop_reason,
            F::FinishReasons
            | F::InputTokens
            | F::OutputTokens
            | F::CacheReadInputTokens
            | F::CacheCreationInputTokens
            | F::RetryAttempt
            | F::TimeoutMs
            | F::ResultBytes
            | F::Cancelled
            | F::ClaimedCostUsd => return None,
        })
    }

    /// Stores `value` if it can be read as this field's type; false leaves it untouched. A
    /// string read as text is moved into the field, leaving an empty string behind (the
    /// tool arguments and results are most of a span's bytes: copying them cost an
    /// allocation and a copy per span).
    fn store(
        self,
        value: &mut AttrValue,
        gen_ai: &mut GenAiFields,
        audit: &mut AuditFields,
    ) -> bool {
        use Field as F;
        if let Some(slot) = self.text_slot(gen_ai, audit) {
            let text = match value {
                AttrValue::Str(s) => Some(std::mem::take(s)),
                other if matches!(self, F::ToolArguments | F::ToolResult) => {
                    Some(as_json_text(other))
                }
                other => as_text(other),
            };
            return put(slot, text);
        }
        let int = |slot: &mut Option<i64>| put(slot, as_int(value));
        match self {
            F::FinishReasons => put(&mut gen_ai.finish_reasons, as_joined_list(value)),
            F::InputTokens => int(&mut gen_ai.input_tokens),
            F::OutputTokens => int(&mut gen_ai.output_tokens),
            F::CacheReadInputTokens => int(&mut gen_ai.cache_read_input_tokens),
            F::CacheCreationInputTokens => int(&mut gen_ai.cache_creation_input_tokens),
            F::RetryAttempt => int(&mut audit.retry_attempt),
            F::TimeoutMs => int(&mut audit.timeout_ms),
            F::ResultBytes => int(&mut audit.result_bytes),
            F::Cancelled => put(&mut audit.cancelled, as_bool(value)),
            F::ClaimedCostUsd => put(&mut audit.claimed_cost_usd, as_float(value)),
            // Every other field has a text slot, read above.
            _ => false,
        }
    }
}

fn put<T>(slot: &mut Option<T>, value: Option<T>) -> bool {
    match value {
        Some(v) => {
            *slot = Some(v);
            true
        }
        None => false,
    }
}

fn as_text(v: &AttrValue) -> Option<String> {
    match v {
        AttrValue::Str(s) => Some(s.clone()),
        AttrValue::Int(i) => Some(i.to_string()),
        AttrValue::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn as_int(v: &AttrValue) -> Option<i64> {
    match v {
        AttrValue::Int(i) => Some(*i),
        AttrValue::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e15 => Some(*d as i64),
        AttrValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn as_float(v: &AttrValue) -> Option<f64> {
    match v {
        AttrValue::Double(d) if d.is_finite() => Some(*d),
        AttrValue::Int(i) => Some(*i as f64),
        AttrValue::Str(s) => s.trim().parse::<f64>().ok().filter(|d| d.is_finite()),
        _ => None,
    }
}

fn as_bool(v: &AttrValue) -> Option<bool> {
    match v {
        AttrValue::Bool(b) => Some(*b),
        AttrValue::Str(s) if s.eq_ignore_ascii_case("true") => Some(true),
        AttrValue::Str(s) if s.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

fn as_joined_list(v: &AttrValue) -> Option<String> {
    match v {
        AttrValue::Array(items) => items
            .iter()
            .map(as_text)
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.join(",")),
        // Some senders (logfire) send the list as a JSON array in a string.
        AttrValue::Str(s) if s.trim_start().starts_with('[') => {
            match serde_json::from_str::<Vec<String>>(s) {
                Ok(parts) => Some(parts.join(",")),
                Err(_) => Some(s.clone()),
            }
        }
        other => as_text(other),
    }
}

/// Content arrives as a structured value or as a string holding JSON; both become JSON text.
/// A string is kept exactly as sent (it may be JSON, or plain text).
fn as_json_text(v: &AttrValue) -> String {
    match v {
        AttrValue::Str(s) => s.clone(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Typed fields pulled out of one attribute list, and what is left.
struct Extraction {
    gen_ai: GenAiFields,
    audit: AuditFields,
    rest: Attributes,
    /// Fields filled under a name other than their canonical one (or not from the item).
    sources: SourceKeys,
}

fn extract(mut attrs: Attributes, audit_only: bool) -> Extraction {
    let index = field_index();
    let mut gen_ai = GenAiFields::default();
    let mut audit = AuditFields::default();
    // Which attribute currently fills each field, and its rank: a handful per item, so a
    // list searched in place (no allocation for items without typed fields, no hashing).
    let mut held: Vec<(Field, u8, usize)> = Vec::new();
    let mut consumed = vec![false; attrs.0.len()];
    let mut sources = SourceKeys::default();
    for i in 0..attrs.0.len() {
        let Some((&name, &(field, rank))) = index.get_key_value(attrs.0[i].0.as_str()) else {
            continue;
        };
        if audit_only && !field.is_audit() {
            continue;
        }
        let slot = held.iter().position(|&(f, _, _)| f == field);
        if slot.is_some_and(|s| held[s].1 <= rank) {
            continue;
        }
        // What a lower-precedence name put in the field: its string goes back to its
        // attribute if this one takes the field, into the field again if not.
        let previous = slot
            .and_then(|_| field.text_slot(&mut gen_ai, &mut audit))
            .and_then(Option::take);
        if field.store(&mut attrs.0[i].1, &mut gen_ai, &mut audit) {
            // A displaced lower-precedence name goes back to the attributes.
            match slot {
                Some(s) => {
                    let displaced = held[s].2;
                    if let (Some(text), AttrValue::Str(moved)) =
                        (previous, &mut attrs.0[displaced].1)
                    {
                        *moved = text;
                    }
                    consumed[displaced] = false;
                    held[s] = (field, rank, i);
                }
                None => held.push((field, rank, i)),
            }
            consumed[i] = true;
            // Remember the name only when it is not the canonical one, so the common case
            // allocates nothing; export sends the value back under this name.
            sources.0.retain(|(f, _)| *f != field);
            if name != field.key() {
                sources.0.push((field, Source::Key(name)));
            }
        } else if let Some(text) = previous {
            // Nothing displaced: the field keeps what it had.
            if let Some(slot) = field.text_slot(&mut gen_ai, &mut audit) {
                *slot = Some(text);
            }
        }
    }
    let rest = attrs
        .0
        .into_iter()
        .zip(consumed)
        .filter_map(|(kv, used)| (!used).then_some(kv))
        .collect();
    Extraction {
        gen_ai,
        audit,
        rest: Attributes(rest),
        sources,
    }
}

/// Converts an OTLP value; bytes stay bytes, empty stays empty.
pub fn attr_value(v: Option<AnyValue>) -> AttrValue {
    use any_value::Value as V;
    match v.and_then(|a| a.value) {
        None => AttrValue::Empty,
        Some(V::StringValue(s)) => AttrValue::Str(s),
        Some(V::BoolValue(b)) => AttrValue::Bool(b),
        Some(V::IntValue(i)) => AttrValue::Int(i),
        Some(V::DoubleValue(d)) => AttrValue::Double(d),
        Some(V::BytesValue(b)) => AttrValue::Bytes(b),
        Some(V::ArrayValue(a)) => {
            AttrValue::Array(a.values.into_iter().map(|v| attr_value(Some(v))).collect())
        }
        Some(V::KvlistValue(kv)) => AttrValue::Map(attributes(kv.values)),
        // An index into a profiles string table; traces and logs have none, so keep it as
        // sent rather than guess.
        Some(V::StringValueStrindex(n)) => AttrValue::Map(Attributes(vec![(
            "string_value_strindex".to_string(),
            AttrValue::Int(i64::from(n)),
        )])),
    }
}

/// Converts OTLP key-values, keeping order.
pub fn attributes(kvs: Vec<KeyValue>) -> Attributes {
    Attributes(
        kvs.into_iter()
            .map(|kv| (kv.key, attr_value(kv.value)))
            .collect(),
    )
}

fn resource(r: Option<OtlpResource>) -> Resource {
    let attrs = attributes(r.map(|r| r.attributes).unwrap_or_default());
    let service_name = attrs
        .get("service.name")
        .and_then(AttrValue::as_str)
        .unwrap_or("unknown_service")
        .to_string();
    Resource {
        service_name,
        attributes: attrs,
    }
}

fn scope(s: Option<InstrumentationScope>) -> Scope {
    match s {
        Some(s) => Scope {
            name: s.name,
            version: s.version,
            attributes: attributes(s.attributes),
        },
        None => Scope::default(),
    }
}

/// Resource-level `executor.*` facts that apply to every item under the resource.
#[derive(Default)]
struct ResourceAudit {
    tenant: Option<String>,
    request_id: Option<String>,
    principal_id: Option<String>,
}

fn resource_audit(res: &Resource) -> ResourceAudit {
    let text = |k: &str| res.attributes.get(k).and_then(as_text);
    ResourceAudit {
        tenant: text("executor.tenant_id"),
        request_id: text("executor.request_id"),
        principal_id: text("executor.principal_id"),
    }
}

fn fill_from_resource(
    audit: &mut AuditFields,
    sources: &mut SourceKeys,
    res: &ResourceAudit,
) -> String {
    for (slot, from, field) in [
        (&mut audit.request_id, &res.request_id, Field::RequestId),
        (
            &mut audit.principal_id,
            &res.principal_id,
            Field::PrincipalId,
        ),
        (&mut audit.claimed_tenant, &res.tenant, Field::ClaimedTenant),
    ] {
        if slot.is_none() && from.is_some() {
            slot.clone_from(from);
            // Export leaves it on the resource, where the sender put it.
            sources.0.push((field, Source::Resource));
        }
    }
    // An empty claim on the item falls back to the resource's, then to the default.
    [audit.claimed_tenant.as_deref(), res.tenant.as_deref()]
        .into_iter()
        .flatten()
        .find(|t| !t.is_empty())
        .unwrap_or(DEFAULT_TENANT)
        .to_string()
}

fn timestamp(v: u64, what: &str, at: &dyn Fn() -> String) -> Result<i64, NormalizeError> {
    i64::try_from(v).map_err(|_| NormalizeError {
        location: at(),
        problem: format!("{what} {v} is past the year 2262 (nanoseconds since the Unix epoch)"),
    })
}

/// What an id field holds.
enum Id<const N: usize> {
    Present([u8; N]),
    /// Not sent (empty bytes).
    Absent,
    /// All zeros, which OTLP defines as "no id".
    Zero,
}

fn read_id<const N: usize>(
    bytes: &[u8],
    what: &str,
    at: &dyn Fn() -> String,
) -> Result<Id<N>, NormalizeError> {
    if bytes.is_empty() {
        return Ok(Id::Absent);
    }
    match <[u8; N]>::try_from(bytes) {
        Ok(id) if id == [0; N] => Ok(Id::Zero),
        Ok(id) => Ok(Id::Present(id)),
        Err(_) => Err(NormalizeError {
            location: at(),
            problem: format!(
                "{what} must be {N} bytes, got {} (in OTLP/JSON: {} hex digits under the lowerCamelCase key)",
                bytes.len(),
                2 * N
            ),
        }),
    }
}

/// A span's own trace or span id: present and not all zeros.
fn required_id<const N: usize>(
    bytes: &[u8],
    what: &str,
    at: &dyn Fn() -> String,
) -> Result<[u8; N], NormalizeError> {
    let problem = match read_id::<N>(bytes, what, at)? {
        Id::Present(id) => return Ok(id),
        Id::Absent => format!(
            "{what} must be {N} bytes, got 0 (in OTLP/JSON: {} hex digits under the lowerCamelCase key)",
            2 * N
        ),
        Id::Zero => format!("{what} is all zeros, which OTLP defines as invalid"),
    };
    Err(NormalizeError {
        location: at(),
        problem,
    })
}

/// A parent or log-context id: empty or all zeros mean "none".
fn optional_id<const N: usize>(
    bytes: &[u8],
    what: &str,
    at: &dyn Fn() -> String,
) -> Result<Option<[u8; N]>, NormalizeError> {
    Ok(match read_id::<N>(bytes, what, at)? {
        Id::Present(id) => Some(id),
        Id::Absent | Id::Zero => None,
    })
}

fn classify(gen_ai: &mut GenAiFields, attrs: &Attributes, kind: SpanKind) -> SpanClass {
    let openinference = attrs.get(OPENINFERENCE_KIND).and_then(AttrValue::as_str);
    if gen_ai.operation.is_none() {
        // Give OpenInference spans the operation the GenAI conventions would have named.
        let implied = match openinference.map(str::to_ascii_uppercase).as_deref() {
            Some("LLM") => Some("chat"),
            Some("EMBEDDING") => Some("embeddings"),
            Some("TOOL") => Some("execute_tool"),
            Some("AGENT") => Some("invoke_agent"),
            _ => None,
        };
        // And OpenLLMetry's (`traceloop.span.kind`: workflow, task, agent, tool).
        let traceloop = || match attrs.get(TRACELOOP_KIND).and_then(AttrValue::as_str) {
            Some("tool") => Some("execute_tool"),
            Some("agent") => Some("invoke_agent"),
            Some("workflow") => Some("invoke_workflow"),
            _ => None,
        };
        // And Logfire's (its message templates).
        let logfire = || {
            let template = attrs.get(LOGFIRE_TEMPLATE_KEY)?.as_str()?;
            logfire_template(template).map(|(operation, _)| operation)
        };
        gen_ai.operation = implied
            .or_else(traceloop)
            .or_else(logfire)
            .map(str::to_string);
    }
    match gen_ai.operation.as_deref() {
        Some("chat" | "text_completion" | "generate_content" | "embeddings") => {
            return SpanClass::Model
        }
        Some("execute_tool") => return SpanClass::Tool,
        Some("invoke_agent" | "create_agent" | "invoke_workflow" | "plan") => {
            return SpanClass::Agent
        }
        _ => {}
    }
    // An MCP `tools/call` naming its tool is a tool execution, on whichever side it is seen.
    if gen_ai.mcp_method.as_deref() == Some("tools/call") && gen_ai.tool_name.is_some() {
        return SpanClass::Tool;
    }
    match kind {
        SpanKind::Client | SpanKind::Producer => SpanClass::Downstream,
        _ => SpanClass::Other,
    }
}

/// OpenInference tool spans carry arguments and result as `input.value` / `output.value`,
/// OpenLLMetry's the tool's name, arguments and result as `traceloop.entity.*`.
fn take_tool_span_sources(ex: &mut Extraction) {
    take_sources(ex, &TOOL_SPAN_SOURCES);
}

/// Logfire's agent and function spans hold their names, arguments and result in plain
/// attributes (`name`, `input`, `output`), read only on spans of its known templates.
fn take_logfire_sources(ex: &mut Extraction) {
    let template = ex
        .rest
        .get(LOGFIRE_TEMPLATE_KEY)
        .and_then(AttrValue::as_str);
    if let Some((_, sources)) = template.and_then(logfire_template) {
        take_sources(ex, sources);
    }
}

/// Moves each named attribute into its field, where the field is still empty and the value
/// reads as the field's type.
fn take_sources(ex: &mut Extraction, sources: &[(&'static str, Field)]) {
    for &(name, field) in sources {
        let slot_empty = match field {
            Field::ToolArguments => ex.gen_ai.tool_arguments.is_none(),
            Field::ToolName => ex.gen_ai.tool_name.is_none(),
            Field::ToolResult => ex.gen_ai.tool_result.is_none(),
            Field::AgentName => ex.gen_ai.agent_name.is_none(),
            _ => false,
        };
        if !slot_empty {
            continue;
        }
        if let Some(pos) = ex.rest.0.iter().position(|(k, _)| k == name) {
            // Content always reads (as JSON text); a name that does not read stays an attribute.
            if field.store(&mut ex.rest.0[pos].1, &mut ex.gen_ai, &mut ex.audit) {
                ex.rest.0.remove(pos);
                ex.sources.0.push((field, Source::Key(name)));
            }
        }
    }
}

/// Normalizes a trace export request. Any invalid span rejects the whole request.
pub fn spans(req: ExportTraceServiceRequest) -> Result<EventBatch, NormalizeError> {
    // Sized once: a span record is large, and growing the vector copied each one again.
    let mut out = Vec::with_capacity(
        req.resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .map(|ss| ss.spans.len())
            .sum(),
    );
    for (ri, rs) in req.resource_spans.into_iter().enumerate() {
        let res = Arc::new(resource(rs.resource));
        let res_audit = resource_audit(&res);
        for (si, ss) in rs.scope_spans.into_iter().enumerate() {
            let scope = Arc::new(scope(ss.scope));
            for (pi, span) in ss.spans.into_iter().enumerate() {
                let at = || format!("resourceSpans[{ri}].scopeSpans[{si}].spans[{pi}]");
                let trace: TraceId = required_id(&span.trace_id, "traceId", &at)?;
                let id: SpanId = required_id(&span.span_id, "spanId", &at)?;
                let parent = optional_id::<8>(&span.parent_span_id, "parentSpanId", &at)?;
                let start_ns = timestamp(span.start_time_unix_nano, "startTimeUnixNano", &at)?;
                let end_ns = timestamp(span.end_time_unix_nano, "endTimeUnixNano", &at)?;
                let kind = SpanKind::from_otlp(span.kind);
                let mut ex = extract(attributes(span.attributes), false);
                let had_operation = ex.gen_ai.operation.is_some();
                let class = classify(&mut ex.gen_ai, &ex.rest, kind);
                if !had_operation && ex.gen_ai.operation.is_some() {
                    ex.sources.0.push((Field::Operation, Source::Inferred));
                }
                if class == SpanClass::Tool {
                    take_tool_span_sources(&mut ex);
                }
                if matches!(class, SpanClass::Tool | SpanClass::Agent) {
                    take_logfire_sources(&mut ex);
                }
                let tenant = fill_from_resource(&mut ex.audit, &mut ex.sources, &res_audit);
                ex.sources.0.sort_unstable_by_key(|(f, _)| *f);
                let mut events = Vec::with_capacity(span.events.len());
                for (ei, e) in span.events.into_iter().enumerate() {
                    let at = || format!("{}.events[{ei}]", at());
                    events.push(SpanEventRecord {
                        time_ns: timestamp(e.time_unix_nano, "timeUnixNano", &at)?,
                        name: e.name,
                        attributes: attributes(e.attributes),
                    });
                }
                let mut links = Vec::with_capacity(span.links.len());
                for (li, l) in span.links.into_iter().enumerate() {
                    let at = || format!("{}.links[{li}]", at());
                    links.push(SpanLinkRecord {
                        trace_id: required_id(&l.trace_id, "traceId", &at)?,
                        span_id: required_id(&l.span_id, "spanId", &at)?,
                        trace_state: l.trace_state,
                        attributes: attributes(l.attributes),
                    });
                }
                let (status_code, status_message) = match span.status {
                    Some(s) => (StatusCode::from_otlp(s.code), s.message),
                    None => (StatusCode::Unset, String::new()),
                };
                out.push(SpanRecord {
                    tenant,
                    resource: Arc::clone(&res),
                    scope: Arc::clone(&scope),
                    trace_id: trace,
                    span_id: id,
                    parent_span_id: parent,
                    trace_state: span.trace_state,
                    name: span.name,
                    kind,
                    class,
                    start_ns,
                    end_ns,
                    status_code,
                    status_message,
                    gen_ai: ex.gen_ai,
                    audit: ex.audit,
                    attributes: ex.rest,
                    events,
                    links,
                    dropped: DroppedCounts {
                        attributes: span.dropped_attributes_count,
                        events: span.dropped_events_count,
                        links: span.dropped_links_count,
                    },
                    redactions: Default::default(),
                    source_keys: ex.sources,
                    sender: None,
                    tenant_mismatch: false,
                    tenant_pending: false,
                    call_digest: Default::default(),
                });
            }
        }
    }
    Ok(EventBatch {
        spans: out,
        logs: Vec::new(),
    })
}

/// Normalizes a logs export request. Any invalid record rejects the whole request.
pub fn logs(req: ExportLogsServiceRequest) -> Result<EventBatch, NormalizeError> {
    let mut out = Vec::with_capacity(
        req.resource_logs
            .iter()
            .flat_map(|rl| &rl.scope_logs)
            .map(|sl| sl.log_records.len())
            .sum(),
    );
    for (ri, rl) in req.resource_logs.into_iter().enumerate() {
        let res = Arc::new(resource(rl.resource));
        let res_audit = resource_audit(&res);
        for (si, sl) in rl.scope_logs.into_iter().enumerate() {
            let scope = Arc::new(scope(sl.scope));
            for (li, rec) in sl.log_records.into_iter().enumerate() {
                let at = || format!("resourceLogs[{ri}].scopeLogs[{si}].logRecords[{li}]");
                let observed = timestamp(rec.observed_time_unix_nano, "observedTimeUnixNano", &at)?;
                let time = timestamp(rec.time_unix_nano, "timeUnixNano", &at)?;
                let trace = optional_id::<16>(&rec.trace_id, "traceId", &at)?;
                let span = optional_id::<8>(&rec.span_id, "spanId", &at)?;
                let mut ex = extract(attributes(rec.attributes), true);
                let tenant = fill_from_resource(&mut ex.audit, &mut ex.sources, &res_audit);
                ex.sources.0.sort_unstable_by_key(|(f, _)| *f);
                out.push(LogRecord {
                    tenant,
                    resource: Arc::clone(&res),
                    scope: Arc::clone(&scope),
                    // The data model says: use the observed time when the event time is unknown.
                    time_ns: if time == 0 { observed } else { time },
                    observed_time_ns: observed,
                    trace_id: trace,
                    span_id: span,
                    severity_number: rec.severity_number,
                    severity_text: rec.severity_text,
                    event_name: rec.event_name,
                    body: attr_value(rec.body),
                    audit: ex.audit,
                    attributes: ex.rest,
                    dropped_attributes: rec.dropped_attributes_count,
                    redactions: Default::default(),
                    source_keys: ex.sources,
                    sender: None,
                    tenant_mismatch: false,
                    tenant_pending: false,
                });
            }
        }
    }
    Ok(EventBatch {
        spans: Vec::new(),
        logs: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> AttrValue {
        AttrValue::Str(v.to_string())
    }

    fn attrs(pairs: &[(&str, AttrValue)]) -> Attributes {
        Attributes(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn newer_names_win_over_older_whatever_the_order() {
        let ex = extract(
            attrs(&[
                ("gen_ai.system", s("openai")),
                ("gen_ai.usage.prompt_tokens", AttrValue::Int(5)),
                ("gen_ai.provider.name", s("anthropic")),
                ("gen_ai.usage.input_tokens", AttrValue::Int(7)),
            ]),
            false,
        );
        assert_eq!(ex.gen_ai.provider.as_deref(), Some("anthropic"));
        assert_eq!(ex.gen_ai.input_tokens, Some(7));
        // The losing names are kept, so nothing the sender said disappears.
        assert_eq!(ex.rest.0.len(), 2);
        assert_eq!(ex.rest.get("gen_ai.system"), Some(&s("openai")));
    }

    #[test]
    fn unreadable_values_stay_attributes() {
        let ex = extract(
            attrs(&[
                ("gen_ai.usage.input_tokens", s("many")),
                ("executor.retry_attempt", s("2")),
            ]),
            false,
        );
        assert_eq!(ex.gen_ai.input_tokens, None);
        assert_eq!(ex.audit.retry_attempt, Some(2));
        assert_eq!(ex.rest.get("gen_ai.usage.input_tokens"), Some(&s("many")));
    }

    #[test]
    fn structured_and_string_arguments_agree() {
        let structured = AttrValue::Map(attrs(&[("order_id", AttrValue::Int(42))]));
        let a = extract(attrs(&[("gen_ai.tool.call.arguments", structured)]), false);
        let b = extract(
            attrs(&[("gen_ai.tool.call.arguments", s("{\"order_id\":42}"))]),
            false,
        );
        assert_eq!(
            a.gen_ai.tool_arguments.as_deref(),
            Some("{\"order_id\":42}")
        );
        assert_eq!(a.gen_ai.tool_arguments, b.gen_ai.tool_arguments);
    }

    #[test]
    fn openinference_tool_span_maps_onto_the_same_fields() {
        let mut ex = extract(
            attrs(&[
                (OPENINFERENCE_KIND, s("TOOL")),
                ("tool.name", s("search_orders")),
                ("input.value", s("{\"q\":1}")),
                ("output.value", s("[]")),
            ]),
            false,
        );
        let class = classify(&mut ex.gen_ai, &ex.rest, SpanKind::Internal);
        assert_eq!(class, SpanClass::Tool);
        take_tool_span_sources(&mut ex);
        assert_eq!(ex.gen_ai.tool_name.as_deref(), Some("search_orders"));
        assert_eq!(ex.gen_ai.operation.as_deref(), Some("execute_tool"));
        assert_eq!(ex.gen_ai.tool_arguments.as_deref(), Some("{\"q\":1}"));
        assert_eq!(ex.gen_ai.tool_result.as_deref(), Some("[]"));
    }

    #[test]
    fn openllmetry_tool_span_maps_onto_the_same_fields() {
        let input = r#"{"tool_name":"get_weather","arguments":{"city":"Oslo"}}"#;
        let mut ex = extract(
            attrs(&[
                (TRACELOOP_KIND, s("tool")),
                ("traceloop.entity.name", s("get_weather")),
                ("traceloop.entity.input", s(input)),
                ("traceloop.entity.output", s(r#"{"content":"4C"}"#)),
                ("error.type", s("tool_error")),
            ]),
            false,
        );
        let class = classify(&mut ex.gen_ai, &ex.rest, SpanKind::Internal);
        take_tool_span_sources(&mut ex);
        assert_eq!(class, SpanClass::Tool);
        assert_eq!(ex.gen_ai.operation.as_deref(), Some("execute_tool"));
        assert_eq!(ex.gen_ai.tool_name.as_deref(), Some("get_weather"));
        assert_eq!(ex.gen_ai.tool_arguments.as_deref(), Some(input));
        assert_eq!(
            ex.gen_ai.tool_result.as_deref(),
            Some(r#"{"content":"4C"}"#)
        );
        let kept: Vec<&str> = ex.rest.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kept, vec![TRACELOOP_KIND, "error.type"]);
        // A tool name that does not read as text stays an attribute.
        let mut ex = extract(
            attrs(&[
                (TRACELOOP_KIND, s("tool")),
                ("traceloop.entity.name", AttrValue::Double(1.5)),
            ]),
            false,
        );
        classify(&mut ex.gen_ai, &ex.rest, SpanKind::Internal);
        take_tool_span_sources(&mut ex);
        assert_eq!(ex.gen_ai.tool_name, None);
        assert_eq!(ex.rest.0.len(), 2);
        // On a workflow span the same names stay attributes.
        let mut g = GenAiFields::default();
        let w = attrs(&[(TRACELOOP_KIND, s("workflow"))]);
        assert_eq!(classify(&mut g, &w, SpanKind::Internal), SpanClass::Agent);
        assert_eq!(g.operation.as_deref(), Some("invoke_workflow"));
    }

    #[test]
    fn logfire_agent_and_function_spans_map_by_their_templates() {
        let template = |t: &str| (LOGFIRE_TEMPLATE_KEY, s(t));
        let mut ex = extract(
            attrs(&[
                template("Function: {name}"),
                ("name", s("get_weather")),
                ("input", s(r#"{"city": "Oslo"}"#)),
                ("output", s("4C")),
                ("mcp_data", s("null")),
            ]),
            false,
        );
        let class = classify(&mut ex.gen_ai, &ex.rest, SpanKind::Internal);
        assert_eq!(class, SpanClass::Tool);
        take_logfire_sources(&mut ex);
        assert_eq!(ex.gen_ai.operation.as_deref(), Some("execute_tool"));
        assert_eq!(ex.gen_ai.tool_name.as_deref(), Some("get_weather"));
        assert_eq!(
            ex.gen_ai.tool_arguments.as_deref(),
            Some(r#"{"city": "Oslo"}"#)
        );
        assert_eq!(ex.gen_ai.tool_result.as_deref(), Some("4C"));
        let kept: Vec<&str> = ex.rest.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kept, [LOGFIRE_TEMPLATE_KEY, "mcp_data"]);
        let sources: Vec<_> = ex.sources.0.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            sources,
            [Field::ToolName, Field::ToolArguments, Field::ToolResult]
        );

        let mut ex = extract(
            attrs(&[
                template("Agent run: {name!r}"),
                ("name", s("weather_agent")),
            ]),
            false,
        );
        assert_eq!(
            classify(&mut ex.gen_ai, &ex.rest, SpanKind::Internal),
            SpanClass::Agent
        );
        take_logfire_sources(&mut ex);
        assert_eq!(ex.gen_ai.agent_name.as_deref(), Some("weather_agent"));
        // The agents trace's root is the workflow; its name stays an attribute.
        let mut ex = extract(
            attrs(&[
                template("OpenAI Agents trace: {name}"),
                ("name", s("Agent workflow")),
            ]),
            false,
        );
        let class = classify(&mut ex.gen_ai, &ex.rest, SpanKind::Internal);
        assert_eq!(class, SpanClass::Agent);
        assert_eq!(ex.gen_ai.operation.as_deref(), Some("invoke_workflow"));
        take_logfire_sources(&mut ex);
        assert_eq!(ex.rest.0.len(), 2);
        // Another template (a turn), or a `name` on a span with none, is left alone.
        for t in [Some("Turn {turn} for agent weather_agent"), None] {
            let mut list = vec![("name", s("turn"))];
            list.extend(t.map(template));
            let mut ex = extract(attrs(&list), false);
            let class = classify(&mut ex.gen_ai, &ex.rest, SpanKind::Internal);
            assert_eq!(class, SpanClass::Other);
            take_logfire_sources(&mut ex);
            assert_eq!(ex.gen_ai, GenAiFields::default());
        }
    }

    #[test]
    fn classes() {
        let mut g = GenAiFields {
            mcp_method: Some("tools/call".into()),
            tool_name: Some("fetch".into()),
            ..Default::default()
        };
        assert_eq!(
            classify(&mut g, &Attributes::default(), SpanKind::Server),
            SpanClass::Tool
        );
        let mut g = GenAiFields::default();
        assert_eq!(
            classify(&mut g, &Attributes::default(), SpanKind::Client),
            SpanClass::Downstream
        );
        let mut g = GenAiFields {
            operation: Some("embeddings".into()),
            ..Default::default()
        };
        assert_eq!(
            classify(&mut g, &Attributes::default(), SpanKind::Client),
            SpanClass::Model
        );
        // The agent operations of the 2026 conventions.
        for op in ["invoke_agent", "create_agent", "invoke_workflow", "plan"] {
            let mut g = GenAiFields {
                operation: Some(op.into()),
                ..Default::default()
            };
            assert_eq!(
                classify(&mut g, &Attributes::default(), SpanKind::Internal),
                SpanClass::Agent,
                "{op}"
            );
        }
    }

    #[test]
    fn finish_reasons_as_a_list_a_json_string_or_openinferences_single_name() {
        let read = |pairs: &[(&str, AttrValue)]| {
            let ex = extract(attrs(pairs), false);
            (ex.gen_ai.finish_reasons, ex.rest.0.len())
        };
        let list = AttrValue::Array(vec![s("tool_calls"), s("stop")]);
        let want = (Some("tool_calls,stop".to_string()), 0);
        assert_eq!(read(&[("gen_ai.response.finish_reasons", list)]), want);
        let json = s(r#"["tool_calls", "stop"]"#);
        assert_eq!(read(&[("gen_ai.response.finish_reasons", json)]), want);
        // Text that only looks like a list is kept as sent.
        let odd = s("[stop");
        assert_eq!(
            read(&[("gen_ai.response.finish_reasons", odd)]),
            (Some("[stop".to_string()), 0)
        );
        // OpenInference's name, below the GenAI one whatever the order.
        assert_eq!(
            read(&[("llm.finish_reason", s("stop"))]),
            (Some("stop".to_string()), 0)
        );
        assert_eq!(
            read(&[
                ("llm.finish_reason", s("stop")),
                ("gen_ai.response.finish_reasons", s("length")),
            ]),
            (Some("length".to_string()), 1)
        );
    }

    mod properties {
        use super::super::*;
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
        use proptest::prelude::*;

        fn value() -> impl Strategy<Value = any_value::Value> {
            prop_oneof![
                "[a-z0-9 ]{0,8}".prop_map(any_value::Value::StringValue),
                (0i64..5000).prop_map(any_value::Value::IntValue),
                (0i64..50).prop_map(|n| any_value::Value::StringValue(n.to_string())),
                any::<bool>().prop_map(any_value::Value::BoolValue),
                (0.0f64..10.0).prop_map(any_value::Value::DoubleValue),
            ]
        }

        fn attribute() -> impl Strategy<Value = KeyValue> {
            let names: Vec<&'static str> = FIELD_SOURCES
                .iter()
                .map(|(n, _, _)| *n)
                .chain(["custom.a", "custom.b", OPENINFERENCE_KIND, TRACELOOP_KIND])
                .chain(TOOL_SPAN_SOURCES.iter().map(|(n, _)| *n))
                .collect();
            (prop::sample::select(names), value()).prop_map(|(k, v)| KeyValue {
                key: k.to_string(),
                value: Some(AnyValue { value: Some(v) }),
                ..Default::default()
            })
        }

        fn request(attrs: Vec<KeyValue>) -> ExportTraceServiceRequest {
            ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans: vec![Span {
                            trace_id: vec![1; 16],
                            span_id: vec![2; 8],
                            attributes: attrs,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
        }

        fn sorted(a: &Attributes) -> Vec<String> {
            let mut v: Vec<String> = a.0.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            v.sort();
            v
        }

        proptest! {
            /// Attribute order never changes the typed fields (names are distinct, as OTLP
            /// requires), and every attribute is either in a field or kept.
            #[test]
            fn attribute_order_does_not_matter(
                attrs in prop::collection::vec(attribute(), 0..24)
                    .prop_map(|mut v| { v.sort_by(|a, b| a.key.cmp(&b.key)); v.dedup_by(|a, b| a.key == b.key); v })
                    .prop_shuffle(),
                seed in any::<u64>(),
            ) {
                let mut shuffled = attrs.clone();
                // A second, different order of the same attributes.
                let n = shuffled.len();
                if n > 1 {
                    shuffled.rotate_left((seed as usize) % n);
                    shuffled.reverse();
                }
                let a = spans(request(attrs.clone())).expect("valid");
                let b = spans(request(shuffled)).expect("valid");
                let (a, b) = (&a.spans[0], &b.spans[0]);
                prop_assert_eq!(&a.gen_ai, &b.gen_ai);
                prop_assert_eq!(&a.audit, &b.audit);
                prop_assert_eq!(a.class, b.class);
                prop_assert_eq!(sorted(&a.attributes), sorted(&b.attributes));
                let filled = attrs.len() - a.attributes.0.len();
                let typed = format!("{:?}{:?}", a.gen_ai, a.audit).matches("Some(").count();
                // Each consumed attribute filled one field; fields set only by class
                // inference (operation from the OpenInference kind) account for the rest.
                prop_assert!(filled <= typed, "{} consumed, {} fields set", filled, typed);
            }
        }
    }

    #[test]
    fn each_field_has_one_canonical_name_and_it_is_rank_zero() {
        use crate::event::source_key;
        for (name, field, rank) in FIELD_SOURCES {
            assert_eq!(*name == field.key(), *rank == 0, "{name}");
            assert_eq!(source_key(name), Some(*name));
        }
        assert_eq!(source_key("input.value"), Some("input.value"));
        assert_eq!(source_key("custom"), None);
    }

    #[test]
    fn source_keys_remember_names_other_than_the_canonical_one() {
        let ex = extract(
            attrs(&[
                ("llm.system", s("a")),
                ("gen_ai.request.model", s("m")),
                ("llm.provider", s("b")),
            ]),
            false,
        );
        assert_eq!(ex.gen_ai.provider.as_deref(), Some("b"));
        assert_eq!(
            ex.sources.0,
            vec![(Field::Provider, Source::Key("llm.provider"))]
        );
        let ex = extract(attrs(&[("gen_ai.provider.name", s("p"))]), false);
        assert!(ex.sources.0.is_empty());
    }

    #[test]
    fn logs_keep_gen_ai_names_as_attributes() {
        let ex = extract(
            attrs(&[
                ("gen_ai.tool.name", s("x")),
                ("executor.policy_decision", s("deny")),
            ]),
            true,
        );
        assert_eq!(ex.audit.policy_decision.as_deref(), Some("deny"));
        assert_eq!(ex.rest.get("gen_ai.tool.name"), Some(&s("x")));
    }
}
