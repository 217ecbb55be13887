//! The payload of one journal record: a protected [`EventBatch`] or a budget stage's alarm
//! logs, in a compact binary form that reads back exactly what was written.
//!
//! Layout: a version byte ([`VERSION`]), a kind byte (events or alarm logs), then for events
//! the postcard encoding of the batch (varint integers, doubles and bytes as they are) and for
//! alarm logs the protobuf bytes as given. A batch's resources and scopes are `Arc`s shared by
//! its items; each distinct one is written once in a table and each item names it by index,
//! so 500 spans of one resource carry it once, and reading gives back shared `Arc`s.
//!
//! Version 2 adds, after the batch, each item's sender, whether its claim was outside
//! the sender's tenants and whether it may wait for its trace's tenant ([`Origins`]: a table
//! of distinct senders and a code per item, empty when no item has a sender or a flag);
//! version 1 payloads still read, as items without a sender.
//!
//! Any change to the encoded types (the event model's field order, new variants anywhere but
//! at the end of an enum) changes the format: raise [`VERSION`], and keep reading the old one
//! while journals written by the previous build can still be on disk.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::{EventBatch, LogRecord, Resource, Scope, Sender, SpanRecord};

/// Version of the payload layout written by this build.
pub const VERSION: u8 = 2;

/// The oldest version this build reads.
const OLDEST_READ: u8 = 1;

/// Set in an item's origin code when its claim was outside its sender's tenants.
const MISMATCH_BIT: u32 = 1 << 31;

/// Set in an item's origin code when it may wait for its trace's tenant (`tenant_pending`).
/// Payloads written before it read as items that do not wait.
const PENDING_BIT: u32 = 1 << 30;

const KIND_EVENTS: u8 = 0;
const KIND_ALARM_LOGS: u8 = 1;

/// One journal record's content.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalEntry {
    /// A protected batch from the receivers.
    Events(EventBatch),
    /// Alarm log records from the budget stage, as a prost-encoded ExportLogsServiceRequest.
    AlarmLogs(Vec<u8>),
}

/// Why a payload cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The batch could not be written (postcard's message, never a payload value).
    #[error("event batch cannot be encoded: {0}")]
    Encode(String),
    /// Nothing at all.
    #[error("journal payload is empty")]
    Empty,
    /// Written by a build with another layout.
    #[error("journal payload version {0} is not one this build reads (it reads {OLDEST_READ} to {VERSION})")]
    Version(u8),
    /// The kind byte names no known kind.
    #[error("journal payload kind {0} is unknown (0 = events, 1 = alarm logs)")]
    Kind(u8),
    /// The bytes do not decode as an event batch.
    #[error("journal payload is not a valid event batch: {0}")]
    Malformed(String),
    /// An item names a resource or scope the table does not have.
    #[error("journal payload item {item} names {what} {index}, but the batch has {len}")]
    Index {
        /// Position of the item (spans first, then logs).
        item: usize,
        /// `resource` or `scope`.
        what: &'static str,
        /// The index named.
        index: u32,
        /// Table length.
        len: usize,
    },
    /// Bytes left over after the batch.
    #[error("journal payload has {0} bytes after the event batch")]
    Trailing(usize),
}

/// What is written: tables, then each item with its resource and scope index.
#[derive(Serialize)]
struct WireRef<'a> {
    resources: Vec<&'a Resource>,
    scopes: Vec<&'a Scope>,
    spans: Vec<(u32, u32, &'a SpanRecord)>,
    logs: Vec<(u32, u32, &'a LogRecord)>,
}

/// What is read back; the items' `Arc`s are filled in from the tables afterwards.
#[derive(Deserialize)]
struct Wire {
    resources: Vec<Resource>,
    scopes: Vec<Scope>,
    spans: Vec<(u32, u32, SpanRecord)>,
    logs: Vec<(u32, u32, LogRecord)>,
}

/// Who sent each item (version 2): distinct senders, and per item, spans then logs, 0 for
/// none or the sender's index + 1, with [`MISMATCH_BIT`] set for a claim outside its tenants.
#[derive(Serialize, Deserialize)]
struct Origins<S> {
    senders: Vec<S>,
    items: Vec<u32>,
}

impl<S> Origins<S> {
    fn none() -> Self {
        Origins {
            senders: Vec::new(),
            items: Vec::new(),
        }
    }
}

/// Assigns each distinct `Arc` (by pointer) an index in first-seen order.
struct Table<'a, T> {
    items: Vec<&'a T>,
    index: HashMap<*const T, u32>,
}

