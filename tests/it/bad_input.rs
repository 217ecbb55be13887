//! Malformed, truncated, oversized and wrong-content-type requests over both transports:
//! the right status and message, each counted by reason, nothing archived, no payload value
//! echoed anywhere, and the daemon still serving.

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::harness::{read_table, Daemon, DaemonOptions};
use crate::otlp::{spans_request, text};
use crate::otlp_json::{gzip, post};

/// A value that must never appear in a response, a log line or a metric.
const CANARY: &str = "sk-live-CANARY7f3a9c2e1d";

fn span_request(trace_id: Vec<u8>, note: &str) -> ExportTraceServiceRequest {
    let span = Span {
        trace_id,
        span_id: vec![1, 2, 3, 4, 5, 6, 7, 8],
        name: "execute_tool ok".into(),
        start_time_unix_nano: 1_767_225_600_000_000_000,
        end_time_unix_nano: 1_767_225_600_100_000_000,
        attributes: vec![text("note", note)],
        ..Default::default()
    };
    spans_request(vec![], vec![span])
}

/// A raw gRPC unary call over HTTP/2; returns grpc-status and grpc-message.
async fn grpc_raw(
    addr: std::net::SocketAddr,
    frame: Vec<u8>,
    encoding: Option<&str>,
) -> (String, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.expect("h2 ready");
    let mut req = http::Request::post(format!(
        "http://{addr}/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    if let Some(e) = encoding {
        req = req.header("grpc-encoding", e);
    }
    let (resp, mut stream) = client
        .send_request(req.body(()).expect("request"), false)
        .expect("send");
    // The server may answer (and reset the stream) before reading a body it refuses on the
    // headers alone, so a failed send is not an error here: the answer is what is checked.
    let _ = stream.send_data(Bytes::from(frame), true);
    let resp = resp.await.expect("response");
    let (parts, mut body) = resp.into_parts();
    let headers = if parts.headers.contains_key("grpc-status") {
        parts.headers
    } else {
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("chunk");
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        body.trailers()
            .await
            .expect("trailers")
            .expect("trailers present")
    };
    let get = |k: &str| {
        headers
            .get(k)
            .map(|v| v.to_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    (get("grpc-status"), get("grpc-message"))
}

fn framed(message: &[u8], compressed: bool) -> Vec<u8> {
    let mut f = vec![u8::from(compressed)];
    f.extend_from_slice(&(message.len() as u32).to_be_bytes());
    f.extend_from_slice(message);
    f
}

fn rejected(d: &Daemon, transport: &str, reason: &str) -> f64 {
    d.metric(&format!(
        "toolwatch_otlp_rejected_requests_total{{transport=\"{transport}\",signal=\"traces\",reason=\"{reason}\"}}"
    ))
    .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_counted_and_leave_nothing() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_LIMITS__MAX_REQUEST_BYTES".into(), "64KiB".into())],
        ..Default::default()
    });
    let traces = format!("{}/v1/traces", d.http_url());
    let mut responses: Vec<String> = Vec::new();

    // HTTP: malformed and truncated protobuf.
    let valid = span_request(vec![7; 16], CANARY).encode_to_vec();
    for body in [vec![0xff; 24], valid[..valid.len() / 2].to_vec()] {
        let (status, resp) = post(&traces, "application/x-protobuf", None, body).await;
        assert_eq!(status, 400);
        let st = tonic_types::Status::decode(resp.as_slice()).expect("protobuf google.rpc.Status");
        assert_eq!(st.code, 3);
        assert!(
            st.message
                .contains("not a valid OTLP protobuf ExportTraceServiceRequest"),
            "{}",
            st.message
        );
        responses.push(st.message);
    }
    // HTTP: malformed JSON, with the canary inside.
    let bad_json = format!("{{\"resourceSpans\": [{{\"scopeSpans\": \"{CANARY}\"");
    let (status, resp) = post(&traces, "application/json", None, bad_json.into_bytes()).await;
    assert_eq!(status, 400);
    let resp = String::from_utf8(resp).expect("utf-8");
    assert!(resp.contains("not valid OTLP/JSON"), "{resp}");
    responses.push(resp);
    // A JSON type error whose parser message would quote the value.
    let typed = format!("{{\"resourceSpans\": [{{\"scopeSpans\": [{{\"spans\": [{{\"startTimeUnixNano\": \"{CANARY}\"}}]}}]}}]}}");
    let (status, resp) = post(&traces, "application/json", None, typed.into_bytes()).await;
    assert_eq!(status, 400);
    responses.push(String::from_utf8(resp).expect("utf-8"));
    // HTTP: gzip that is not gzip.
    let (status, _) = post(
        &traces,
        "application/x-protobuf",
        Some("gzip"),
        b"not gzip".to_vec(),
    )
    .await;
    assert_eq!(status, 400);
    // HTTP: oversized, as sent and after decompression (a gzip bomb).
    let (status, resp) = post(&traces, "application/x-protobuf", None, vec![0; 100 * 1024]).await;
    assert_eq!(status, 413);
    let st = tonic_types::Status::decode(resp.as_slice()).expect("status");
    assert_eq!(st.message, "request body exceeds the limit of 65536 bytes");
    let (status, resp) = post(
        &traces,
        "application/x-protobuf",
        Some("gzip"),
        gzip(&vec![0; 1 << 20]),
    )
    .await;
    assert_eq!(status, 413);
    let st = tonic_types::Status::decode(resp.as_slice()).expect("status");
    assert!(
        st.message.ends_with("after decompression"),
        "{}",
        st.message
    );
    // HTTP: wrong content type and encoding.
    let (status, _) = post(&traces, "text/plain", None, valid.clone()).await;
    assert_eq!(status, 415);
    let (status, _) = post(&traces, "application/x-protobuf", Some("br"), valid.clone()).await;
    assert_eq!(status, 415);
    // HTTP: ids that are not ids, in a message that decodes.
    let (status, resp) = post(
        &traces,
        "application/x-protobuf",
        None,
        span_request(vec![1, 2, 3], CANARY).encode_to_vec(),
    )
    .await;
    assert_eq!(status, 400);
    let st = tonic_types::Status::decode(resp.as_slice()).expect("status");
    assert_eq!(
        st.message,
        "invalid OTLP data at resourceSpans[0].scopeSpans[0].spans[0]: traceId must be 16 bytes, got 3 (in OTLP/JSON: 32 hex digits under the lowerCamelCase key)"
    );

    // gRPC: garbage, oversized, unknown encoding, gzip bomb, invalid ids.
    let (code, msg) = grpc_raw(d.grpc, framed(&[0xff; 24], false), None).await;
    assert_eq!(code, "3", "{msg}");
    let (code, _) = grpc_raw(d.grpc, framed(&vec![0; 100 * 1024], false), None).await;
    assert_eq!(code, "8");
    let (code, _) = grpc_raw(d.grpc, framed(&valid, false), Some("snappy")).await;
    assert_eq!(code, "12");
    let (code, _) = grpc_raw(d.grpc, framed(&gzip(&vec![0; 1 << 20]), true), Some("gzip")).await;
    assert_eq!(code, "8");
    let (code, _) = grpc_raw(d.grpc, vec![0, 0, 0], None).await;
    assert_eq!(code, "3");
    let mut client = TraceServiceClient::connect(d.grpc_url())
        .await
        .expect("connect");
    let err = client
        .export(span_request(vec![0; 16], CANARY))
        .await
        .expect_err("all-zero trace id is invalid");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("traceId is all zeros"),
        "{}",
        err.message()
    );
    responses.push(err.message().to_string());

    // Every refusal was counted by its reason.
    assert_eq!(rejected(&d, "http", "malformed"), 5.0);
    assert_eq!(rejected(&d, "http", "too_large"), 2.0);
    assert_eq!(rejected(&d, "http", "unsupported_media_type"), 1.0);
    assert_eq!(rejected(&d, "http", "unsupported_encoding"), 1.0);
    assert_eq!(rejected(&d, "http", "invalid_data"), 1.0);
    assert_eq!(rejected(&d, "grpc", "malformed"), 2.0);
    assert_eq!(rejected(&d, "grpc", "too_large"), 2.0);
    assert_eq!(rejected(&d, "grpc", "unsupported_encoding"), 1.0);
    assert_eq!(rejected(&d, "grpc", "invalid_data"), 1.0);

    // Still serving: a valid request over each transport is accepted.
    client
        .export(span_request(vec![7; 16], "fine"))
        .await
        .expect("valid gRPC export accepted");
    let mut other = span_request(vec![8; 16], "fine");
    other.resource_spans[0].scope_spans[0].spans[0].span_id = vec![9; 8];
    let (status, _) = post(
        &traces,
        "application/x-protobuf",
        None,
        other.encode_to_vec(),
    )
    .await;
    assert_eq!(status, 200);
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    // Only the two valid spans were archived.
    let rows = read_table(&d.data_dir, "spans");
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["attributes"], "{\"note\":\"fine\"}");
    }
    // The canary never left: not in a response, a log line, or a metric.
    for text in responses.iter().chain([&metrics, &d.log_text()]) {
        assert!(!text.contains(CANARY), "canary leaked into: {text}");
        assert!(!text.contains("CANARY"), "canary leaked into: {text}");
    }
}

