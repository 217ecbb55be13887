//! The normalized event model every stage speaks.
//!
//! `receive` turns OTLP spans and log records into these types; every later stage (protect,
//! journal, archive, export, assemble, budgets) reads them and nothing else. The GenAI
//! semantic-convention fields and the `executor.*` audit fields are typed; attributes that
//! map onto no field are kept verbatim in `attributes`, so nothing the sender said is lost.

use std::sync::{Arc, OnceLock};

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::maps::FastMap;

/// Version of the archive row layout written by this build.
pub const SCHEMA_VERSION: i32 = 1;

/// Tenant used when neither the sender nor the event names one.
pub const DEFAULT_TENANT: &str = "default";

/// A 16-byte trace id.
pub type TraceId = [u8; 16];
/// An 8-byte span id.
pub type SpanId = [u8; 8];

/// An attribute value, as rich as OTLP's `AnyValue`.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A UTF-8 string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A signed 64-bit integer.
    Int(i64),
    /// A double.
    Double(f64),
    /// Raw bytes.
    Bytes(Vec<u8>),
    /// An ordered list.
    Array(Vec<AttrValue>),
    /// An ordered list of key-value pairs.
    Map(Attributes),
    /// An `AnyValue` with nothing set.
    Empty,
}

impl AttrValue {
    /// Bytes of text and raw bytes in the value, at any depth (keys of maps included).
    pub fn text_bytes(&self) -> usize {
        match self {
            AttrValue::Str(s) => s.len(),
            AttrValue::Bytes(b) => b.len(),
            AttrValue::Array(items) => items.iter().map(AttrValue::text_bytes).sum(),
            AttrValue::Map(m) => m.text_bytes(),
            _ => 0,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Ordered key-value pairs (attributes keep the order the sender used).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attributes(pub Vec<(String, AttrValue)>);

impl Attributes {
    /// The value under `key`, the first if the sender repeated it.
    pub fn get(&self, key: &str) -> Option<&AttrValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// True when there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Bytes of text in the keys and values, at any depth.
    pub fn text_bytes(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.text_bytes()).sum()
    }
}

impl Serialize for AttrValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return AttrValueBin::from(self).serialize(s);
        }
        match self {
            AttrValue::Str(v) => s.serialize_str(v),
            AttrValue::Bool(v) => s.serialize_bool(*v),
            AttrValue::Int(v) => s.serialize_i64(*v),
            AttrValue::Double(v) if v.is_finite() => s.serialize_f64(*v),
            // JSON has no NaN or infinity; keep them readable rather than turning them into null.
            AttrValue::Double(v) => s.serialize_str(&v.to_string()),
            AttrValue::Bytes(b) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("bytes_hex", &hex::encode(b))?;
                m.end()
            }
            AttrValue::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            AttrValue::Map(attrs) => attrs.serialize(s),
            AttrValue::Empty => s.serialize_unit(),
        }
    }
}

impl Serialize for Attributes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            // A list of pairs: the order and any repeated key survive.
            return self.0.serialize(s);
        }
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// The lossless binary form of [`AttrValue`], for serializers that are not human readable
/// (the journal codec): every variant tagged, doubles and bytes as they are. The JSON form
/// above is for people and the archive's JSON columns, and cannot be read back exactly.
#[derive(Serialize)]
enum AttrValueBin<'a> {
    Str(&'a str),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(&'a [u8]),
    Array(&'a [AttrValue]),
    Map(&'a Attributes),
    Empty,
}

impl<'a> From<&'a AttrValue> for AttrValueBin<'a> {
    fn from(v: &'a AttrValue) -> Self {
        match v {
            AttrValue::Str(v) => AttrValueBin::Str(v),
            AttrValue::Bool(v) => AttrValueBin::Bool(*v),
            AttrValue::Int(v) => AttrValueBin::Int(*v),
            AttrValue::Double(v) => AttrValueBin::Double(*v),
            AttrValue::Bytes(v) => AttrValueBin::Bytes(v),
            AttrValue::Array(v) => AttrValueBin::Array(v),
            AttrValue::Map(v) => AttrValueBin::Map(v),
            AttrValue::Empty => AttrValueBin::Empty,
        }
    }
}

/// The owned twin of [`AttrValueBin`]: same variants in the same order.
#[derive(Deserialize)]
enum AttrValueOwned {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    Bytes(Vec<u8>),
    Array(Vec<AttrValue>),
    Map(Attributes),
    Empty,
}

/// Deepest nesting of arrays and maps the binary form reads back. OTLP decoding stops at 100
/// levels, so real values never come near; damaged input must not overflow the stack.
const MAX_BINARY_DEPTH: u32 = 256;

thread_local! {
    static BINARY_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Reads the binary form only (see [`AttrValueBin`]); the JSON form is write-only.
impl<'de> Deserialize<'de> for AttrValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // serde gives a Deserialize impl no state, so the nesting depth is counted per thread;
        // the guard restores it on every exit, errors included.
        struct Guard;
        impl Drop for Guard {
            fn drop(&mut self) {
                BINARY_DEPTH.with(|c| c.set(c.get().saturating_sub(1)));
            }
        }
        let depth = BINARY_DEPTH.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        let _guard = Guard;
        if depth > MAX_BINARY_DEPTH {
            return Err(serde::de::Error::custom(format!(
                "attribute value nested deeper than {MAX_BINARY_DEPTH} levels"
            )));
        }
        Ok(match AttrValueOwned::deserialize(d)? {
            AttrValueOwned::Str(v) => AttrValue::Str(v),
            AttrValueOwned::Bool(v) => AttrValue::Bool(v),
            AttrValueOwned::Int(v) => AttrValue::Int(v),
            AttrValueOwned::Double(v) => AttrValue::Double(v),
            AttrValueOwned::Bytes(v) => AttrValue::Bytes(v),
            AttrValueOwned::Array(v) => AttrValue::Array(v),
            AttrValueOwned::Map(v) => AttrValue::Map(v),
            AttrValueOwned::Empty => AttrValue::Empty,
        })
    }
}