impl<'a, T> Table<'a, T> {
    fn new() -> Self {
        Table {
            items: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn id(&mut self, item: &'a Arc<T>) -> u32 {
        let items = &mut self.items;
        *self.index.entry(Arc::as_ptr(item)).or_insert_with(|| {
            items.push(item);
            // A batch is bounded far below 2^32 items by the receivers' request size.
            u32::try_from(items.len() - 1).unwrap_or(u32::MAX)
        })
    }
}

/// Encodes an entry.
pub fn encode(entry: &JournalEntry) -> Result<Vec<u8>, CodecError> {
    match entry {
        JournalEntry::Events(batch) => encode_events(batch),
        JournalEntry::AlarmLogs(bytes) => Ok(encode_alarms(bytes)),
    }
}

/// Encodes an event batch, without the copy that building a [`JournalEntry`] would take.
pub fn encode_events(batch: &EventBatch) -> Result<Vec<u8>, CodecError> {
    let mut resources = Table::new();
    let mut scopes = Table::new();
    let spans = batch
        .spans
        .iter()
        .map(|s| (resources.id(&s.resource), scopes.id(&s.scope), s))
        .collect();
    let logs = batch
        .logs
        .iter()
        .map(|l| (resources.id(&l.resource), scopes.id(&l.scope), l))
        .collect();
    let wire = WireRef {
        resources: resources.items,
        scopes: scopes.items,
        spans,
        logs,
    };
    let out = vec![VERSION, KIND_EVENTS];
    // Writing to a Vec fails only when a serializer refuses a value, which none of these
    // types should; the batch is then refused, never a panic on what a sender sent.
    let out = postcard::to_extend(&wire, out).map_err(|e| CodecError::Encode(e.to_string()))?;
    postcard::to_extend(&origins_of(batch), out).map_err(|e| CodecError::Encode(e.to_string()))
}

fn origins_of(batch: &EventBatch) -> Origins<&Sender> {
    let items = batch
        .spans
        .iter()
        .map(|s| (&s.sender, s.tenant_mismatch, s.tenant_pending))
        .chain(
            batch
                .logs
                .iter()
                .map(|l| (&l.sender, l.tenant_mismatch, l.tenant_pending)),
        );
    if items.clone().all(|(s, m, p)| s.is_none() && !m && !p) {
        return Origins::none();
    }
    let mut senders = Table::new();
    let items = items
        .map(|(s, mismatch, pending)| {
            let id = s.as_ref().map_or(0, |s| senders.id(s) + 1);
            id | if mismatch { MISMATCH_BIT } else { 0 } | if pending { PENDING_BIT } else { 0 }
        })
        .collect();
    Origins {
        senders: senders.items,
        items,
    }
}

/// Encodes alarm logs (a prost-encoded `ExportLogsServiceRequest`).
pub fn encode_alarms(request: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(request.len() + 2);
    out.extend_from_slice(&[VERSION, KIND_ALARM_LOGS]);
    out.extend_from_slice(request);
    out
}

/// Decodes a payload written by [`encode`]. Damaged input is an error, never a panic.
pub fn decode(bytes: &[u8]) -> Result<JournalEntry, CodecError> {
    let (&version, rest) = bytes.split_first().ok_or(CodecError::Empty)?;
    if !(OLDEST_READ..=VERSION).contains(&version) {
        return Err(CodecError::Version(version));
    }
    let (&kind, body) = rest.split_first().ok_or(CodecError::Kind(u8::MAX))?;
    match kind {
        KIND_EVENTS => decode_events(body, version).map(JournalEntry::Events),
        KIND_ALARM_LOGS => Ok(JournalEntry::AlarmLogs(body.to_vec())),
        other => Err(CodecError::Kind(other)),
    }
}

fn decode_events(body: &[u8], version: u8) -> Result<EventBatch, CodecError> {
    let (wire, mut left): (Wire, _) =
        postcard::take_from_bytes(body).map_err(|e| CodecError::Malformed(e.to_string()))?;
    let mut origins = Origins::<Sender>::none();
    if version >= 2 {
        (origins, left) =
            postcard::take_from_bytes(left).map_err(|e| CodecError::Malformed(e.to_string()))?;
    }
    if !left.is_empty() {
        return Err(CodecError::Trailing(left.len()));
    }
    let resources: Vec<Arc<Resource>> = wire.resources.into_iter().map(Arc::new).collect();
    let scopes: Vec<Arc<Scope>> = wire.scopes.into_iter().map(Arc::new).collect();
    let pick = |item: usize, r: u32, s: u32| -> Result<(Arc<Resource>, Arc<Scope>), CodecError> {
        let get = |what, index: u32, len| CodecError::Index {
            item,
            what,
            index,
            len,
        };
        let res = resources
            .get(r as usize)
            .ok_or_else(|| get("resource", r, resources.len()))?;
        let scope = scopes
            .get(s as usize)
            .ok_or_else(|| get("scope", s, scopes.len()))?;
        Ok((Arc::clone(res), Arc::clone(scope)))
    };
    let mut batch = EventBatch {
        spans: Vec::with_capacity(wire.spans.len()),
        logs: Vec::with_capacity(wire.logs.len()),
    };
    for (i, (r, s, mut span)) in wire.spans.into_iter().enumerate() {
        (span.resource, span.scope) = pick(i, r, s)?;
        batch.spans.push(span);
    }
    let offset = batch.spans.len();
    for (i, (r, s, mut log)) in wire.logs.into_iter().enumerate() {
        (log.resource, log.scope) = pick(offset + i, r, s)?;
        batch.logs.push(log);
    }
    set_origins(&mut batch, origins)?;
    Ok(batch)
}

fn set_origins(batch: &mut EventBatch, origins: Origins<Sender>) -> Result<(), CodecError> {
    if origins.items.is_empty() {
        return Ok(());
    }
    let items = batch.len();
    if origins.items.len() != items {
        return Err(CodecError::Malformed(format!(
            "{} item origins for {items} items",
            origins.items.len()
        )));
    }
    let senders: Vec<Arc<Sender>> = origins.senders.into_iter().map(Arc::new).collect();
    type Origin = (Option<Arc<Sender>>, bool, bool);
    let origin = |item: usize, code: u32| -> Result<Origin, CodecError> {
        let id = code & !(MISMATCH_BIT | PENDING_BIT);
        let sender = match id {
            0 => None,
            n => Some(Arc::clone(senders.get(n as usize - 1).ok_or(
                CodecError::Index {
                    item,
                    what: "sender",
                    index: n - 1,
                    len: senders.len(),
                },
            )?)),
        };
        Ok((sender, code & MISMATCH_BIT != 0, code & PENDING_BIT != 0))
    };
    let (span_codes, log_codes) = origins.items.split_at(batch.spans.len());
    for (i, (s, &code)) in batch.spans.iter_mut().zip(span_codes).enumerate() {
        (s.sender, s.tenant_mismatch, s.tenant_pending) = origin(i, code)?;
    }
    let offset = batch.spans.len();
    for (i, (l, &code)) in batch.logs.iter_mut().zip(log_codes).enumerate() {
        (l.sender, l.tenant_mismatch, l.tenant_pending) = origin(offset + i, code)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{
        fixtures, AttrValue, Attributes, AuditFields, DroppedCounts, Field, GenAiFields, Source,
        SourceKeys, SpanClass, SpanEventRecord, SpanKind, SpanLinkRecord, StatusCode,
    };
    use proptest::prelude::*;

    fn kv(k: &str, v: AttrValue) -> (String, AttrValue) {
        (k.to_string(), v)
    }

    fn rich_value() -> AttrValue {
        AttrValue::Array(vec![
            AttrValue::Str("é ✓".into()),
            AttrValue::Bool(true),
            AttrValue::Int(i64::MIN),
            AttrValue::Double(f64::INFINITY),
            AttrValue::Double(f64::NEG_INFINITY),
            AttrValue::Double(-0.0),
            AttrValue::Bytes(vec![0, 255, 7]),
            AttrValue::Empty,
            AttrValue::Map(Attributes(vec![
                kv("dup", AttrValue::Int(1)),
                kv("dup", AttrValue::Array(vec![])),
                kv("", AttrValue::Map(Attributes::default())),
            ])),
        ])
    }

    /// Two resources and scopes shared by several items, every field of every type set.
    fn rich_batch() -> EventBatch {
        let res_a = Arc::new(Resource {
            service_name: "orders".into(),
            attributes: Attributes(vec![
                kv("service.name", AttrValue::Str("orders".into())),
                kv("deep", rich_value()),
            ]),
        });
        let res_b = Arc::new(Resource {
            service_name: "unknown_service".into(),
            attributes: Attributes::default(),
        });
        let scope = Arc::new(Scope {
            name: "lib".into(),
            version: "1.2".into(),
            attributes: Attributes(vec![kv("s", AttrValue::Int(3))]),
        });
        let span = SpanRecord {
            tenant: "acme".into(),
            resource: Arc::clone(&res_a),
            scope: Arc::clone(&scope),
            trace_id: [7; 16],
            span_id: [8; 8],
            parent_span_id: Some([9; 8]),
            trace_state: "k=v".into(),
            name: "execute_tool search".into(),
            kind: SpanKind::Consumer,
            class: SpanClass::Tool,
            start_ns: -5,
            end_ns: i64::MAX,
            status_code: StatusCode::Error,
            status_message: "boom".into(),
            gen_ai: GenAiFields {
                operation: Some("execute_tool".into()),
                provider: Some("p".into()),
                request_model: Some("m".into()),
                response_model: Some("m2".into()),
                response_id: Some("r".into()),
                finish_reasons: Some("stop,length".into()),
                input_tokens: Some(1),
                output_tokens: Some(-2),
                cache_read_input_tokens: Some(3),
                cache_creation_input_tokens: Some(i64::MAX),
                conversation_id: Some("c".into()),
                agent_id: Some("a".into()),
                agent_name: Some("an".into()),
                tool_name: Some("search".into()),
                tool_call_id: Some("tc".into()),
                tool_type: Some("function".into()),
                tool_arguments: Some("{\"q\":1}".into()),
                tool_result: Some("[]".into()),
                mcp_method: Some("tools/call".into()),
                mcp_session_id: Some("ms".into()),
            },
            audit: AuditFields {
                request_id: Some("req".into()),
                claimed_tenant: Some("acme".into()),
                principal_id: Some("u".into()),
                resource_id: Some("rid".into()),
                resource_version: Some("rv".into()),
                tool_version: Some("tv".into()),
                tool_schema_version: Some("tsv".into()),
                prompt_version: Some("pv".into()),
                effect_class: Some("write".into()),
                policy_decision: Some("deny".into()),
                policy_reason: Some("pr".into()),
                idempotency_key: None,
                idempotency_key_hash: Some("hmac:k:00".into()),
                retry_attempt: Some(2),
                timeout_ms: Some(100),
                result_code: Some("denied".into()),
                result_bytes: Some(0),
                confirmation_status: Some("cs".into()),
                confirmation_digest: Some("cd".into()),
                cancelled: Some(false),
                stop_reason: Some("completed".into()),
                claimed_cost_usd: Some(f64::MIN_POSITIVE),
            },
            attributes: Attributes(vec![kv("x", rich_value())]),
            events: vec![SpanEventRecord {
                time_ns: 4,
                name: "exception".into(),
                attributes: Attributes(vec![kv("e", AttrValue::Bytes(vec![]))]),
            }],
            links: vec![SpanLinkRecord {
                trace_id: [1; 16],
                span_id: [2; 8],
                trace_state: "a=b".into(),
                attributes: Attributes(vec![kv("l", AttrValue::Bool(false))]),
            }],
            dropped: DroppedCounts {
                attributes: 1,
                events: 2,
                links: u32::MAX,
            },
            redactions: [("email".to_string(), 2), ("aws_key".to_string(), 1)]
                .into_iter()
                .collect(),
            source_keys: SourceKeys(vec![
                (Field::ToolName, Source::Key("tool.name")),
                (Field::RequestId, Source::Resource),
                (Field::Operation, Source::Inferred),
            ]),
            sender: None,
            tenant_mismatch: false,
            tenant_pending: false,
            call_digest: Default::default(),
        };
        let other = SpanRecord {
            resource: Arc::clone(&res_b),
            span_id: [10; 8],
            ..fixtures::span()
        };
        let third = SpanRecord {
            span_id: [11; 8],
            ..span.clone()
        };
        let log = LogRecord {
            tenant: "acme".into(),
            resource: Arc::clone(&res_a),
            scope: Arc::clone(&scope),
            time_ns: 1,
            observed_time_ns: 2,
            trace_id: Some([3; 16]),
            span_id: Some([4; 8]),
            severity_number: 17,
            severity_text: "ERROR".into(),
            event_name: "ev".into(),
            body: rich_value(),
            audit: AuditFields {
                policy_decision: Some("deny".into()),
                ..Default::default()
            },
            attributes: Attributes(vec![kv("k", AttrValue::Str("v".into()))]),
            dropped_attributes: 5,
            redactions: [("email".to_string(), 1)].into_iter().collect(),
            source_keys: SourceKeys(vec![(Field::PrincipalId, Source::Resource)]),
            sender: None,
            tenant_mismatch: false,
            tenant_pending: false,
        };
        EventBatch {
            spans: vec![span, other, third],
            logs: vec![log, fixtures::log()],
        }
    }

    fn round_trip(batch: &EventBatch) -> EventBatch {
        match decode(&encode_events(batch).expect("encodes")) {
            Ok(JournalEntry::Events(b)) => b,
            other => panic!("not an event batch: {other:?}"),
        }
    }

    #[test]
    fn rich_batch_round_trips() {
        let batch = rich_batch();
        assert_eq!(round_trip(&batch), batch);
        let entry = JournalEntry::Events(batch);
        assert_eq!(decode(&encode(&entry).expect("encodes")), Ok(entry));
    }

    #[test]
    fn nan_keeps_its_bits() {
        let nan = f64::from_bits(0x7ff8_0000_0000_0123);
        let batch = EventBatch {
            spans: vec![SpanRecord {
                attributes: Attributes(vec![kv("n", AttrValue::Double(nan))]),
                ..fixtures::span()
            }],
            logs: vec![],
        };
        let back = round_trip(&batch);
        match back.spans[0].attributes.get("n") {
            Some(AttrValue::Double(d)) => assert_eq!(d.to_bits(), nan.to_bits()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn alarm_logs_round_trip() {
        let entry = JournalEntry::AlarmLogs(vec![1, 2, 3]);
        assert_eq!(decode(&encode(&entry).expect("encodes")), Ok(entry));
        assert_eq!(
            decode(&encode_alarms(&[])),
            Ok(JournalEntry::AlarmLogs(vec![]))
        );
    }

    #[test]
    fn shared_resources_are_written_once_and_read_back_shared() {
        let batch = rich_batch();
        let back = round_trip(&batch);
        let s = &back.spans;
        assert!(Arc::ptr_eq(&s[0].resource, &s[2].resource));
        assert!(Arc::ptr_eq(&s[0].resource, &back.logs[0].resource));
        assert!(Arc::ptr_eq(&s[0].scope, &s[2].scope));
        assert!(!Arc::ptr_eq(&s[0].resource, &s[1].resource));
        // 500 spans of one resource: the resource's bytes appear once.
        let marker = "resource-marker-1234567890";
        let res = Arc::new(Resource {
            service_name: marker.into(),
            attributes: Attributes::default(),
        });
        let many = EventBatch {
            spans: (0..500)
                .map(|_| SpanRecord {
                    resource: Arc::clone(&res),
                    ..fixtures::span()
                })
                .collect(),
            logs: vec![],
        };
        let bytes = encode_events(&many).expect("encodes");
        let count = bytes
            .windows(marker.len())
            .filter(|w| *w == marker.as_bytes())
            .count();
        assert_eq!(count, 1);
        let back = round_trip(&many);
        assert!(back
            .spans
            .iter()
            .all(|s| Arc::ptr_eq(&s.resource, &back.spans[0].resource)));
    }

    #[test]
    fn json_form_of_attributes_is_unchanged() {
        let v = AttrValue::Array(vec![
            AttrValue::Bytes(vec![1, 171]),
            AttrValue::Double(f64::NAN),
            AttrValue::Empty,
            AttrValue::Map(Attributes(vec![kv("a", AttrValue::Int(1))])),
        ]);
        assert_eq!(
            serde_json::to_string(&v).ok().as_deref(),
            Some("[{\"bytes_hex\":\"01ab\"},\"NaN\",null,{\"a\":1}]")
        );
    }

    #[test]
    fn damaged_input_is_an_error() {
        let bytes = encode_events(&rich_batch()).expect("encodes");
        assert_eq!(decode(&[]), Err(CodecError::Empty));
        assert_eq!(
            decode(&[VERSION + 1, 0]),
            Err(CodecError::Version(VERSION + 1))
        );
        assert!(matches!(decode(&[VERSION, 9]), Err(CodecError::Kind(9))));
        assert!(matches!(decode(&[VERSION]), Err(CodecError::Kind(_))));
        for cut in 2..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(CodecError::Trailing(1)));
        // Every single-byte change either fails or decodes to something; it never panics.
        for i in 2..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xA5;
            let _ = decode(&b);
        }
    }

    #[test]
    fn senders_and_mismatches_round_trip_and_version_1_still_reads() {
        let eu = Arc::new(Sender {
            name: "executor-eu".into(),
            tenants: crate::event::SenderTenants::Listed(vec!["acme".into(), "globex".into()]),
        });
        let gw = Arc::new(Sender {
            name: "gateway".into(),
            tenants: crate::event::SenderTenants::Any,
        });
        let mut batch = rich_batch();
        batch.spans[0].sender = Some(Arc::clone(&eu));
        batch.spans[0].tenant_mismatch = true;
        batch.spans[1].sender = Some(Arc::clone(&gw));
        if let Some(l) = batch.logs.first_mut() {
            l.sender = Some(Arc::clone(&eu));
        }
        let bytes = encode_events(&batch).expect("encodes");
        let Ok(JournalEntry::Events(back)) = decode(&bytes) else {
            panic!("decodes");
        };
        assert_eq!(back, batch);
        assert!(
            Arc::ptr_eq(
                back.spans[0].sender.as_ref().expect("sender"),
                back.logs[0].sender.as_ref().expect("sender")
            ),
            "one sender, shared"
        );
        assert!(back.spans[2..]
            .iter()
            .all(|s| s.sender.is_none() && !s.tenant_mismatch));

        // Version 1 wrote the batch alone: it reads as items without a sender.
        let plain = rich_batch();
        let mut v1 = encode_events(&plain).expect("encodes");
        assert_eq!(v1.pop(), Some(0), "no senders");
        assert_eq!(v1.pop(), Some(0), "no item codes");
        v1[0] = 1;
        assert_eq!(decode(&v1), Ok(JournalEntry::Events(plain)));
        // An origin table that does not fit the batch is an error, not a panic.
        let one = EventBatch {
            spans: vec![fixtures::span()],
            logs: Vec::new(),
        };
        let mut bytes = encode_events(&one).expect("encodes");
        bytes.truncate(bytes.len() - 2);
        bytes.extend_from_slice(&[0, 2, 0, 0]);
        assert_eq!(
            decode(&bytes),
            Err(CodecError::Malformed("2 item origins for 1 items".into()))
        );
        bytes.truncate(bytes.len() - 4);
        bytes.extend_from_slice(&[0, 1, 1]);
        assert!(matches!(
            decode(&bytes),
            Err(CodecError::Index { what: "sender", .. })
        ));
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        // One resource (service name "") with one attribute (key "") whose value is
        // Array[Array[...]]: in postcard, variant 5 and length 1, repeated.
        let mut body = vec![1, KIND_EVENTS, 1, 0, 1, 0];
        let depth = 100_000;
        let mut value = Vec::with_capacity(depth * 2);
        for _ in 0..depth {
            value.extend_from_slice(&[5, 1]);
        }
        body.extend_from_slice(&value);
        assert!(decode(&body).is_err());
    }

    #[test]
    fn index_past_the_table_is_an_error() {
        let batch = EventBatch {
            spans: vec![fixtures::span()],
            logs: vec![],
        };
        let mut bytes = encode_events(&batch).expect("encodes");
        // Layout: version, kind, 1 resource (service name "", 0 attrs), 1 scope ("", "", 0
        // attrs), 1 span whose resource index is at offset 10.
        assert_eq!(
            &bytes[..10],
            &[VERSION, KIND_EVENTS, 1, 0, 0, 1, 0, 0, 0, 1]
        );
        bytes[10] = 1;
        assert_eq!(
            decode(&bytes),
            Err(CodecError::Index {
                item: 0,
                what: "resource",
                index: 1,
                len: 1
            })
        );
    }

    pub(crate) fn attr_value() -> impl Strategy<Value = AttrValue> {
        let leaf = prop_oneof![
            ".{0,12}".prop_map(AttrValue::Str),
            any::<bool>().prop_map(AttrValue::Bool),
            any::<i64>().prop_map(AttrValue::Int),
            any::<f64>().prop_map(AttrValue::Double),
            prop::collection::vec(any::<u8>(), 0..8).prop_map(AttrValue::Bytes),
            Just(AttrValue::Empty),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(AttrValue::Array),
                prop::collection::vec(("[a-z.]{0,6}", inner), 0..4)
                    .prop_map(|kvs| AttrValue::Map(Attributes(kvs))),
            ]
        })
    }

    fn attrs() -> impl Strategy<Value = Attributes> {
        prop::collection::vec(("[a-z_.]{1,10}", attr_value()), 0..5).prop_map(Attributes)
    }

    proptest! {
        #[test]
        fn random_batches_round_trip(
            values in prop::collection::vec(attrs(), 1..6),
            body in attr_value(),
            resource_of in prop::collection::vec(0usize..3, 1..6),
            cost in any::<f64>(),
        ) {
            let resources: Vec<Arc<Resource>> = (0..3)
                .map(|i| Arc::new(Resource { service_name: i.to_string(), attributes: values[i % values.len()].clone() }))
                .collect();
            let spans: Vec<SpanRecord> = resource_of.iter().enumerate().map(|(i, &r)| SpanRecord {
                resource: Arc::clone(&resources[r]),
                span_id: [i as u8 + 1; 8],
                attributes: values[i % values.len()].clone(),
                audit: AuditFields { claimed_cost_usd: Some(cost), ..Default::default() },
                ..fixtures::span()
            }).collect();
            let batch = EventBatch {
                spans,
                logs: vec![LogRecord { body, ..fixtures::log() }],
            };
            let bytes = encode_events(&batch).expect("encodes");
            let back = match decode(&bytes) {
                Ok(JournalEntry::Events(b)) => b,
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            // Bitwise (NaN is unequal to itself under ==): encoding what was read back
            // gives the same bytes.
            prop_assert_eq!(encode_events(&back).expect("encodes"), bytes);
            for (a, b) in batch.spans.iter().zip(&back.spans) {
                for (c, d) in batch.spans.iter().zip(&back.spans) {
                    prop_assert_eq!(Arc::ptr_eq(&a.resource, &c.resource), Arc::ptr_eq(&b.resource, &d.resource));
                }
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut framed = vec![VERSION, KIND_EVENTS];
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
        }
    }
}
