//! OTLP/JSON sent as raw HTTP (plain and gzip) archives exactly as the same spans sent as
//! protobuf; the JSON-mapping edge cases the generated serde code trips on are read right.

use std::io::Write;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use serde_json::{json, Value};

use crate::harness::{read_table, Daemon};
use crate::otlp::{attribute as kv, text as sv};

const TRACE: &str = "5b8efff798038103d269b633813fc60c";
const ROOT: &str = "eee19b7ec3c1b174";
const CHILD: &str = "eee19b7ec3c1b173";

/// The spans, in OTLP/JSON, using every awkward-but-valid form: snake_case keys, nulls,
/// enum names, int64 as string and as number, empty arrayValue and kvlistValue.
fn json_body() -> Value {
    json!({
      "resource_spans": [{
        "resource": {"attributes": [
          {"key": "service.name", "value": {"stringValue": "json-executor"}},
          {"key": "executor.tenant_id", "value": {"stringValue": "umbrella"}}
        ], "droppedAttributesCount": null},
        "scopeSpans": [{
          "scope": {"name": "json-scope", "version": "0.1"},
          "spans": [
            {
              "trace_id": TRACE, "span_id": ROOT, "parent_span_id": "",
              "name": "invoke_agent planner", "kind": "SPAN_KIND_INTERNAL",
              "start_time_unix_nano": "1767229200000000000",
              "endTimeUnixNano": 1767229201000000000u64,
              "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
                {"key": "executor.request_id", "value": {"stringValue": "req-json-1"}},
                {"key": "empty.list", "value": {"arrayValue": {}}},
                {"key": "empty.map", "value": {"kvlistValue": {}}},
                {"key": "nothing", "value": {}}
              ],
              "status": {"code": "STATUS_CODE_OK", "message": null},
              "events": null
            },
            {
              "traceId": TRACE, "spanId": CHILD, "parentSpanId": ROOT,
              "name": "execute_tool lookup", "kind": 1,
              "startTimeUnixNano": "1767229200100000000",
              "endTimeUnixNano": "1767229200200000000",
              "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                {"key": "gen_ai.tool.name", "value": {"stringValue": "lookup"}},
                {"key": "gen_ai.tool.call.arguments", "value": {"kvlistValue": {"values": [
                  {"key": "sku", "value": {"stringValue": "A-1"}},
                  {"key": "qty", "value": {"intValue": "3"}}
                ]}}},
                {"key": "executor.result_bytes", "value": {"intValue": 512}},
                {"key": "executor.claimed_cost_usd", "value": {"doubleValue": 0.25}},
                {"key": "tags", "value": {"arrayValue": {"values": [
                  {"stringValue": "a"}, {"boolValue": true}, {"intValue": "-7"}
                ]}}}
              ],
              "events": [{"timeUnixNano": "1767229200150000000", "name": "checkpoint",
                          "attributes": [{"key": "n", "value": {"intValue": "1"}}]}],
              "status": {}
            }
          ]
        }]
      }]
    })
}

/// The same spans built as protobuf messages.
fn protobuf_body() -> Vec<u8> {
    use any_value::Value as V;
    let id = |h: &str| hex::decode(h).expect("hex");
    let root = Span {
        trace_id: id(TRACE),
        span_id: id(ROOT),
        name: "invoke_agent planner".into(),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: 1_767_229_200_000_000_000,
        end_time_unix_nano: 1_767_229_201_000_000_000,
        attributes: vec![
            sv("gen_ai.operation.name", "invoke_agent"),
            sv("executor.request_id", "req-json-1"),
            kv("empty.list", V::ArrayValue(ArrayValue { values: vec![] })),
            kv("empty.map", V::KvlistValue(KeyValueList { values: vec![] })),
            KeyValue {
                key: "nothing".into(),
                value: Some(AnyValue { value: None }),
                ..Default::default()
            },
        ],
        status: Some(Status {
            code: 1,
            message: String::new(),
        }),
        ..Default::default()
    };
    let child = Span {
        trace_id: id(TRACE),
        span_id: id(CHILD),
        parent_span_id: id(ROOT),
        name: "execute_tool lookup".into(),
        kind: 1,
        start_time_unix_nano: 1_767_229_200_100_000_000,
        end_time_unix_nano: 1_767_229_200_200_000_000,
        attributes: vec![
            sv("gen_ai.operation.name", "execute_tool"),
            sv("gen_ai.tool.name", "lookup"),
            kv(
                "gen_ai.tool.call.arguments",
                V::KvlistValue(KeyValueList {
                    values: vec![sv("sku", "A-1"), kv("qty", V::IntValue(3))],
                }),
            ),
            kv("executor.result_bytes", V::IntValue(512)),
            kv("executor.claimed_cost_usd", V::DoubleValue(0.25)),
            kv(
                "tags",
                V::ArrayValue(ArrayValue {
                    values: vec![
                        AnyValue {
                            value: Some(V::StringValue("a".into())),
                        },
                        AnyValue {
                            value: Some(V::BoolValue(true)),
                        },
                        AnyValue {
                            value: Some(V::IntValue(-7)),
                        },
                    ],
                }),
            ),
        ],
        events: vec![span::Event {
            time_unix_nano: 1_767_229_200_150_000_000,
            name: "checkpoint".into(),
            attributes: vec![kv("n", V::IntValue(1))],
            ..Default::default()
        }],
        status: Some(Status::default()),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    sv("service.name", "json-executor"),
                    sv("executor.tenant_id", "umbrella"),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "json-scope".into(),
                    version: "0.1".into(),
                    ..Default::default()
                }),
                spans: vec![root, child],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("gzip");
    enc.finish().expect("gzip")
}

