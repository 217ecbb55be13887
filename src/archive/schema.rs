//! Arrow schemas of the archive tables, and the column builders that fill them.
//!
//! Column names are a contract with responders' saved queries: they are documented one per
//! line in `schemas/archive.md` and only ever added to. The partition columns `tenant`,
//! `date` and `hour` live in the directory names (Hive style), not inside the files.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, ListBuilder, MapBuilder,
    MapFieldNames, StringBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use serde::Serialize;

use crate::assemble::summary::RequestSummary;
use crate::budget::evaluate::Alarm;
use crate::event::{
    hex_id, AttrValue, Attributes, AuditFields, GenAiFields, LogRecord, Redactions, SpanRecord,
    SCHEMA_VERSION,
};

/// Rows a fresh builder has room for. Arrow's default (1024 a column, some 300 KiB for the
/// span builders) would make every buffered partition hold that much however few its rows;
/// builders grow by doubling, so starting small costs a few reallocations on busy ones.
const INITIAL_ROWS: usize = 16;

/// Builders created with room for [`INITIAL_ROWS`].
trait Small {
    fn small() -> Self;
}

impl Small for StringBuilder {
    fn small() -> Self {
        StringBuilder::with_capacity(INITIAL_ROWS, INITIAL_ROWS * 16)
    }
}

macro_rules! small_primitive {
    ($($t:ty),*) => {$(
        impl Small for $t {
            fn small() -> Self {
                <$t>::with_capacity(INITIAL_ROWS)
            }
        }
    )*};
}
small_primitive!(
    Int32Builder,
    Int64Builder,
    Float64Builder,
    BooleanBuilder,
    TimestampNanosecondBuilder
);

impl<T: Small, const N: usize> Small for [T; N] {
    fn small() -> Self {
        std::array::from_fn(|_| T::small())
    }
}

const UTC: &str = "UTC";

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into()))
}

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn redactions_field() -> Field {
    counts_map_field("redactions")
}

/// A `Map<Utf8, Int64>` column (rule or tool name to a count).
fn counts_map_field(name: &str) -> Field {
    let entries = Field::new(
        "entries",
        DataType::Struct(
            vec![
                Field::new("keys", DataType::Utf8, false),
                Field::new("values", DataType::Int64, true),
            ]
            .into(),
        ),
        false,
    );
    Field::new(name, DataType::Map(Arc::new(entries), false), false)
}

fn map_field_names() -> MapFieldNames {
    MapFieldNames {
        entry: "entries".into(),
        key: "keys".into(),
        value: "values".into(),
    }
}

/// The GenAI convention columns, in archive order.
fn gen_ai_fields() -> Vec<Field> {
    let mut f: Vec<Field> = [
        "operation",
        "provider",
        "request_model",
        "response_model",
        "response_id",
        "finish_reasons",
    ]
    .iter()
    .map(|n| utf8(n, true))
    .collect();
    for n in [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ] {
        f.push(Field::new(n, DataType::Int64, true));
    }
    for n in [
        "conversation_id",
        "agent_id",
        "agent_name",
        "tool_name",
        "tool_call_id",
        "tool_type",
        "tool_arguments",
        "tool_result",
        "mcp_method",
        "mcp_session_id",
    ] {
        f.push(utf8(n, true));
    }
    f
}

/// The `executor.*` audit columns, in archive order.
fn audit_fields() -> Vec<Field> {
    let mut f: Vec<Field> = [
        "claimed_tenant",
        "principal_id",
        "resource_id",
        "resource_version",
        "tool_version",
        "tool_schema_version",
        "prompt_version",
        "effect_class",
        "policy_decision",
        "policy_reason",
        "idempotency_key_hash",
    ]
    .iter()
    .map(|n| utf8(n, true))
    .collect();
    f.push(Field::new("retry_attempt", DataType::Int64, true));
    f.push(Field::new("timeout_ms", DataType::Int64, true));
    f.push(utf8("result_code", true));
    f.push(Field::new("result_bytes", DataType::Int64, true));
    f.push(utf8("confirmation_status", true));
    f.push(utf8("confirmation_digest", true));
    f.push(Field::new("cancelled", DataType::Boolean, true));
    f.push(utf8("stop_reason", true));
    f.push(Field::new("claimed_cost_usd", DataType::Float64, true));
    f
}

