//! Request bodies to OTLP messages: decompression with a bound, protobuf, and OTLP/JSON.
//!
//! The generated serde code of `opentelemetry-proto` reads the lowerCamelCase OTLP/JSON
//! mapping, but it trips on inputs that the protobuf JSON mapping allows: `null` for a field,
//! an empty `arrayValue: {}` or `kvlistValue: {}`, snake_case field names, enum values given
//! by name. [`canonical_json`] rewrites those into the form it reads before decoding, so
//! such a span is read correctly instead of being rejected or, worse, read with empty ids.

use std::io::Read;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use serde_json::{Map, Value};

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body (or what it decompresses to) is larger than the limit.
    #[error("request body exceeds the limit of {limit} bytes{after}")]
    TooLarge {
        /// The configured limit.
        limit: usize,
        /// " after decompression" when the compressed body was small enough.
        after: &'static str,
    },
    /// gzip data that does not inflate.
    #[error("body is not valid gzip: {0}")]
    Gzip(String),
    /// Bytes that are not the expected protobuf message.
    #[error("body is not a valid OTLP protobuf {message}: {detail}")]
    Protobuf {
        /// The message type expected.
        message: &'static str,
        /// prost's explanation (it never quotes payload bytes).
        detail: String,
    },
    /// Text that is not valid OTLP/JSON.
    #[error("body is not valid OTLP/JSON: {0}")]
    Json(String),
    /// The body could not be read (the client went away mid-request).
    #[error("could not read the request body: {0}")]
    Body(String),
}

/// Inflates gzip data, refusing to produce more than `limit` bytes.
pub fn gunzip(data: &[u8], limit: usize) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(data.len().saturating_mul(4).min(limit));
    let mut reader = flate2::read::GzDecoder::new(data).take(limit as u64 + 1);
    reader
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Gzip(e.to_string()))?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge {
            limit,
            after: " after decompression",
        });
    }
    Ok(out)
}

/// The OTLP request messages toolwatch receives.
pub trait OtlpRequest: Message + Default + serde::de::DeserializeOwned {
    /// The message's name, for error messages.
    const NAME: &'static str;
}

impl OtlpRequest for ExportTraceServiceRequest {
    const NAME: &'static str = "ExportTraceServiceRequest";
}

impl OtlpRequest for ExportLogsServiceRequest {
    const NAME: &'static str = "ExportLogsServiceRequest";
}

/// Decodes a protobuf body.
pub fn protobuf<M: OtlpRequest>(body: &[u8]) -> Result<M, DecodeError> {
    M::decode(body).map_err(|e| DecodeError::Protobuf {
        message: M::NAME,
        detail: e.to_string(),
    })
}

/// Decodes an OTLP/JSON body.
pub fn json<M: OtlpRequest>(body: &[u8]) -> Result<M, DecodeError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| DecodeError::Json(scrub(&e.to_string())))?;
    json_value(value)
}

/// Decodes an OTLP/JSON request already parsed as JSON.
pub fn json_value<M: OtlpRequest>(value: Value) -> Result<M, DecodeError> {
    if !value.is_object() {
        return Err(DecodeError::Json(format!(
            "the top level must be an object ({} expected)",
            M::NAME
        )));
    }
    let value = canonical_json(value);
    serde_json::from_value(value).map_err(|e| DecodeError::Json(scrub(&e.to_string())))
}

/// Removes quoted text from a parser message, which may echo payload values (and secrets).
pub fn scrub(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted: Option<char> = None;
    for c in message.chars() {
        match quoted {
            Some(q) if c == q => {
                out.push('…');
                out.push(c);
                quoted = None;
            }
            Some(_) => {}
            None => {
                out.push(c);
                if c == '"' {
                    quoted = Some('"');
                }
            }
        }
    }
    if quoted.is_some() {
        out.push_str("…\"");
    }
    out
}

/// Rewrites protobuf-JSON forms that the generated serde code does not read into ones it does.
pub fn canonical_json(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(canonical_object(map)),
        Value::Array(items) => Value::Array(items.into_iter().map(canonical_json).collect()),
        other => other,
    }
}

fn canonical_object(map: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        if value.is_null() {
            // Protobuf JSON: null means "the default value".
            continue;
        }
        let key = if key.contains('_') {
            lower_camel(&key)
        } else {
            key
        };
        let value = match (key.as_str(), value) {
            ("arrayValue" | "kvlistValue", Value::Object(inner)) => {
                let mut inner = canonical_object(inner);
                inner
                    .entry("values")
                    .or_insert_with(|| Value::Array(Vec::new()));
                Value::Object(inner)
            }
            ("kind", Value::String(name)) => enum_number(&name, SPAN_KINDS),
            ("code", Value::String(name)) => enum_number(&name, STATUS_CODES),
            ("severityNumber", Value::String(name)) => enum_number(&name, SEVERITIES),
            (_, v) => canonical_json(v),
        };
        out.insert(key, value);
    }
    out
}