/// Reads the binary form only: a list of pairs.
impl<'de> Deserialize<'de> for Attributes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<(String, AttrValue)>::deserialize(d).map(Attributes)
    }
}

/// A typed field that attributes map onto.
///
/// The variants' order is part of the journal's binary form (`journal::codec`):
/// add new ones at the end, or raise the codec's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Field {
    Operation,
    Provider,
    RequestModel,
    ResponseModel,
    ResponseId,
    FinishReasons,
    InputTokens,
    OutputTokens,
    CacheReadInputTokens,
    CacheCreationInputTokens,
    ConversationId,
    AgentId,
    AgentName,
    ToolName,
    ToolCallId,
    ToolType,
    ToolArguments,
    ToolResult,
    McpMethod,
    McpSessionId,
    RequestId,
    ClaimedTenant,
    PrincipalId,
    ResourceId,
    ResourceVersion,
    ToolVersion,
    ToolSchemaVersion,
    PromptVersion,
    EffectClass,
    PolicyDecision,
    PolicyReason,
    IdempotencyKey,
    RetryAttempt,
    TimeoutMs,
    ResultCode,
    ResultBytes,
    ConfirmationStatus,
    ConfirmationDigest,
    Cancelled,
    StopReason,
    ClaimedCostUsd,
}

impl Field {
    /// True for the `executor.*` fields, which log records carry too.
    pub fn is_audit(self) -> bool {
        matches!(
            self,
            Field::RequestId
                | Field::ClaimedTenant
                | Field::PrincipalId
                | Field::ResourceId
                | Field::ResourceVersion
                | Field::ToolVersion
                | Field::ToolSchemaVersion
                | Field::PromptVersion
                | Field::EffectClass
                | Field::PolicyDecision
                | Field::PolicyReason
                | Field::IdempotencyKey
                | Field::RetryAttempt
                | Field::TimeoutMs
                | Field::ResultCode
                | Field::ResultBytes
                | Field::ConfirmationStatus
                | Field::ConfirmationDigest
                | Field::Cancelled
                | Field::StopReason
                | Field::ClaimedCostUsd
        )
    }

    /// The canonical attribute name: the GenAI semantic conventions' current one, or the
    /// `executor.*` one.
    pub fn key(self) -> &'static str {
        match self {
            Field::Operation => "gen_ai.operation.name",
            Field::Provider => "gen_ai.provider.name",
            Field::RequestModel => "gen_ai.request.model",
            Field::ResponseModel => "gen_ai.response.model",
            Field::ResponseId => "gen_ai.response.id",
            Field::FinishReasons => "gen_ai.response.finish_reasons",
            Field::InputTokens => "gen_ai.usage.input_tokens",
            Field::OutputTokens => "gen_ai.usage.output_tokens",
            Field::CacheReadInputTokens => "gen_ai.usage.cache_read.input_tokens",
            Field::CacheCreationInputTokens => "gen_ai.usage.cache_creation.input_tokens",
            Field::ConversationId => "gen_ai.conversation.id",
            Field::AgentId => "gen_ai.agent.id",
            Field::AgentName => "gen_ai.agent.name",
            Field::ToolName => "gen_ai.tool.name",
            Field::ToolCallId => "gen_ai.tool.call.id",
            Field::ToolType => "gen_ai.tool.type",
            Field::ToolArguments => "gen_ai.tool.call.arguments",
            Field::ToolResult => "gen_ai.tool.call.result",
            Field::McpMethod => "mcp.method.name",
            Field::McpSessionId => "mcp.session.id",
            Field::RequestId => "executor.request_id",
            Field::ClaimedTenant => "executor.tenant_id",
            Field::PrincipalId => "executor.principal_id",
            Field::ResourceId => "executor.resource_id",
            Field::ResourceVersion => "executor.resource_version",
            Field::ToolVersion => "executor.tool_version",
            Field::ToolSchemaVersion => "executor.tool_schema_version",
            Field::PromptVersion => "executor.prompt_version",
            Field::EffectClass => "executor.effect_class",
            Field::PolicyDecision => "executor.policy_decision",
            Field::PolicyReason => "executor.policy_reason",
            Field::IdempotencyKey => "executor.idempotency_key",
            Field::RetryAttempt => "executor.retry_attempt",
            Field::TimeoutMs => "executor.timeout_ms",
            Field::ResultCode => "executor.result_code",
            Field::ResultBytes => "executor.result_bytes",
            Field::ConfirmationStatus => "executor.confirmation_status",
            Field::ConfirmationDigest => "executor.confirmation_digest",
            Field::Cancelled => "executor.cancelled",
            Field::StopReason => "executor.stop_reason",
            Field::ClaimedCostUsd => "executor.claimed_cost_usd",
        }
    }
}