#[test]
fn wrong_method_and_path_are_refused() {
    let d = Daemon::start();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let resp = reqwest::get(format!("{}/v1/traces", d.http_url()))
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 405);
        let (status, _) = post(
            &format!("{}/v1/metrics", d.http_url()),
            "application/x-protobuf",
            None,
            vec![],
        )
        .await;
        assert_eq!(status, 404);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_over_a_structural_limit_are_refused_with_the_limit_and_where() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![(
            "TOOLWATCH_LIMITS__STRUCTURE__MAX_ATTRIBUTES".into(),
            "3".into(),
        )],
        ..Default::default()
    });
    let traces = format!("{}/v1/traces", d.http_url());
    let attrs: Vec<serde_json::Value> = (0..4)
        .map(|i| serde_json::json!({"key": format!("k{i}"), "value": {"stringValue": CANARY}}))
        .collect();
    let body = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
         "name": "ok", "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225600100000000",
         "attributes": attrs[..3]},
        {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203332",
         "name": "too many", "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225600100000000",
         "attributes": attrs}
    ]}]}]});
    let (status, resp) = post(
        &traces,
        "application/json",
        None,
        body.to_string().into_bytes(),
    )
    .await;
    let resp = String::from_utf8(resp).expect("utf-8");
    assert_eq!(status, 400, "{resp}");
    assert!(
        resp.contains("resourceSpans[0].scopeSpans[0].spans[1]: 4 attributes, over limits.structure.max_attributes = 3"),
        "{resp}"
    );
    assert!(!resp.contains(CANARY));
    assert_eq!(rejected(&d, "http", "structure_limit"), 1.0);
    assert_eq!(
        d.metric("toolwatch_structure_refused_total{limit=\"max_attributes\",tenant=\"unknown\"}"),
        Some(1.0)
    );
    d.stop();
    assert!(read_table(&d.data_dir, "spans").is_empty(), "refused whole");
}