const SPAN_KINDS: &[&str] = &[
    "SPAN_KIND_UNSPECIFIED",
    "SPAN_KIND_INTERNAL",
    "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_PRODUCER",
    "SPAN_KIND_CONSUMER",
];
const STATUS_CODES: &[&str] = &["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];
const SEVERITIES: &[&str] = &[
    "SEVERITY_NUMBER_UNSPECIFIED",
    "SEVERITY_NUMBER_TRACE",
    "SEVERITY_NUMBER_TRACE2",
    "SEVERITY_NUMBER_TRACE3",
    "SEVERITY_NUMBER_TRACE4",
    "SEVERITY_NUMBER_DEBUG",
    "SEVERITY_NUMBER_DEBUG2",
    "SEVERITY_NUMBER_DEBUG3",
    "SEVERITY_NUMBER_DEBUG4",
    "SEVERITY_NUMBER_INFO",
    "SEVERITY_NUMBER_INFO2",
    "SEVERITY_NUMBER_INFO3",
    "SEVERITY_NUMBER_INFO4",
    "SEVERITY_NUMBER_WARN",
    "SEVERITY_NUMBER_WARN2",
    "SEVERITY_NUMBER_WARN3",
    "SEVERITY_NUMBER_WARN4",
    "SEVERITY_NUMBER_ERROR",
    "SEVERITY_NUMBER_ERROR2",
    "SEVERITY_NUMBER_ERROR3",
    "SEVERITY_NUMBER_ERROR4",
    "SEVERITY_NUMBER_FATAL",
    "SEVERITY_NUMBER_FATAL2",
    "SEVERITY_NUMBER_FATAL3",
    "SEVERITY_NUMBER_FATAL4",
];

/// An enum given by name becomes its number; a number in a string is read as a number;
/// anything else is left for the decoder to reject with its own message.
fn enum_number(name: &str, names: &[&str]) -> Value {
    if let Some(i) = names.iter().position(|n| *n == name) {
        return Value::from(i as i64);
    }
    match name.parse::<i64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::String(name.to_string()),
    }
}