/// Every attribute name that lands in a typed field: (source name, field, rank).
/// Lower rank wins when a span carries several names for one fact.
pub const FIELD_SOURCES: &[(&str, Field, u8)] = &[
    ("gen_ai.operation.name", Field::Operation, 0),
    ("gen_ai.provider.name", Field::Provider, 0),
    ("gen_ai.system", Field::Provider, 1),
    ("llm.provider", Field::Provider, 2),
    ("llm.system", Field::Provider, 3),
    ("gen_ai.request.model", Field::RequestModel, 0),
    ("llm.model_name", Field::RequestModel, 1),
    ("gen_ai.response.model", Field::ResponseModel, 0),
    ("gen_ai.response.id", Field::ResponseId, 0),
    ("gen_ai.response.finish_reasons", Field::FinishReasons, 0),
    ("llm.finish_reason", Field::FinishReasons, 1),
    ("gen_ai.usage.input_tokens", Field::InputTokens, 0),
    ("gen_ai.usage.prompt_tokens", Field::InputTokens, 1),
    ("llm.token_count.prompt", Field::InputTokens, 2),
    ("gen_ai.usage.output_tokens", Field::OutputTokens, 0),
    ("gen_ai.usage.completion_tokens", Field::OutputTokens, 1),
    ("llm.token_count.completion", Field::OutputTokens, 2),
    (
        "gen_ai.usage.cache_read.input_tokens",
        Field::CacheReadInputTokens,
        0,
    ),
    (
        "gen_ai.usage.cache_read_input_tokens",
        Field::CacheReadInputTokens,
        1,
    ),
    (
        "llm.token_count.prompt_details.cache_read",
        Field::CacheReadInputTokens,
        2,
    ),
    (
        "gen_ai.usage.cache_creation.input_tokens",
        Field::CacheCreationInputTokens,
        0,
    ),
    (
        "gen_ai.usage.cache_write.input_tokens",
        Field::CacheCreationInputTokens,
        1,
    ),
    (
        "gen_ai.usage.cache_creation_input_tokens",
        Field::CacheCreationInputTokens,
        2,
    ),
    (
        "llm.token_count.prompt_details.cache_write",
        Field::CacheCreationInputTokens,
        3,
    ),
    ("gen_ai.conversation.id", Field::ConversationId, 0),
    ("session.id", Field::ConversationId, 1),
    ("gen_ai.agent.id", Field::AgentId, 0),
    ("gen_ai.agent.name", Field::AgentName, 0),
    ("agent.name", Field::AgentName, 1),
    ("gen_ai.tool.name", Field::ToolName, 0),
    ("tool.name", Field::ToolName, 1),
    ("gen_ai.tool.call.id", Field::ToolCallId, 0),
    ("tool_call.id", Field::ToolCallId, 1),
    ("gen_ai.tool.type", Field::ToolType, 0),
    ("gen_ai.tool.call.arguments", Field::ToolArguments, 0),
    ("gen_ai.tool.call.result", Field::ToolResult, 0),
    ("mcp.method.name", Field::McpMethod, 0),
    ("mcp.session.id", Field::McpSessionId, 0),
    ("executor.request_id", Field::RequestId, 0),
    ("executor.tenant_id", Field::ClaimedTenant, 0),
    ("executor.principal_id", Field::PrincipalId, 0),
    ("executor.resource_id", Field::ResourceId, 0),
    ("executor.resource_version", Field::ResourceVersion, 0),
    ("executor.tool_version", Field::ToolVersion, 0),
    ("executor.tool_schema_version", Field::ToolSchemaVersion, 0),
    ("executor.prompt_version", Field::PromptVersion, 0),
    ("executor.effect_class", Field::EffectClass, 0),
    ("executor.policy_decision", Field::PolicyDecision, 0),
    ("executor.policy_reason", Field::PolicyReason, 0),
    ("executor.idempotency_key", Field::IdempotencyKey, 0),
    ("executor.retry_attempt", Field::RetryAttempt, 0),
    ("executor.timeout_ms", Field::TimeoutMs, 0),
    ("executor.result_code", Field::ResultCode, 0),
    ("executor.result_bytes", Field::ResultBytes, 0),
    ("executor.confirmation_status", Field::ConfirmationStatus, 0),
    ("executor.confirmation_digest", Field::ConfirmationDigest, 0),
    ("executor.cancelled", Field::Cancelled, 0),
    ("executor.stop_reason", Field::StopReason, 0),
    ("executor.claimed_cost_usd", Field::ClaimedCostUsd, 0),
];

/// Names read only on tool spans, into fields still empty, in this order: OpenInference's
/// input and output, and OpenLLMetry's (`traceloop.*`) entity name, input and output. On other
/// spans the same names hold prompts, completions and workflow names, which stay attributes.
pub const TOOL_SPAN_SOURCES: [(&str, Field); 5] = [
    ("input.value", Field::ToolArguments),
    ("output.value", Field::ToolResult),
    ("traceloop.entity.name", Field::ToolName),
    ("traceloop.entity.input", Field::ToolArguments),
    ("traceloop.entity.output", Field::ToolResult),
];

/// Pydantic Logfire's spans of the OpenAI Agents SDK name no GenAI operation, agent or tool;
/// their message template (`logfire.msg_template`, fixed per span type) says what they are,
/// and plain attributes hold the names. Each entry: the template, the operation it implies,
/// and the attributes read into fields still empty (on spans with that template only).
pub const LOGFIRE_TEMPLATES: [(&str, &str, NamedSources); 3] = [
    (
        "Function: {name}",
        "execute_tool",
        &[
            ("name", Field::ToolName),
            ("input", Field::ToolArguments),
            ("output", Field::ToolResult),
        ],
    ),
    (
        "Agent run: {name!r}",
        "invoke_agent",
        &[("name", Field::AgentName)],
    ),
    ("OpenAI Agents trace: {name}", "invoke_workflow", &[]),
];

/// Attribute names and the fields they are read into.
pub type NamedSources = &'static [(&'static str, Field)];

/// The attribute holding a Logfire span's message template.
pub const LOGFIRE_TEMPLATE_KEY: &str = "logfire.msg_template";