/// Schema of the `spans` table.
pub fn spans_schema() -> SchemaRef {
    let mut f = vec![
        Field::new("schema_version", DataType::Int32, false),
        utf8("trace_id", false),
        utf8("span_id", false),
        utf8("parent_span_id", true),
        utf8("trace_state", true),
        utf8("request_id", true),
        utf8("service_name", false),
        utf8("scope_name", true),
        utf8("scope_version", true),
        utf8("span_class", false),
        utf8("span_kind", false),
        utf8("name", false),
        Field::new("start_time", ts(), false),
        Field::new("end_time", ts(), false),
        Field::new("duration_ns", DataType::Int64, false),
        utf8("status_code", false),
        utf8("status_message", true),
    ];
    f.extend(gen_ai_fields());
    f.extend(audit_fields());
    f.extend([
        utf8("resource_attributes", false),
        utf8("attributes", false),
        utf8("events", false),
        utf8("links", false),
        Field::new("dropped_attributes_count", DataType::Int64, false),
        Field::new("dropped_events_count", DataType::Int64, false),
        Field::new("dropped_links_count", DataType::Int64, false),
        redactions_field(),
    ]);
    Arc::new(Schema::new(f))
}

/// Schema of the `logs` table.
pub fn logs_schema() -> SchemaRef {
    let mut f = vec![
        Field::new("schema_version", DataType::Int32, false),
        Field::new("time", ts(), false),
        Field::new("observed_time", ts(), false),
        utf8("trace_id", true),
        utf8("span_id", true),
        utf8("request_id", true),
        utf8("service_name", false),
        utf8("scope_name", true),
        utf8("scope_version", true),
        Field::new("severity_number", DataType::Int32, false),
        utf8("severity_text", true),
        utf8("event_name", true),
        utf8("body", true),
    ];
    f.extend(audit_fields());
    f.extend([
        utf8("resource_attributes", false),
        utf8("attributes", false),
        Field::new("dropped_attributes_count", DataType::Int64, false),
        redactions_field(),
    ]);
    Arc::new(Schema::new(f))
}

/// Columns written as JSON text: large, mostly unique values where a dictionary only costs.
pub const JSON_COLUMNS: &[&str] = &[
    "tool_arguments",
    "tool_result",
    "resource_attributes",
    "attributes",
    "events",
    "links",
    "body",
];

fn empty_to_none(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

fn json_text<'b, T: Serialize + ?Sized>(v: &T, buf: &'b mut Vec<u8>) -> &'b str {
    buf.clear();
    // Serializing our own types to a Vec cannot fail; fall back to an empty object if it did.
    if serde_json::to_writer(&mut *buf, v).is_err() {
        buf.clear();
        buf.extend_from_slice(b"{}");
    }
    std::str::from_utf8(buf).unwrap_or("{}")
}

struct GenAiColumns {
    text1: [StringBuilder; 6],
    tokens: [Int64Builder; 4],
    text2: [StringBuilder; 10],
}

impl Default for GenAiColumns {
    fn default() -> Self {
        GenAiColumns {
            text1: Small::small(),
            tokens: Small::small(),
            text2: Small::small(),
        }
    }
}

