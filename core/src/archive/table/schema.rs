//! Arrow schemas of the `spans` and `logs` tables, the column builders that fill them, and
//! the builder helpers the stages owning the other tables share (`requests`: `assemble::rows`;
//! `alarms`: `budget::rows`).
//!
//! Column names are a contract with responders' saved queries: they are documented one per
//! line in `schemas/archive.md` and only ever added to. The partition columns `tenant`,
//! `date` and `hour` live in the directory names (Hive style), not inside the files.

use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, MapBuilder,
    MapFieldNames, StringBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use serde::Serialize;

use super::rows::TableRows;
use crate::event::{
    hex_id, AttrValue, Attributes, AuditFields, GenAiFields, HexId, LogRecord, Redactions,
    Resource, SpanRecord,
};

/// Written into every row's `schema_version` column (the event contract's version).
pub use crate::event::SCHEMA_VERSION;

/// Rows a fresh builder has room for. Arrow's default (1024 a column, some 300 KiB for the
/// span builders) would make every buffered partition hold that much however few its rows;
/// builders grow by doubling, so starting small costs a few reallocations on busy ones.
const INITIAL_ROWS: usize = 16;

/// Builders created with room for [`INITIAL_ROWS`].
pub trait Small {
    /// An empty builder with room for a few rows.
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

/// The time zone of every timestamp column.
pub const UTC: &str = "UTC";

/// The type of every timestamp column: ns, UTC.
pub fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into()))
}

/// A text column.
pub fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn redactions_field() -> Field {
    counts_map_field("redactions")
}

/// A `Map<Utf8, Int64>` column (rule or tool name to a count).
pub fn counts_map_field(name: &str) -> Field {
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
        utf8("sender", true),
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
        utf8("sender", true),
    ]);
    Arc::new(Schema::new(f))
}

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

/// The `resource_attributes` text of the last row's resource, kept for the next row: the
/// items of one batch share their resource (one `Arc`, through protect and the journal), so
/// its attributes are written out as JSON once a run of rows, not once a row.
#[derive(Default)]
struct ResourceJson {
    /// The resource the text is of; held, so that its address is not reused meanwhile.
    of: Option<Arc<Resource>>,
    text: String,
}

impl ResourceJson {
    /// The JSON text of `r`'s attributes.
    fn text(&mut self, r: &Arc<Resource>, scratch: &mut Vec<u8>) -> &str {
        if !self.of.as_ref().is_some_and(|last| Arc::ptr_eq(last, r)) {
            self.text.clear();
            self.text.push_str(json_text(&r.attributes, scratch));
            self.of = Some(Arc::clone(r));
        }
        &self.text
    }
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