/// The [`LOGFIRE_TEMPLATES`] entry of a span's template.
pub fn logfire_template(
    template: &str,
) -> Option<(&'static str, &'static [(&'static str, Field)])> {
    LOGFIRE_TEMPLATES
        .iter()
        .find(|(t, _, _)| *t == template)
        .map(|(_, op, sources)| (*op, *sources))
}

/// [`FIELD_SOURCES`] by name: each name's field and rank.
pub fn field_index() -> &'static FastMap<&'static str, (Field, u8)> {
    static INDEX: OnceLock<FastMap<&'static str, (Field, u8)>> = OnceLock::new();
    INDEX.get_or_init(|| {
        FIELD_SOURCES
            .iter()
            .map(|(name, field, rank)| (*name, (*field, *rank)))
            .collect()
    })
}

/// The name as a `'static` string, if it is one the normalizer reads into a typed field
/// (so that a record's [`SourceKeys`] can be read back from the journal).
pub fn source_key(name: &str) -> Option<&'static str> {
    field_index()
        .get_key_value(name)
        .map(|(k, _)| *k)
        .or_else(|| {
            TOOL_SPAN_SOURCES
                .iter()
                .map(|(k, _)| *k)
                .find(|k| *k == name)
        })
        .or_else(|| {
            LOGFIRE_TEMPLATES
                .iter()
                .flat_map(|(_, _, sources)| sources.iter().map(|(k, _)| *k))
                .find(|k| *k == name)
        })
}

/// Where a typed field's value came from, when not from the item's attribute under the
/// field's canonical name ([`Field::key`]).
///
/// Only names, never values: protect redacts the typed fields, and a second copy of a value
/// kept here would escape it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Another attribute name of the item: an older GenAI name or the OpenInference dialect.
    Key(&'static str),
    /// The resource's attribute under the canonical name, copied onto every item under it.
    Resource,
    /// Inferred from another attribute that is still there (the operation from
    /// `openinference.span.kind` or `traceloop.span.kind`).
    Inferred,
    /// The request's `x-toolwatch-tenant` header (only for the claimed tenant), for items
    /// that named none themselves.
    Header,
}

/// The typed fields of one item that did not come from their canonical attribute, so that
/// the export stage can send each one back under the name the sender used. Empty (and
/// allocation-free) when the sender used the canonical names throughout; in [`Field`] order
/// otherwise, so that equal records compare equal whatever order their attributes came in.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SourceKeys(pub Vec<(Field, Source)>);

impl SourceKeys {
    /// Where `field` came from: `None` when from its canonical attribute on the item.
    pub fn get(&self, field: Field) -> Option<Source> {
        self.0.iter().find(|(f, _)| *f == field).map(|(_, s)| *s)
    }

    /// The attribute name `field` goes back under on the item, or `None` when it does not
    /// belong on the item (it came from the resource, or was inferred).
    pub fn key(&self, field: Field) -> Option<&'static str> {
        match self.get(field) {
            None => Some(field.key()),
            Some(Source::Key(k)) => Some(k),
            Some(Source::Resource | Source::Inferred | Source::Header) => None,
        }
    }
}

/// The binary form of [`Source`]; a key travels as its name, so the journal does not depend
/// on the order of the normalizer's name table.
#[derive(Serialize)]
enum SourceWire<'a> {
    Key(&'a str),
    Resource,
    Inferred,
    Header,
}

impl Serialize for Source {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Source::Key(k) => SourceWire::Key(k),
            Source::Resource => SourceWire::Resource,
            Source::Inferred => SourceWire::Inferred,
            Source::Header => SourceWire::Header,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Source {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Owned, so that formats which cannot lend their input (readers) work too.
        #[derive(Deserialize)]
        enum Owned {
            Key(String),
            Resource,
            Inferred,
            Header,
        }
        Ok(match Owned::deserialize(d)? {
            Owned::Key(k) => Source::Key(source_key(&k).ok_or_else(|| {
                serde::de::Error::custom(format!("`{k}` is no attribute name the normalizer reads"))
            })?),
            Owned::Resource => Source::Resource,
            Owned::Inferred => Source::Inferred,
            Owned::Header => Source::Header,
        })
    }
}

/// What produced a batch of telemetry: the OTLP resource.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Resource {
    /// `service.name`, or `unknown_service` when absent.
    pub service_name: String,
    /// All resource attributes, `service.name` included.
    pub attributes: Attributes,
}

/// The instrumentation scope of a span or log record.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Scope {
    /// Scope name.
    pub name: String,
    /// Scope version.
    pub version: String,
    /// Scope attributes.
    pub attributes: Attributes,
}

/// What a span is, for auditing: from `gen_ai.operation.name`, the dialects, and span kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SpanClass {
    /// A call to a model.
    Model,
    /// The execution of a tool.
    Tool,
    /// An agent invocation or creation.
    Agent,
    /// A client call to something downstream (HTTP, database, RPC, messaging).
    Downstream,
    /// Anything else.
    Other,
}

impl SpanClass {
    /// The archive's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanClass::Model => "model",
            SpanClass::Tool => "tool",
            SpanClass::Agent => "agent",
            SpanClass::Downstream => "downstream",
            SpanClass::Other => "other",
        }
    }
}

/// OTLP span kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpanKind {
    /// Not given.
    Unspecified,
    /// Internal operation.
    Internal,
    /// Server side of a call.
    Server,
    /// Client side of a call.
    Client,
    /// Message producer.
    Producer,
    /// Message consumer.
    Consumer,
}

impl SpanKind {
    /// From the OTLP enum value; unknown values are `Unspecified`.
    pub fn from_otlp(v: i32) -> SpanKind {
        match v {
            1 => SpanKind::Internal,
            2 => SpanKind::Server,
            3 => SpanKind::Client,
            4 => SpanKind::Producer,
            5 => SpanKind::Consumer,
            _ => SpanKind::Unspecified,
        }
    }

    /// The archive's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanKind::Unspecified => "unspecified",
            SpanKind::Internal => "internal",
            SpanKind::Server => "server",
            SpanKind::Client => "client",
            SpanKind::Producer => "producer",
            SpanKind::Consumer => "consumer",
        }
    }
}

/// OTLP status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StatusCode {
    /// Not set.
    Unset,
    /// Explicitly OK.
    Ok,
    /// An error.
    Error,
}