fn lower_camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn snake_case_nulls_and_empty_containers_are_read() {
        let v = canonical_json(json!({
            "resource_spans": [{"scope_spans": [{"spans": [{
                "trace_id": "5b8efff798038103d269b633813fc60c",
                "parentSpanId": null,
                "kind": "SPAN_KIND_CLIENT",
                "attributes": [
                    {"key": "a", "value": {"arrayValue": {}}},
                    {"key": "b", "value": {"kvlistValue": {}}}
                ]
            }]}]}]
        }));
        assert_eq!(
            v,
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
                "traceId": "5b8efff798038103d269b633813fc60c",
                "kind": 3,
                "attributes": [
                    {"key": "a", "value": {"arrayValue": {"values": []}}},
                    {"key": "b", "value": {"kvlistValue": {"values": []}}}
                ]
            }]}]}]})
        );
    }

    #[test]
    fn attribute_keys_with_underscores_are_values_and_stay() {
        let v = canonical_json(json!({"key": "gen_ai.tool.name", "value": {"stringValue": "a_b"}}));
        assert_eq!(
            v,
            json!({"key": "gen_ai.tool.name", "value": {"stringValue": "a_b"}})
        );
    }

    mod properties {
        use super::super::strategies::nested;
        use super::super::*;
        use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
        use proptest::prelude::*;

        fn any_value() -> impl Strategy<Value = AnyValue> {
            let leaf = prop_oneof![
                any::<String>().prop_map(any_value::Value::StringValue),
                any::<i64>().prop_map(any_value::Value::IntValue),
                any::<bool>().prop_map(any_value::Value::BoolValue),
                (-1e12f64..1e12).prop_map(any_value::Value::DoubleValue),
                prop::collection::vec(any::<u8>(), 0..8).prop_map(any_value::Value::BytesValue),
            ]
            .prop_map(|v| AnyValue { value: Some(v) });
            nested(leaf.boxed(), 3)
        }

        fn request() -> impl Strategy<Value = ExportTraceServiceRequest> {
            (
                prop::collection::vec(("[a-z_.]{1,10}", any_value()), 0..6),
                any::<[u8; 16]>(),
                any::<[u8; 8]>(),
                any::<u64>(),
                0i32..6,
                0i32..3,
                any::<String>(),
            )
                .prop_map(|(attrs, trace, span, start, kind, code, name)| {
                    ExportTraceServiceRequest {
                        resource_spans: vec![ResourceSpans {
                            scope_spans: vec![ScopeSpans {
                                spans: vec![Span {
                                    trace_id: trace.to_vec(),
                                    span_id: span.to_vec(),
                                    name,
                                    kind,
                                    start_time_unix_nano: start,
                                    end_time_unix_nano: start / 2,
                                    attributes: attrs
                                        .into_iter()
                                        .map(|(key, v)| KeyValue {
                                            key,
                                            value: Some(v),
                                            ..Default::default()
                                        })
                                        .collect(),
                                    status: Some(Status {
                                        code,
                                        message: String::new(),
                                    }),
                                    ..Default::default()
                                }],
                                ..Default::default()
                            }],
                            ..Default::default()
                        }],
                    }
                })
        }

        /// Renames object keys to snake_case, as some senders write them.
        fn snake(v: Value) -> Value {
            match v {
                Value::Object(m) => Value::Object(
                    m.into_iter()
                        .map(|(k, v)| {
                            let mut s = String::new();
                            for c in k.chars() {
                                if c.is_ascii_uppercase() {
                                    s.push('_');
                                    s.push(c.to_ascii_lowercase());
                                } else {
                                    s.push(c);
                                }
                            }
                            (s, snake(v))
                        })
                        .collect(),
                ),
                Value::Array(a) => Value::Array(a.into_iter().map(snake).collect()),
                other => other,
            }
        }

        proptest! {
            /// OTLP/JSON, in lowerCamelCase or snake_case, decodes to the same message as the
            /// protobuf it was written from: every value type, nesting, any string.
            #[test]
            fn json_decodes_to_the_protobuf_message(req in request()) {
                let value = serde_json::to_value(&req).expect("serializes");
                let camel: Result<ExportTraceServiceRequest, _> = json(&serde_json::to_vec(&value).expect("bytes"));
                prop_assert_eq!(camel.as_ref(), Ok(&req));
                let snaked = snake(value);
                let snake_decoded: Result<ExportTraceServiceRequest, _> = json(&serde_json::to_vec(&snaked).expect("bytes"));
                prop_assert_eq!(snake_decoded.as_ref(), Ok(&req));
                // And the protobuf itself round-trips through the decoder.
                let proto: ExportTraceServiceRequest = protobuf(&req.encode_to_vec()).expect("decodes");
                prop_assert_eq!(proto, req);
            }
        }
    }

    #[test]
    fn scrub_hides_quoted_payload() {
        let m = scrub("invalid type: string \"sk-live-123\", expected u64 at line 1 column 9");
        assert_eq!(
            m,
            "invalid type: string \"…\", expected u64 at line 1 column 9"
        );
        assert!(!scrub("unterminated \"secret").contains("secret"));
    }

    #[test]
    fn gzip_bomb_is_refused() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&vec![0u8; 1 << 20]).expect("write");
        let small = enc.finish().expect("finish");
        assert!(small.len() < 10_000);
        assert_eq!(
            gunzip(&small, 1000),
            Err(DecodeError::TooLarge {
                limit: 1000,
                after: " after decompression"
            })
        );
        assert_eq!(gunzip(&small, 1 << 20).map(|v| v.len()), Ok(1 << 20));
    }
}

/// Strategies shared by the property tests of the OTLP decoders and the fuzz targets.
#[cfg(test)]
pub(crate) mod strategies {
    use opentelemetry_proto::tonic::common::v1::{
        any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
    };
    use proptest::prelude::*;

    /// Values built from `leaf` by nesting arrays and maps up to `depth` levels.
    pub(crate) fn nested(
        leaf: BoxedStrategy<AnyValue>,
        depth: u32,
    ) -> impl Strategy<Value = AnyValue> {
        leaf.prop_recursive(depth, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|values| AnyValue {
                    value: Some(any_value::Value::ArrayValue(ArrayValue { values }))
                }),
                prop::collection::vec(("[a-z_.]{1,6}", inner), 0..4).prop_map(|kvs| AnyValue {
                    value: Some(any_value::Value::KvlistValue(KeyValueList {
                        values: kvs
                            .into_iter()
                            .map(|(key, v)| KeyValue {
                                key,
                                value: Some(v),
                                ..Default::default()
                            })
                            .collect(),
                    })),
                }),
            ]
        })
    }
}