impl GenAiColumns {
    fn append(&mut self, g: &GenAiFields) {
        let t1 = [
            &g.operation,
            &g.provider,
            &g.request_model,
            &g.response_model,
            &g.response_id,
            &g.finish_reasons,
        ];
        for (b, v) in self.text1.iter_mut().zip(t1) {
            b.append_option(v.as_deref());
        }
        let tokens = [
            g.input_tokens,
            g.output_tokens,
            g.cache_read_input_tokens,
            g.cache_creation_input_tokens,
        ];
        for (b, v) in self.tokens.iter_mut().zip(tokens) {
            b.append_option(v);
        }
        let t2 = [
            &g.conversation_id,
            &g.agent_id,
            &g.agent_name,
            &g.tool_name,
            &g.tool_call_id,
            &g.tool_type,
            &g.tool_arguments,
            &g.tool_result,
            &g.mcp_method,
            &g.mcp_session_id,
        ];
        for (b, v) in self.text2.iter_mut().zip(t2) {
            b.append_option(v.as_deref());
        }
    }

    fn finish(&mut self, out: &mut Vec<ArrayRef>) {
        out.extend(
            self.text1
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        out.extend(
            self.tokens
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        out.extend(
            self.text2
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
    }
}

struct AuditColumns {
    text: [StringBuilder; 11],
    retry_attempt: Int64Builder,
    timeout_ms: Int64Builder,
    result_code: StringBuilder,
    result_bytes: Int64Builder,
    confirmation_status: StringBuilder,
    confirmation_digest: StringBuilder,
    cancelled: BooleanBuilder,
    stop_reason: StringBuilder,
    claimed_cost_usd: Float64Builder,
}

impl Default for AuditColumns {
    fn default() -> Self {
        AuditColumns {
            text: Small::small(),
            retry_attempt: Small::small(),
            timeout_ms: Small::small(),
            result_code: Small::small(),
            result_bytes: Small::small(),
            confirmation_status: Small::small(),
            confirmation_digest: Small::small(),
            cancelled: Small::small(),
            stop_reason: Small::small(),
            claimed_cost_usd: Small::small(),
        }
    }
}

impl AuditColumns {
    fn append(&mut self, a: &AuditFields) {
        let text = [
            &a.claimed_tenant,
            &a.principal_id,
            &a.resource_id,
            &a.resource_version,
            &a.tool_version,
            &a.tool_schema_version,
            &a.prompt_version,
            &a.effect_class,
            &a.policy_decision,
            &a.policy_reason,
            &a.idempotency_key_hash,
        ];
        for (b, v) in self.text.iter_mut().zip(text) {
            b.append_option(v.as_deref());
        }
        self.retry_attempt.append_option(a.retry_attempt);
        self.timeout_ms.append_option(a.timeout_ms);
        self.result_code.append_option(a.result_code.as_deref());
        self.result_bytes.append_option(a.result_bytes);
        self.confirmation_status
            .append_option(a.confirmation_status.as_deref());
        self.confirmation_digest
            .append_option(a.confirmation_digest.as_deref());
        self.cancelled.append_option(a.cancelled);
        self.stop_reason.append_option(a.stop_reason.as_deref());
        self.claimed_cost_usd.append_option(a.claimed_cost_usd);
    }

    fn finish(&mut self, out: &mut Vec<ArrayRef>) {
        out.extend(
            self.text
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        out.push(Arc::new(self.retry_attempt.finish()));
        out.push(Arc::new(self.timeout_ms.finish()));
        out.push(Arc::new(self.result_code.finish()));
        out.push(Arc::new(self.result_bytes.finish()));
        out.push(Arc::new(self.confirmation_status.finish()));
        out.push(Arc::new(self.confirmation_digest.finish()));
        out.push(Arc::new(self.cancelled.finish()));
        out.push(Arc::new(self.stop_reason.finish()));
        out.push(Arc::new(self.claimed_cost_usd.finish()));
    }
}

/// A `Map<Utf8, Int64>` column: rule id or tool name to a count.
struct CountsColumn(MapBuilder<StringBuilder, Int64Builder>);

impl Default for CountsColumn {
    fn default() -> Self {
        CountsColumn(MapBuilder::new(
            Some(map_field_names()),
            StringBuilder::small(),
            Int64Builder::small(),
        ))
    }
}

impl CountsColumn {
    fn append<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a str, i64)>,
    ) -> Result<(), ArrowError> {
        for (name, count) in entries {
            self.0.keys().append_value(name);
            self.0.values().append_value(count);
        }
        self.0.append(true)
    }

    /// Appends a row's redaction counts.
    fn append_redactions(&mut self, r: &Redactions) -> Result<(), ArrowError> {
        self.append(r.iter().map(|(rule, n)| (rule.as_str(), i64::from(*n))))
    }

    fn finish(&mut self) -> ArrayRef {
        Arc::new(self.0.finish())
    }
}

#[derive(Serialize)]
struct EventJson<'a> {
    time_unix_nano: i64,
    name: &'a str,
    attributes: &'a Attributes,
}

#[derive(Serialize)]
struct LinkJson<'a> {
    trace_id: String,
    span_id: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    trace_state: &'a str,
    attributes: &'a Attributes,
}