impl StatusCode {
    /// From the OTLP enum value; unknown values are `Unset`.
    pub fn from_otlp(v: i32) -> StatusCode {
        match v {
            1 => StatusCode::Ok,
            2 => StatusCode::Error,
            _ => StatusCode::Unset,
        }
    }

    /// The archive's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusCode::Unset => "unset",
            StatusCode::Ok => "ok",
            StatusCode::Error => "error",
        }
    }
}

/// Fields of the OpenTelemetry GenAI (and MCP) semantic conventions.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GenAiFields {
    /// `gen_ai.operation.name`: chat, text_completion, generate_content, embeddings,
    /// execute_tool, invoke_agent, create_agent.
    pub operation: Option<String>,
    /// `gen_ai.provider.name` (older: `gen_ai.system`).
    pub provider: Option<String>,
    /// `gen_ai.request.model`.
    pub request_model: Option<String>,
    /// `gen_ai.response.model`.
    pub response_model: Option<String>,
    /// `gen_ai.response.id`.
    pub response_id: Option<String>,
    /// `gen_ai.response.finish_reasons`, comma-joined.
    pub finish_reasons: Option<String>,
    /// `gen_ai.usage.input_tokens` (older: `prompt_tokens`).
    pub input_tokens: Option<i64>,
    /// `gen_ai.usage.output_tokens` (older: `completion_tokens`).
    pub output_tokens: Option<i64>,
    /// `gen_ai.usage.cache_read.input_tokens`.
    pub cache_read_input_tokens: Option<i64>,
    /// `gen_ai.usage.cache_creation.input_tokens` (also `cache_write`).
    pub cache_creation_input_tokens: Option<i64>,
    /// `gen_ai.conversation.id`.
    pub conversation_id: Option<String>,
    /// `gen_ai.agent.id`.
    pub agent_id: Option<String>,
    /// `gen_ai.agent.name`.
    pub agent_name: Option<String>,
    /// `gen_ai.tool.name`.
    pub tool_name: Option<String>,
    /// `gen_ai.tool.call.id`.
    pub tool_call_id: Option<String>,
    /// `gen_ai.tool.type`.
    pub tool_type: Option<String>,
    /// `gen_ai.tool.call.arguments`, as JSON text whether it came structured or as a string.
    pub tool_arguments: Option<String>,
    /// `gen_ai.tool.call.result`, as JSON text (or the plain string sent).
    pub tool_result: Option<String>,
    /// `mcp.method.name`.
    pub mcp_method: Option<String>,
    /// `mcp.session.id`.
    pub mcp_session_id: Option<String>,
}

/// The summed lengths of optional texts.
fn texts_len(texts: &[&Option<String>]) -> usize {
    texts.iter().map(|t| t.as_deref().map_or(0, str::len)).sum()
}

impl GenAiFields {
    /// Bytes of text in the fields (tool arguments and results above all).
    pub fn text_bytes(&self) -> usize {
        texts_len(&[
            &self.operation,
            &self.provider,
            &self.request_model,
            &self.response_model,
            &self.response_id,
            &self.finish_reasons,
            &self.conversation_id,
            &self.agent_id,
            &self.agent_name,
            &self.tool_name,
            &self.tool_call_id,
            &self.tool_type,
            &self.tool_arguments,
            &self.tool_result,
            &self.mcp_method,
            &self.mcp_session_id,
        ])
    }
}

/// The `executor.*` audit fields that the conventions do not cover.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AuditFields {
    /// `executor.request_id`: the user request this work belongs to.
    pub request_id: Option<String>,
    /// `executor.tenant_id` as the event claims it (the trusted tenant is on the record).
    pub claimed_tenant: Option<String>,
    /// `executor.principal_id`.
    pub principal_id: Option<String>,
    /// `executor.resource_id`.
    pub resource_id: Option<String>,
    /// `executor.resource_version`.
    pub resource_version: Option<String>,
    /// `executor.tool_version`.
    pub tool_version: Option<String>,
    /// `executor.tool_schema_version`.
    pub tool_schema_version: Option<String>,
    /// `executor.prompt_version`.
    pub prompt_version: Option<String>,
    /// `executor.effect_class`: read, write, high_impact.
    pub effect_class: Option<String>,
    /// `executor.policy_decision`: allow, deny, require_confirmation.
    pub policy_decision: Option<String>,
    /// `executor.policy_reason`: the policy's reason code.
    pub policy_reason: Option<String>,
    /// `executor.idempotency_key` as received; `protect` replaces it with the hash below
    /// before the event goes anywhere.
    pub idempotency_key: Option<String>,
    /// Keyed HMAC of the idempotency key (`hmac:<key-id>:<hex>`), set by `protect`.
    pub idempotency_key_hash: Option<String>,
    /// `executor.retry_attempt`.
    pub retry_attempt: Option<i64>,
    /// `executor.timeout_ms`.
    pub timeout_ms: Option<i64>,
    /// `executor.result_code`: ok, denied, invalid, duplicate, error, timeout, cancelled.
    pub result_code: Option<String>,
    /// `executor.result_bytes`.
    pub result_bytes: Option<i64>,
    /// `executor.confirmation_status`.
    pub confirmation_status: Option<String>,
    /// `executor.confirmation_digest`.
    pub confirmation_digest: Option<String>,
    /// `executor.cancelled`.
    pub cancelled: Option<bool>,
    /// `executor.stop_reason`: completed, budget_exhausted, repeated_call,
    /// approval_required, cancelled, error.
    pub stop_reason: Option<String>,
    /// `executor.claimed_cost_usd`: the cost the executor claims.
    pub claimed_cost_usd: Option<f64>,
}