    /// [`GenAiColumns::finish`]'s columns, copied: the builders keep their rows.
    fn finish_cloned(&self, out: &mut Vec<ArrayRef>) {
        out.extend(
            self.text1
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        out.extend(
            self.tokens
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        out.extend(
            self.text2
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
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

    /// Its text builders, in a fixed order.
    fn text_builders(&mut self) -> impl Iterator<Item = &mut StringBuilder> {
        self.text.iter_mut().chain([
            &mut self.result_code,
            &mut self.confirmation_status,
            &mut self.confirmation_digest,
            &mut self.stop_reason,
        ])
    }

    /// [`AuditColumns::finish`]'s columns, copied: the builders keep their rows.
    fn finish_cloned(&self, out: &mut Vec<ArrayRef>) {
        out.extend(
            self.text
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        out.push(Arc::new(self.retry_attempt.finish_cloned()));
        out.push(Arc::new(self.timeout_ms.finish_cloned()));
        out.push(Arc::new(self.result_code.finish_cloned()));
        out.push(Arc::new(self.result_bytes.finish_cloned()));
        out.push(Arc::new(self.confirmation_status.finish_cloned()));
        out.push(Arc::new(self.confirmation_digest.finish_cloned()));
        out.push(Arc::new(self.cancelled.finish_cloned()));
        out.push(Arc::new(self.stop_reason.finish_cloned()));
        out.push(Arc::new(self.claimed_cost_usd.finish_cloned()));
    }
}

/// The builder of a [`counts_map_field`] column: rule id or tool name to a count.
pub struct CountsColumn(MapBuilder<StringBuilder, Int64Builder>);

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
    /// Adds one row's map.
    pub fn append<'a>(
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

    /// The column so far; the builder starts over empty.
    pub fn finish(&mut self) -> ArrayRef {
        Arc::new(self.0.finish())
    }

    /// The column so far, copied: the builder keeps its rows.
    pub fn finish_cloned(&self) -> ArrayRef {
        Arc::new(self.0.finish_cloned())
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
    sender: StringBuilder,
    scratch: Vec<u8>,
    resource_json: ResourceJson,
    /// Rows and bytes each text builder held when last finished: the room the next batch's
    /// builders start with, so that a busy partition's batches do not each grow them again
    /// from [`INITIAL_ROWS`] by doubling (a copy and fresh pages each time). Taken by the
    /// first row after [`TableRows::finish`]; a partition that gets none holds no room.
    room: Vec<(usize, usize)>,
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
            sender: StringBuilder::small(),
            scratch: Vec::new(),
            resource_json: ResourceJson::default(),
            room: Vec::new(),
        }
    }
}

impl TableRows for SpanRows {
    fn len(&self) -> usize {
        self.len
    }

    /// About the memory the collected rows hold: their JSON, name and status text, and a
    /// fixed share for the other columns.
    fn approx_bytes(&self) -> usize {
        let text: usize = self
            .json
            .iter()
            .map(|b| b.values_slice().len())
            .sum::<usize>()
            + self.head[10].values_slice().len()
            + self.status_message.values_slice().len();
        text + self.len * 400
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        self.room = self
            .text_builders()
            .map(|b| (b.len(), b.values_slice().len()))
            .collect();
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
        cols.push(Arc::new(self.sender.finish()));
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    // The columns of `finish`, in its order, copied. A `&self` walk cannot share finish's
    // `&mut` one; the tests hold the two to the same batch.
    fn snapshot(&self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        cols.push(Arc::new(self.schema_version.finish_cloned()));
        cols.extend(
            self.head
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(Arc::new(self.start_time.finish_cloned()));
        cols.push(Arc::new(self.end_time.finish_cloned()));
        cols.push(Arc::new(self.duration_ns.finish_cloned()));
        cols.push(Arc::new(self.status_code.finish_cloned()));
        cols.push(Arc::new(self.status_message.finish_cloned()));
        self.gen_ai.finish_cloned(&mut cols);
        self.audit.finish_cloned(&mut cols);
        cols.extend(
            self.json
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.extend(
            self.dropped
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(self.redactions.finish_cloned());
        cols.push(Arc::new(self.sender.finish_cloned()));
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl SpanRows {
    /// Its text builders, in a fixed order (that of [`SpanRows::room`]).
    fn text_builders(&mut self) -> impl Iterator<Item = &mut StringBuilder> {
        self.head
            .iter_mut()
            .chain([&mut self.status_code, &mut self.status_message])
            .chain(self.gen_ai.text1.iter_mut())
            .chain(self.gen_ai.text2.iter_mut())
            .chain(self.audit.text_builders())
            .chain(self.json.iter_mut())
            .chain([&mut self.sender])
    }

    /// Empty text builders with the room the last batch took.
    fn make_room(&mut self) {
        let room = std::mem::take(&mut self.room);
        for (b, (rows, bytes)) in self.text_builders().zip(room) {
            *b = StringBuilder::with_capacity(rows.max(INITIAL_ROWS), bytes.max(INITIAL_ROWS * 16));
        }
    }

    /// Adds one span.
    pub fn append(&mut self, s: &SpanRecord) -> Result<(), ArrowError> {
        if self.len == 0 && !self.room.is_empty() {
            self.make_room();
        }
        self.schema_version.append_value(SCHEMA_VERSION);
        // The columns between schema_version and start_time, in schema order.
        let [trace_id, span_id, parent, trace_state, request_id, service, scope_name, scope_version, class, kind, name] =
            &mut self.head;
        trace_id.append_value(HexId::of(&s.trace_id));
        span_id.append_value(HexId::of(&s.span_id));
        parent.append_option(s.parent_span_id.map(|p| HexId::of(&p)));
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
        res_json.append_value(self.resource_json.text(&s.resource, &mut self.scratch));
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
        self.sender
            .append_option(s.sender.as_deref().map(|s| &*s.name));
        self.len += 1;
        Ok(())
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
    sender: StringBuilder,
    scratch: Vec<u8>,
    resource_json: ResourceJson,
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
            sender: StringBuilder::small(),
            scratch: Vec::new(),
            resource_json: ResourceJson::default(),
        }
    }
}

impl TableRows for LogRows {
    fn len(&self) -> usize {
        self.len
    }

    /// About the memory the collected rows hold: their text and JSON, and a fixed share for
    /// the other columns.
    fn approx_bytes(&self) -> usize {
        let text: usize = self
            .text
            .iter()
            .chain(&self.json)
            .map(|b| b.values_slice().len())
            .sum();
        text + self.len * 300
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
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
        cols.push(Arc::new(self.sender.finish()));
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    // The columns of `finish`, in its order, copied. A `&self` walk cannot share finish's
    // `&mut` one; the tests hold the two to the same batch.
    fn snapshot(&self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        cols.push(Arc::new(self.schema_version.finish_cloned()));
        cols.push(Arc::new(self.time.finish_cloned()));
        cols.push(Arc::new(self.observed_time.finish_cloned()));
        cols.extend(
            self.ids
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(Arc::new(self.severity_number.finish_cloned()));
        cols.extend(
            self.text
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        self.audit.finish_cloned(&mut cols);
        cols.extend(
            self.json
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(Arc::new(self.dropped.finish_cloned()));
        cols.push(self.redactions.finish_cloned());
        cols.push(Arc::new(self.sender.finish_cloned()));
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl LogRows {
    /// Adds one log record.
    pub fn append(&mut self, r: &LogRecord) -> Result<(), ArrowError> {
        self.schema_version.append_value(SCHEMA_VERSION);
        self.time.append_value(r.time_ns);
        self.observed_time.append_value(r.observed_time_ns);
        let [trace_id, span_id, request_id, service, scope_name, scope_version] = &mut self.ids;
        trace_id.append_option(r.trace_id.map(|t| HexId::of(&t)));
        span_id.append_option(r.span_id.map(|s| HexId::of(&s)));
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
        res_json.append_value(self.resource_json.text(&r.resource, &mut self.scratch));
        attr_json.append_value(json_text(&r.attributes, &mut self.scratch));
        self.dropped.append_value(i64::from(r.dropped_attributes));
        self.redactions.append_redactions(&r.redactions)?;
        self.sender
            .append_option(r.sender.as_deref().map(|s| &*s.name));
        self.len += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::table::rows::assert_snapshot_is_finish;
    use crate::event::{fixtures, SpanEventRecord, SpanLinkRecord};

    /// Spans that differ in every kind of column: nulls, map entries, JSON, times.
    fn varied_spans() -> [SpanRecord; 3] {
        let plain = fixtures::span();
        let mut full = fixtures::span();
        full.span_id = [3; 8];
        full.parent_span_id = Some([2; 8]);
        full.name = "chat".into();
        full.start_ns = 1_000;
        full.end_ns = 3_500;
        full.status_message = "slow".into();
        full.gen_ai.request_model = Some("gpt-4o".into());
        full.gen_ai.input_tokens = Some(1_000);
        full.gen_ai.tool_name = Some("search".into());
        full.audit.request_id = Some("req-1".into());
        full.audit.retry_attempt = Some(1);
        full.audit.cancelled = Some(false);
        full.audit.claimed_cost_usd = Some(0.25);
        full.events.push(SpanEventRecord {
            time_ns: 2_000,
            name: "retry".into(),
            attributes: Attributes::default(),
        });
        full.links.push(SpanLinkRecord {
            trace_id: [4; 16],
            span_id: [5; 8],
            trace_state: String::new(),
            attributes: Attributes::default(),
        });
        full.dropped.events = 2;
        full.redactions.insert("email".into(), 2);
        full.redactions.insert("card".into(), 1);
        [plain.clone(), full, plain]
    }

    #[test]
    fn a_span_snapshot_is_the_batch_finish_makes() {
        assert_snapshot_is_finish(|rows: &mut SpanRows| {
            for s in &varied_spans() {
                rows.append(s).expect("append");
            }
        });
    }

    /// The resource's attributes are written once a run of rows that share it, and each
    /// row's column is still its own resource's: runs of one resource, a resource seen
    /// again after another, and an equal resource in another `Arc`.
    #[test]
    fn each_row_has_its_own_resources_attributes_written_once_a_run() {
        let resource = |service: &str| {
            let mut r = Resource {
                service_name: service.into(),
                ..Resource::default()
            };
            r.attributes
                .0
                .push(("service.name".into(), AttrValue::Str(service.into())));
            Arc::new(r)
        };
        let (a, b, a_again) = (resource("orders"), resource("billing"), resource("orders"));
        let mut rows = SpanRows::default();
        let mut logs = LogRows::default();
        let order = [&a, &a, &b, &a, &a_again, &b, &b];
        for r in order {
            let mut span = fixtures::span();
            span.resource = Arc::clone(r);
            rows.append(&span).expect("append");
            let mut log = fixtures::log();
            log.resource = Arc::clone(r);
            logs.append(&log).expect("append");
        }
        let expected: Vec<String> = order
            .iter()
            .map(|r| serde_json::to_string(&r.attributes).expect("json"))
            .collect();
        for batch in [
            rows.finish().expect("finish"),
            logs.finish().expect("finish"),
        ] {
            let column = batch
                .column_by_name("resource_attributes")
                .expect("column")
                .as_any()
                .downcast_ref::<arrow::array::StringArray>()
                .expect("text");
            let got: Vec<&str> = column.iter().map(|v| v.unwrap_or_default()).collect();
            assert_eq!(got, expected);
            assert!(got[2].contains("billing") && got[4].contains("orders"));
        }
    }

    /// Builders that start a batch with the room the last one took make the batch fresh
    /// builders make, whether it is smaller than that room or outgrows it.
    #[test]
    fn builders_kept_across_batches_make_the_batches_fresh_ones_do() {
        let spans = varied_spans();
        let batch_of = |rows: &mut SpanRows, n: usize| {
            for s in spans.iter().cycle().take(n) {
                rows.append(s).expect("append");
            }
            rows.finish().expect("finish")
        };
        let mut kept = SpanRows::default();
        for n in [40, 3, 1, 100, 7] {
            let from_kept = batch_of(&mut kept, n);
            assert!(
                kept.room.len() > 40,
                "finish records each text builder's room"
            );
            assert_eq!(from_kept, batch_of(&mut SpanRows::default(), n), "{n} rows");
        }
    }

    #[test]
    fn a_log_snapshot_is_the_batch_finish_makes() {
        assert_snapshot_is_finish(|rows: &mut LogRows| {
            let plain = fixtures::log();
            let mut full = fixtures::log();
            full.time_ns = 1_000;
            full.observed_time_ns = 1_200;
            full.trace_id = Some([1; 16]);
            full.span_id = Some([2; 8]);
            full.severity_number = 17;
            full.severity_text = "ERROR".into();
            full.body = AttrValue::Str("refund failed".into());
            full.audit.policy_decision = Some("deny".into());
            full.audit.timeout_ms = Some(30_000);
            full.dropped_attributes = 1;
            full.redactions.insert("email".into(), 1);
            let mut structured = fixtures::log();
            structured.body = AttrValue::Int(7);
            for r in [&plain, &full, &structured] {
                rows.append(r).expect("append");
            }
        });
    }
}