/// Rows of the `spans` table being collected for one record batch.
pub struct SpanRows {
    schema: SchemaRef,
    len: usize,
    head: [StringBuilder; 11],
    schema_version: Int32Builder,
    start_time: TimestampNanosecondBuilder,
    end_time: TimestampNanosecondBuilder,
    duration_ns: Int64Builder,
    status_code: StringBuilder,
    status_message: StringBuilder,
    gen_ai: GenAiColumns,
    audit: AuditColumns,
    json: [StringBuilder; 4],
    dropped: [Int64Builder; 3],
    redactions: CountsColumn,
    scratch: Vec<u8>,
}

impl Default for SpanRows {
    fn default() -> Self {
        SpanRows {
            schema: spans_schema(),
            len: 0,
            head: Small::small(),
            schema_version: Int32Builder::small(),
            start_time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            end_time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            duration_ns: Int64Builder::small(),
            status_code: StringBuilder::small(),
            status_message: StringBuilder::small(),
            gen_ai: GenAiColumns::default(),
            audit: AuditColumns::default(),
            json: Small::small(),
            dropped: Small::small(),
            redactions: CountsColumn::default(),
            scratch: Vec::new(),
        }
    }
}

impl SpanRows {
    /// Rows collected so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no rows are collected.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// About the memory the collected rows hold: their JSON, name and status text, and a
    /// fixed share for the other columns.
    pub fn approx_bytes(&self) -> usize {
        let text: usize = self
            .json
            .iter()
            .map(|b| b.values_slice().len())
            .sum::<usize>()
            + self.head[10].values_slice().len()
            + self.status_message.values_slice().len();
        text + self.len * 400
    }