impl AuditFields {
    /// Bytes of text in the fields.
    pub fn text_bytes(&self) -> usize {
        texts_len(&[
            &self.request_id,
            &self.claimed_tenant,
            &self.principal_id,
            &self.resource_id,
            &self.resource_version,
            &self.tool_version,
            &self.tool_schema_version,
            &self.prompt_version,
            &self.effect_class,
            &self.policy_decision,
            &self.policy_reason,
            &self.idempotency_key,
            &self.idempotency_key_hash,
            &self.result_code,
            &self.confirmation_status,
            &self.confirmation_digest,
            &self.stop_reason,
        ])
    }
}

/// A span event (a moment inside a span).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanEventRecord {
    /// Time, ns since the Unix epoch.
    pub time_ns: i64,
    /// Event name.
    pub name: String,
    /// Event attributes, verbatim.
    pub attributes: Attributes,
}

/// A link from a span to another span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanLinkRecord {
    /// Linked trace.
    pub trace_id: TraceId,
    /// Linked span.
    pub span_id: SpanId,
    /// W3C trace state of the link.
    pub trace_state: String,
    /// Link attributes, verbatim.
    pub attributes: Attributes,
}

/// One normalized span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanRecord {
    /// The tenant the span is filed under.
    pub tenant: String,
    /// The producing resource, shared by the spans of one batch.
    ///
    /// Not in the serde form: the journal codec writes each distinct resource and scope once
    /// per batch and gives each item an index, so the sharing survives a round trip.
    #[serde(skip)]
    pub resource: Arc<Resource>,
    /// The instrumentation scope (not in the serde form either, see `resource`).
    #[serde(skip)]
    pub scope: Arc<Scope>,
    /// Trace id.
    pub trace_id: TraceId,
    /// Span id.
    pub span_id: SpanId,
    /// Parent span id, if any.
    pub parent_span_id: Option<SpanId>,
    /// W3C trace state.
    pub trace_state: String,
    /// Span name.
    pub name: String,
    /// Span kind.
    pub kind: SpanKind,
    /// Audit class.
    pub class: SpanClass,
    /// Start, ns since the Unix epoch.
    pub start_ns: i64,
    /// End, ns since the Unix epoch.
    pub end_ns: i64,
    /// Status code.
    pub status_code: StatusCode,
    /// Status message.
    pub status_message: String,
    /// GenAI convention fields.
    pub gen_ai: GenAiFields,
    /// `executor.*` audit fields.
    pub audit: AuditFields,
    /// Attributes that map onto no typed field, verbatim.
    pub attributes: Attributes,
    /// Span events.
    pub events: Vec<SpanEventRecord>,
    /// Links.
    pub links: Vec<SpanLinkRecord>,
    /// Attributes, events and links the sender dropped before sending.
    pub dropped: DroppedCounts,
    /// Which redaction rules fired on this span and how often (never what they removed).
    pub redactions: Redactions,
    /// Which attribute each typed field was read from, where that was not its canonical name.
    pub source_keys: SourceKeys,
    /// The authenticated sender (not in the serde form: the journal codec writes it once per
    /// batch, since one request has one sender).
    #[serde(skip)]
    pub sender: Option<Arc<Sender>>,
    /// The item named a tenant its sender may not write and is filed under the sender's own
    /// (its claim kept in `audit.claimed_tenant`).
    #[serde(skip)]
    pub tenant_mismatch: bool,
    /// It names no tenant, its trace's tenant was not known at the intake, and its sender's
    /// items may be waiting for one: the consumers may hold it until its trace names one
    /// (see [`crate::tenancy`]). Set by the intake, journalled with the item.
    #[serde(skip)]
    pub tenant_pending: bool,
    /// The digest of its tool call, once a consumer asked (see [`SpanRecord::call_digest`]).
    #[serde(skip)]
    pub call_digest: CallDigestMemo,
}

/// A tool call's digest, computed by the first consumer that needs it and then shared: the
/// consumers read the same published batch, so the arguments are parsed once. Not part of a
/// record's value: two records compare equal whatever their memos hold.
#[derive(Debug, Clone, Default)]
pub struct CallDigestMemo(std::sync::OnceLock<crate::budget::digest::CallDigest>);

impl PartialEq for CallDigestMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Which side of an MCP `tools/call` a tool span records: the client that sent the request or
/// the server that ran it. Both sides traced (each process exporting its own spans, the trace
/// carried in the request's `params._meta`) is still one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum McpSide {
    /// The client's span (kind `CLIENT`).
    Client,
    /// The server's span (kind `SERVER`), a child of the client's when both are traced.
    Server,
}

/// The identity of one MCP `tools/call` as either side records it: the client's span id (for
/// the server's span, its parent) and the JSON-RPC request id (`jsonrpc.request.id`), which
/// both sides carry. Two tool spans with equal keys are the two sides of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct McpCallKey {
    /// The trace both sides share.
    pub trace_id: TraceId,
    /// The client's span id.
    pub client_span: SpanId,
    /// The JSON-RPC request id, hashed (ids are strings or integers on the wire; both sides
    /// send the same form).
    pub request_id: u64,
}

/// A JSON-RPC request id's hash, the same in every process and for `"3"` and `3`.
fn request_id_hash(id: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0).hash_one(id)
}

impl SpanRecord {
    /// Bytes of text the span carries (names, fields, attributes, events, links): what
    /// protect reads and about what it holds in memory beyond its fixed size.
    pub fn text_bytes(&self) -> usize {
        self.name.len()
            + self.status_message.len()
            + self.trace_state.len()
            + self.gen_ai.text_bytes()
            + self.audit.text_bytes()
            + self.attributes.text_bytes()
            + self
                .events
                .iter()
                .map(|e| e.name.len() + e.attributes.text_bytes())
                .sum::<usize>()
            + self
                .links
                .iter()
                .map(|l| l.trace_state.len() + l.attributes.text_bytes())
                .sum::<usize>()
    }