/// POSTs an OTLP JSON document to `path` (`/v1/traces`, `/v1/logs`) of a daemon and expects
/// it accepted.
pub async fn post_accepted(d: &Daemon, path: &str, body: &Value) {
    let url = format!("{}{path}", d.http_url());
    let (status, resp) = post(
        &url,
        "application/json",
        None,
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
}

/// POSTs a body; returns status and response body.
pub async fn post(
    url: &str,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    let resp = req.body(body).send().await.expect("POST");
    let status = resp.status().as_u16();
    (status, resp.bytes().await.expect("body").to_vec())
}

fn archive_of(
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> Vec<serde_json::Map<String, Value>> {
    let mut d = Daemon::start();
    let url = format!("{}/v1/traces", d.http_url());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (status, resp) = rt.block_on(post(&url, content_type, encoding, body));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    d.stop();
    read_table(&d.data_dir, "spans")
}

#[test]
fn json_plain_json_gzip_and_protobuf_archive_identically() {
    let body = json_body().to_string().into_bytes();
    let from_json = archive_of("application/json", None, body.clone());
    let from_gzip = archive_of("application/json; charset=utf-8", Some("gzip"), gzip(&body));
    let from_proto = archive_of("application/x-protobuf", None, protobuf_body());
    assert_eq!(from_json.len(), 2);
    assert_eq!(from_json, from_proto);
    assert_eq!(from_json, from_gzip);

    let root = from_json
        .iter()
        .find(|r| r["span_id"] == ROOT)
        .expect("root");
    assert_eq!(root["trace_id"], TRACE);
    assert_eq!(root["parent_span_id"], Value::Null);
    assert_eq!(root["tenant"], "umbrella");
    assert_eq!(root["status_code"], "ok");
    assert_eq!(root["start_time"], 1_767_229_200_000_000_000i64);
    assert_eq!(
        root["attributes"],
        "{\"empty.list\":[],\"empty.map\":{},\"nothing\":null}"
    );
    let child = from_json
        .iter()
        .find(|r| r["span_id"] == CHILD)
        .expect("child");
    assert_eq!(child["parent_span_id"], ROOT);
    assert_eq!(child["tool_arguments"], "{\"sku\":\"A-1\",\"qty\":3}");
    assert_eq!(child["result_bytes"], 512);
    assert_eq!(child["claimed_cost_usd"], 0.25);
    assert_eq!(child["attributes"], "{\"tags\":[\"a\",true,-7]}");
    assert_eq!(
        child["events"],
        "[{\"time_unix_nano\":1767229200150000000,\"name\":\"checkpoint\",\"attributes\":{\"n\":1}}]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_spans_without_valid_ids_are_refused_not_archived_empty() {
    let mut d = Daemon::start();
    let url = format!("{}/v1/traces", d.http_url());
    let cases = [
        // A key the mapping does not know: the generated code ignores it, leaving no id.
        (
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceid": TRACE, "spanId": ROOT, "name": "x"}]}]}]}),
            "traceId must be 16 bytes, got 0",
        ),
        (
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "", "spanId": ROOT, "name": "x"}]}]}]}),
            "traceId must be 16 bytes, got 0",
        ),
        (
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": TRACE, "name": "x"}]}]}]}),
            "spanId must be 8 bytes, got 0",
        ),
        (
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "00000000000000000000000000000000", "spanId": ROOT}]}]}]}),
            "traceId is all zeros",
        ),
        (
            json!({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz8efff798038103d269b633813fc60c", "spanId": ROOT}]}]}]}),
            "not valid OTLP/JSON",
        ),
        (json!([1, 2]), "the top level must be an object"),
    ];
    for (body, expected) in cases {
        let (status, resp) = post(
            &url,
            "application/json",
            None,
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        let resp: Value = serde_json::from_slice(&resp).expect("JSON status body");
        assert_eq!(resp["code"], 3, "{resp}");
        let msg = resp["message"].as_str().expect("message");
        assert!(msg.contains(expected), "{msg:?} should say {expected:?}");
    }
    assert_eq!(
        d.metric("toolwatch_otlp_rejected_requests_total{transport=\"http\",signal=\"traces\",reason=\"invalid_data\"}"),
        Some(4.0)
    );
    assert_eq!(
        d.metric("toolwatch_otlp_rejected_requests_total{transport=\"http\",signal=\"traces\",reason=\"malformed\"}"),
        Some(2.0)
    );
    d.stop();
    assert!(read_table(&d.data_dir, "spans").is_empty());
}