    /// Adds one span.
    pub fn append(&mut self, s: &SpanRecord) -> Result<(), ArrowError> {
        self.schema_version.append_value(SCHEMA_VERSION);
        // The columns between schema_version and start_time, in schema order.
        let [trace_id, span_id, parent, trace_state, request_id, service, scope_name, scope_version, class, kind, name] =
            &mut self.head;
        trace_id.append_value(hex_id(&s.trace_id));
        span_id.append_value(hex_id(&s.span_id));
        parent.append_option(s.parent_span_id.map(|p| hex_id(&p)));
        trace_state.append_option(empty_to_none(&s.trace_state));
        request_id.append_option(s.audit.request_id.as_deref());
        service.append_value(&s.resource.service_name);
        scope_name.append_option(empty_to_none(&s.scope.name));
        scope_version.append_option(empty_to_none(&s.scope.version));
        class.append_value(s.class.as_str());
        kind.append_value(s.kind.as_str());
        name.append_value(&s.name);
        self.start_time.append_value(s.start_ns);
        self.end_time.append_value(s.end_ns);
        self.duration_ns
            .append_value(s.end_ns.saturating_sub(s.start_ns));
        self.status_code.append_value(s.status_code.as_str());
        self.status_message
            .append_option(empty_to_none(&s.status_message));
        self.gen_ai.append(&s.gen_ai);
        self.audit.append(&s.audit);
        let [res_json, attr_json, events_json, links_json] = &mut self.json;
        res_json.append_value(json_text(&s.resource.attributes, &mut self.scratch));
        attr_json.append_value(json_text(&s.attributes, &mut self.scratch));
        let events: Vec<EventJson> = s
            .events
            .iter()
            .map(|e| EventJson {
                time_unix_nano: e.time_ns,
                name: &e.name,
                attributes: &e.attributes,
            })
            .collect();
        events_json.append_value(json_text(&events, &mut self.scratch));
        let links: Vec<LinkJson> = s
            .links
            .iter()
            .map(|l| LinkJson {
                trace_id: hex_id(&l.trace_id),
                span_id: hex_id(&l.span_id),
                trace_state: &l.trace_state,
                attributes: &l.attributes,
            })
            .collect();
        links_json.append_value(json_text(&links, &mut self.scratch));
        let [da, de, dl] = &mut self.dropped;
        da.append_value(i64::from(s.dropped.attributes));
        de.append_value(i64::from(s.dropped.events));
        dl.append_value(i64::from(s.dropped.links));
        self.redactions.append_redactions(&s.redactions)?;
        self.len += 1;
        Ok(())
    }

    /// The collected rows as a record batch; the builders start over empty.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        cols.push(Arc::new(self.schema_version.finish()));
        cols.extend(
            self.head
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.start_time.finish()));
        cols.push(Arc::new(self.end_time.finish()));
        cols.push(Arc::new(self.duration_ns.finish()));
        cols.push(Arc::new(self.status_code.finish()));
        cols.push(Arc::new(self.status_message.finish()));
        self.gen_ai.finish(&mut cols);
        self.audit.finish(&mut cols);
        cols.extend(
            self.json
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.extend(
            self.dropped
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(self.redactions.finish());
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }
}

/// Rows of the `logs` table being collected for one record batch.
pub struct LogRows {
    schema: SchemaRef,
    len: usize,
    schema_version: Int32Builder,
    time: TimestampNanosecondBuilder,
    observed_time: TimestampNanosecondBuilder,
    ids: [StringBuilder; 6],
    severity_number: Int32Builder,
    text: [StringBuilder; 3],
    audit: AuditColumns,
    json: [StringBuilder; 2],
    dropped: Int64Builder,
    redactions: CountsColumn,
    scratch: Vec<u8>,
}

impl Default for LogRows {
    fn default() -> Self {
        LogRows {
            schema: logs_schema(),
            len: 0,
            schema_version: Int32Builder::small(),
            time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            observed_time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            ids: Small::small(),
            severity_number: Int32Builder::small(),
            text: Small::small(),
            audit: AuditColumns::default(),
            json: Small::small(),
            dropped: Int64Builder::small(),
            redactions: CountsColumn::default(),
            scratch: Vec::new(),
        }
    }
}

impl LogRows {
    /// Rows collected so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no rows are collected.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// About the memory the collected rows hold: their text and JSON, and a fixed share for
    /// the other columns.
    pub fn approx_bytes(&self) -> usize {
        let text: usize = self
            .text
            .iter()
            .chain(&self.json)
            .map(|b| b.values_slice().len())
            .sum();
        text + self.len * 300
    }