    /// The side and identity of the MCP `tools/call` this tool span records, if it records one
    /// whose other side can be traced too: a `CLIENT` or `SERVER` span with `mcp.method.name =
    /// tools/call` and a `jsonrpc.request.id` (a server span also needs its parent, the
    /// client's span). `None` for anything else, which then counts as a call of its own.
    pub fn mcp_call(&self) -> Option<(McpSide, McpCallKey)> {
        if self.class != SpanClass::Tool || self.gen_ai.mcp_method.as_deref() != Some("tools/call")
        {
            return None;
        }
        let (side, client_span) = match self.kind {
            SpanKind::Client => (McpSide::Client, self.span_id),
            SpanKind::Server => (McpSide::Server, self.parent_span_id?),
            _ => return None,
        };
        let request_id = match self.attributes.get("jsonrpc.request.id")? {
            AttrValue::Str(s) => request_id_hash(s),
            AttrValue::Int(i) => request_id_hash(&i.to_string()),
            _ => return None,
        };
        let key = McpCallKey {
            trace_id: self.trace_id,
            client_span,
            request_id,
        };
        Some((side, key))
    }

    /// The digest of the tool name (`unknown` when absent) and canonical arguments
    /// (`budget::digest::call_digest`), computed once per record.
    pub fn call_digest(&self) -> crate::budget::digest::CallDigest {
        *self.call_digest.0.get_or_init(|| {
            crate::budget::digest::call_digest(
                self.gen_ai.tool_name.as_deref().unwrap_or("unknown"),
                self.gen_ai.tool_arguments.as_deref().unwrap_or(""),
            )
        })
    }
}

/// Counts of things the sender dropped, kept for completeness audits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DroppedCounts {
    /// Dropped attributes.
    pub attributes: u32,
    /// Dropped events.
    pub events: u32,
    /// Dropped links.
    pub links: u32,
}

/// One normalized log record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRecord {
    /// The tenant the record is filed under.
    pub tenant: String,
    /// The producing resource.
    ///
    /// Not in the serde form: the journal codec writes each distinct resource and scope once
    /// per batch and gives each item an index, so the sharing survives a round trip.
    #[serde(skip)]
    pub resource: Arc<Resource>,
    /// The instrumentation scope (not in the serde form either, see `resource`).
    #[serde(skip)]
    pub scope: Arc<Scope>,
    /// When the event happened, ns since the Unix epoch (observed time if not given).
    pub time_ns: i64,
    /// When it was observed, ns since the Unix epoch.
    pub observed_time_ns: i64,
    /// Trace context, if any.
    pub trace_id: Option<TraceId>,
    /// Span context, if any.
    pub span_id: Option<SpanId>,
    /// OTLP severity number (0 = unspecified).
    pub severity_number: i32,
    /// Severity text.
    pub severity_text: String,
    /// `event_name` of the record.
    pub event_name: String,
    /// The body.
    pub body: AttrValue,
    /// `executor.*` audit fields found on the record.
    pub audit: AuditFields,
    /// Attributes that map onto no typed field, verbatim.
    pub attributes: Attributes,
    /// Attributes the sender dropped.
    pub dropped_attributes: u32,
    /// Which redaction rules fired on this record and how often.
    pub redactions: Redactions,
    /// Which attribute each audit field was read from, where that was not its canonical name.
    pub source_keys: SourceKeys,
    /// The authenticated sender (see [`SpanRecord::sender`]).
    #[serde(skip)]
    pub sender: Option<Arc<Sender>>,
    /// See [`SpanRecord::tenant_mismatch`].
    #[serde(skip)]
    pub tenant_mismatch: bool,
    /// See [`SpanRecord::tenant_pending`].
    #[serde(skip)]
    pub tenant_pending: bool,
}

impl LogRecord {
    /// Bytes of text the record carries (body, names, fields, attributes); see
    /// [`SpanRecord::text_bytes`].
    pub fn text_bytes(&self) -> usize {
        self.severity_text.len()
            + self.event_name.len()
            + self.body.text_bytes()
            + self.audit.text_bytes()
            + self.attributes.text_bytes()
    }
}

/// Who sent an item, as the receivers authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// The configured name (`[[auth.senders]] name`).
    pub name: Arc<str>,
    /// The tenants it may write.
    pub tenants: SenderTenants,
}

/// The tenants one sender may write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SenderTenants {
    /// `["*"]`: any tenant it names (a trusted gateway).
    Any,
    /// These; the first is where a claim outside them is filed.
    Listed(Vec<String>),
}

impl Sender {
    /// True when the sender may write `tenant`.
    pub fn permits(&self, tenant: &str) -> bool {
        match &self.tenants {
            SenderTenants::Any => true,
            SenderTenants::Listed(t) => t.iter().any(|x| x == tenant),
        }
    }

    /// Where this sender's items go when their claim is not one of its tenants, or they name
    /// none; `None` for a sender that may write any tenant.
    pub fn home_tenant(&self) -> Option<&str> {
        match &self.tenants {
            SenderTenants::Any => None,
            SenderTenants::Listed(t) => t.first().map(String::as_str),
        }
    }

    /// The only tenant it may write, if it has exactly one.
    pub fn sole_tenant(&self) -> Option<&str> {
        match &self.tenants {
            SenderTenants::Listed(t) if t.len() == 1 => Some(&t[0]),
            _ => None,
        }
    }
}

/// Redaction rule ids and how often each fired on one item, in rule-id order.
pub type Redactions = std::collections::BTreeMap<String, u32>;

/// What one OTLP request carried, normalized.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventBatch {
    /// Spans.
    pub spans: Vec<SpanRecord>,
    /// Log records.
    pub logs: Vec<LogRecord>,
}