    /// Adds one log record.
    pub fn append(&mut self, r: &LogRecord) -> Result<(), ArrowError> {
        self.schema_version.append_value(SCHEMA_VERSION);
        self.time.append_value(r.time_ns);
        self.observed_time.append_value(r.observed_time_ns);
        let [trace_id, span_id, request_id, service, scope_name, scope_version] = &mut self.ids;
        trace_id.append_option(r.trace_id.map(|t| hex_id(&t)));
        span_id.append_option(r.span_id.map(|s| hex_id(&s)));
        request_id.append_option(r.audit.request_id.as_deref());
        service.append_value(&r.resource.service_name);
        scope_name.append_option(empty_to_none(&r.scope.name));
        scope_version.append_option(empty_to_none(&r.scope.version));
        self.severity_number.append_value(r.severity_number);
        let [severity_text, event_name, body] = &mut self.text;
        severity_text.append_option(empty_to_none(&r.severity_text));
        event_name.append_option(empty_to_none(&r.event_name));
        match &r.body {
            AttrValue::Empty => body.append_null(),
            AttrValue::Str(s) => body.append_value(s),
            other => body.append_value(json_text(other, &mut self.scratch)),
        }
        self.audit.append(&r.audit);
        let [res_json, attr_json] = &mut self.json;
        res_json.append_value(json_text(&r.resource.attributes, &mut self.scratch));
        attr_json.append_value(json_text(&r.attributes, &mut self.scratch));
        self.dropped.append_value(i64::from(r.dropped_attributes));
        self.redactions.append_redactions(&r.redactions)?;
        self.len += 1;
        Ok(())
    }

    /// The collected rows as a record batch; the builders start over empty.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        cols.push(Arc::new(self.schema_version.finish()));
        cols.push(Arc::new(self.time.finish()));
        cols.push(Arc::new(self.observed_time.finish()));
        cols.extend(
            self.ids
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.severity_number.finish()));
        cols.extend(
            self.text
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        self.audit.finish(&mut cols);
        cols.extend(
            self.json
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.dropped.finish()));
        cols.push(self.redactions.finish());
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }
}

/// Schema of the `requests` table: one row per version of a request's summary.
pub fn requests_schema() -> SchemaRef {
    let int = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("schema_version", DataType::Int32, false),
        utf8("request_id", false),
        Field::new(
            "trace_ids",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            false,
        ),
        utf8("principal_id", true),
        Field::new("start_time", ts(), false),
        Field::new("end_time", ts(), false),
        int("duration_ns"),
        utf8("completeness", false),
        Field::new("summary_version", DataType::Int32, false),
        int("span_count"),
        int("orphan_count"),
        int("model_turns"),
        int("tool_calls"),
        counts_map_field("tool_calls_by_tool"),
        int("downstream_calls"),
        int("input_tokens"),
        int("output_tokens"),
        int("cache_read_tokens"),
        int("cache_creation_tokens"),
        Field::new("cost_usd", DataType::Float64, false),
        int("unpriced_model_turns"),
        Field::new("claimed_cost_usd", DataType::Float64, true),
        Field::new("cost_disagrees", DataType::Boolean, false),
        int("denials"),
        int("confirmations_requested"),
        int("confirmations_approved"),
        int("retries"),
        int("timeouts"),
        int("errors"),
        utf8("stop_reason", true),
        utf8("outcome", false),
    ]))
}

/// The `alarms` table: one row per alarm and resolution.
pub fn alarms_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("schema_version", DataType::Int32, false),
        Field::new("time", ts(), false),
        utf8("alarm_id", false),
        utf8("scope", false),
        utf8("scope_id", false),
        utf8("budget", false),
        utf8("level", false),
        utf8("reason", false),
        Field::new("observed", DataType::Float64, false),
        Field::new("limit_value", DataType::Float64, false),
        utf8("request_id", true),
        utf8("trace_id", true),
    ]))
}

/// Rows of the `alarms` table being collected for one record batch.
pub struct AlarmRows {
    schema: SchemaRef,
    len: usize,
    schema_version: Int32Builder,
    time: TimestampNanosecondBuilder,
    /// alarm_id, scope, scope_id, budget, level, reason.
    text: [StringBuilder; 6],
    observed: Float64Builder,
    limit_value: Float64Builder,
    request_id: StringBuilder,
    trace_id: StringBuilder,
}

impl Default for AlarmRows {
    fn default() -> Self {
        AlarmRows {
            schema: alarms_schema(),
            len: 0,
            schema_version: Int32Builder::small(),
            time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            text: Small::small(),
            observed: Float64Builder::small(),
            limit_value: Float64Builder::small(),
            request_id: StringBuilder::small(),
            trace_id: StringBuilder::small(),
        }
    }
}

impl AlarmRows {
    /// Rows collected so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no rows are collected.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds one alarm.
    pub fn append(&mut self, a: &Alarm) {
        self.schema_version.append_value(SCHEMA_VERSION);
        self.time.append_value(a.time_ns);
        let values = [
            a.alarm_id.as_str(),
            a.scope.as_str(),
            a.scope_id.as_str(),
            a.budget.as_str(),
            a.level.as_str(),
            a.reason.as_str(),
        ];
        for (b, v) in self.text.iter_mut().zip(values) {
            b.append_value(v);
        }
        self.observed.append_value(a.observed);
        self.limit_value.append_value(a.limit);
        self.request_id.append_option(a.request_id.as_deref());
        self.trace_id.append_option(a.trace_id.as_deref());
        self.len += 1;
    }

    /// Builds the record batch and resets the builders.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish()),
            Arc::new(self.time.finish()),
        ];
        for b in &mut self.text {
            columns.push(Arc::new(b.finish()));
        }
        columns.push(Arc::new(self.observed.finish()));
        columns.push(Arc::new(self.limit_value.finish()));
        columns.push(Arc::new(self.request_id.finish()));
        columns.push(Arc::new(self.trace_id.finish()));
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), columns)
    }
}

/// Rows of the `requests` table being collected for one record batch.
pub struct RequestRows {
    schema: SchemaRef,
    len: usize,
    schema_version: Int32Builder,
    request_id: StringBuilder,
    trace_ids: ListBuilder<StringBuilder>,
    principal_id: StringBuilder,
    start_time: TimestampNanosecondBuilder,
    end_time: TimestampNanosecondBuilder,
    duration_ns: Int64Builder,
    completeness: StringBuilder,
    summary_version: Int32Builder,
    /// span_count … tool_calls, in schema order.
    counts_before_tools: [Int64Builder; 4],
    tool_calls_by_tool: CountsColumn,
    /// downstream_calls … cache_creation_tokens.
    counts_after_tools: [Int64Builder; 5],
    cost_usd: Float64Builder,
    unpriced_model_turns: Int64Builder,
    claimed_cost_usd: Float64Builder,
    cost_disagrees: BooleanBuilder,
    /// denials … errors.
    decisions: [Int64Builder; 6],
    stop_reason: StringBuilder,
    outcome: StringBuilder,
}