impl EventBatch {
    /// Number of items (spans plus log records).
    pub fn len(&self) -> usize {
        self.spans.len() + self.logs.len()
    }

    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Lowercase hex of an id.
pub fn hex_id(id: &[u8]) -> String {
    if id.len() <= MAX_ID_BYTES {
        HexId::of(id).as_str().to_owned()
    } else {
        hex::encode(id)
    }
}

/// The longest id [`HexId`] holds: a trace id.
const MAX_ID_BYTES: usize = 16;

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lowercase hex of a trace or span id, on the stack: the archive writes two or three per
/// span, and `hex::encode`'s `String` of `char`s was 1% of the daemon's CPU.
pub struct HexId {
    digits: [u8; 2 * MAX_ID_BYTES],
    len: usize,
}

impl HexId {
    /// The hex of `id` (16 bytes at most; more are left out).
    pub fn of(id: &[u8]) -> HexId {
        let mut digits = [0u8; 2 * MAX_ID_BYTES];
        let id = &id[..id.len().min(MAX_ID_BYTES)];
        for (i, &b) in id.iter().enumerate() {
            digits[2 * i] = HEX_DIGITS[usize::from(b >> 4)];
            digits[2 * i + 1] = HEX_DIGITS[usize::from(b & 0xf)];
        }
        HexId {
            digits,
            len: id.len() * 2,
        }
    }

    /// The digits.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits were written.
        std::str::from_utf8(&self.digits[..self.len]).unwrap_or_default()
    }
}

impl AsRef<str> for HexId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// Minimal records for tests and benchmarks of the stages: fill in what matters with struct
/// update syntax (`SpanRecord { name: …, ..fixtures::span() }`).
pub mod fixtures {
    use super::*;

    /// A span with ids set and everything else empty.
    pub fn span() -> SpanRecord {
        SpanRecord {
            tenant: DEFAULT_TENANT.into(),
            resource: Arc::default(),
            scope: Arc::default(),
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: None,
            trace_state: String::new(),
            name: String::new(),
            kind: SpanKind::Internal,
            class: SpanClass::Other,
            start_ns: 0,
            end_ns: 0,
            status_code: StatusCode::Unset,
            status_message: String::new(),
            gen_ai: GenAiFields::default(),
            audit: AuditFields::default(),
            attributes: Attributes::default(),
            events: Vec::new(),
            links: Vec::new(),
            dropped: DroppedCounts::default(),
            redactions: Redactions::new(),
            source_keys: SourceKeys::default(),
            sender: None,
            tenant_mismatch: false,
            tenant_pending: false,
            call_digest: CallDigestMemo::default(),
        }
    }

    /// A log record with everything empty.
    pub fn log() -> LogRecord {
        LogRecord {
            tenant: DEFAULT_TENANT.into(),
            resource: Arc::default(),
            scope: Arc::default(),
            time_ns: 0,
            observed_time_ns: 0,
            trace_id: None,
            span_id: None,
            severity_number: 0,
            severity_text: String::new(),
            event_name: String::new(),
            body: AttrValue::Empty,
            audit: AuditFields::default(),
            attributes: Attributes::default(),
            dropped_attributes: 0,
            redactions: Redactions::new(),
            source_keys: SourceKeys::default(),
            sender: None,
            tenant_mismatch: false,
            tenant_pending: false,
        }
    }
}

#[cfg(test)]
mod hex_tests {
    use super::{hex_id, HexId};

    proptest::proptest! {
        #[test]
        fn ids_print_as_lowercase_hex(id in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=40)) {
            proptest::prop_assert_eq!(hex_id(&id), hex::encode(&id));
            let stacked = HexId::of(&id[..id.len().min(16)]);
            proptest::prop_assert_eq!(stacked.as_str(), hex::encode(&id[..id.len().min(16)]));
        }
    }
}

#[cfg(test)]
mod mcp_call_tests {
    use super::{fixtures, AttrValue, McpSide, SpanClass, SpanKind, SpanRecord};

    fn side(kind: SpanKind, rpc: Option<AttrValue>) -> SpanRecord {
        let mut s = fixtures::span();
        s.class = SpanClass::Tool;
        s.kind = kind;
        s.span_id = [2; 8];
        s.parent_span_id = Some([1; 8]);
        s.gen_ai.mcp_method = Some("tools/call".into());
        if let Some(v) = rpc {
            s.attributes.0.push(("jsonrpc.request.id".into(), v));
        }
        s
    }

    #[test]
    fn the_client_keys_by_its_own_span_the_server_by_its_parent() {
        let client = side(SpanKind::Client, Some(AttrValue::Str("3".into())));
        let (s, key) = client.mcp_call().expect("a client side");
        assert_eq!((s, key.client_span), (McpSide::Client, [2; 8]));
        // An integer id on one side and its string on the other are the same request.
        let mut server = side(SpanKind::Server, Some(AttrValue::Int(3)));
        server.parent_span_id = Some([2; 8]);
        server.span_id = [5; 8];
        let (s, server_key) = server.mcp_call().expect("a server side");
        assert_eq!(s, McpSide::Server);
        assert_eq!(server_key, key);
    }

    #[test]
    fn no_side_without_an_id_a_parent_a_call_kind_or_tools_call() {
        let id = || Some(AttrValue::Str("3".into()));
        assert!(side(SpanKind::Client, None).mcp_call().is_none());
        assert!(side(SpanKind::Internal, id()).mcp_call().is_none());
        let mut orphan = side(SpanKind::Server, id());
        orphan.parent_span_id = None;
        assert!(orphan.mcp_call().is_none());
        let mut list = side(SpanKind::Client, id());
        list.gen_ai.mcp_method = Some("tools/list".into());
        assert!(list.mcp_call().is_none());
        let mut downstream = side(SpanKind::Client, id());
        downstream.class = SpanClass::Downstream;
        assert!(downstream.mcp_call().is_none());
    }
}