impl Default for RequestRows {
    fn default() -> Self {
        RequestRows {
            schema: requests_schema(),
            len: 0,
            schema_version: Int32Builder::small(),
            request_id: StringBuilder::small(),
            trace_ids: ListBuilder::new(StringBuilder::small()),
            principal_id: StringBuilder::small(),
            start_time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            end_time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            duration_ns: Int64Builder::small(),
            completeness: StringBuilder::small(),
            summary_version: Int32Builder::small(),
            counts_before_tools: Small::small(),
            tool_calls_by_tool: CountsColumn::default(),
            counts_after_tools: Small::small(),
            cost_usd: Float64Builder::small(),
            unpriced_model_turns: Int64Builder::small(),
            claimed_cost_usd: Float64Builder::small(),
            cost_disagrees: BooleanBuilder::small(),
            decisions: Small::small(),
            stop_reason: StringBuilder::small(),
            outcome: StringBuilder::small(),
        }
    }
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl RequestRows {
    /// Rows collected so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no rows are collected.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds one summary.
    pub fn append(&mut self, r: &RequestSummary) -> Result<(), ArrowError> {
        self.schema_version.append_value(SCHEMA_VERSION);
        self.request_id.append_value(&r.request_id);
        for t in &r.trace_ids {
            self.trace_ids.values().append_value(t);
        }
        self.trace_ids.append(true);
        self.principal_id.append_option(r.principal_id.as_deref());
        self.start_time.append_value(r.start_ns);
        self.end_time.append_value(r.end_ns);
        self.duration_ns.append_value(r.duration_ns());
        self.completeness.append_value(r.completeness.as_str());
        self.summary_version
            .append_value(i32::try_from(r.summary_version).unwrap_or(i32::MAX));
        let [spans, orphans, turns, tools] = &mut self.counts_before_tools;
        spans.append_value(count(r.span_count));
        orphans.append_value(count(r.orphan_count));
        turns.append_value(count(r.model_turns));
        tools.append_value(count(r.tool_calls));
        self.tool_calls_by_tool.append(
            r.tool_calls_by_tool
                .iter()
                .map(|(tool, n)| (tool.as_str(), count(*n))),
        )?;
        let [downstream, input, output, cache_read, cache_creation] = &mut self.counts_after_tools;
        downstream.append_value(count(r.downstream_calls));
        input.append_value(r.input_tokens);
        output.append_value(r.output_tokens);
        cache_read.append_value(r.cache_read_tokens);
        cache_creation.append_value(r.cache_creation_tokens);
        self.cost_usd.append_value(r.cost_usd);
        self.unpriced_model_turns
            .append_value(count(r.unpriced_model_turns));
        self.claimed_cost_usd.append_option(r.claimed_cost_usd);
        self.cost_disagrees.append_value(r.cost_disagrees);
        let values = [
            r.denials,
            r.confirmations_requested,
            r.confirmations_approved,
            r.retries,
            r.timeouts,
            r.errors,
        ];
        for (b, v) in self.decisions.iter_mut().zip(values) {
            b.append_value(count(v));
        }
        self.stop_reason.append_option(r.stop_reason.as_deref());
        self.outcome.append_value(r.outcome);
        self.len += 1;
        Ok(())
    }

    /// The collected rows as a record batch; the builders start over empty.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish()),
            Arc::new(self.request_id.finish()),
            Arc::new(self.trace_ids.finish()),
            Arc::new(self.principal_id.finish()),
            Arc::new(self.start_time.finish()),
            Arc::new(self.end_time.finish()),
            Arc::new(self.duration_ns.finish()),
            Arc::new(self.completeness.finish()),
            Arc::new(self.summary_version.finish()),
        ];
        cols.extend(
            self.counts_before_tools
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(self.tool_calls_by_tool.finish());
        cols.extend(
            self.counts_after_tools
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.cost_usd.finish()));
        cols.push(Arc::new(self.unpriced_model_turns.finish()));
        cols.push(Arc::new(self.claimed_cost_usd.finish()));
        cols.push(Arc::new(self.cost_disagrees.finish()));
        cols.extend(
            self.decisions
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.stop_reason.finish()));
        cols.push(Arc::new(self.outcome.finish()));
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }
}

#[cfg(test)]
mod doc_tests {
    use super::*;

    /// Every column of every table has its row in `schemas/archive.md`, in order.
    #[test]
    fn every_column_is_documented_in_order() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/archive.md"),
        )
        .expect("schemas/archive.md");
        for (table, schema) in [
            ("spans", spans_schema()),
            ("logs", logs_schema()),
            ("requests", requests_schema()),
            ("alarms", alarms_schema()),
        ] {
            let start = doc
                .find(&format!("## `{table}`"))
                .unwrap_or_else(|| panic!("no section for {table}"));
            let section = &doc[start..];
            let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
            let section = &section[..end];
            for (i, field) in schema.fields().iter().enumerate() {
                let row = format!("| {} | `{}` |", i + 1, field.name());
                assert!(section.contains(&row), "{table}: missing {row}");
            }
        }
    }
}
