//! Downstream calls counted once whichever side traced them: the same four calls from an
//! executor's tool spans to `orders-api`, traced by the executor's HTTP client only, by
//! `orders-api` only (its `SERVER` spans, a second resource in the same trace) or by both,
//! summarize alike in the `requests` table.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};
use prost::Message;
use serde_json::{Map, Value};

use crate::harness::{read_table, Daemon, DaemonOptions};
use crate::otlp::{spans_request, text};
use crate::otlp_json::post;

/// Calls per request.
const CALLS: u64 = 4;

/// Which side of the calls to `orders-api` is traced.
#[derive(Clone, Copy, Debug)]
struct Shape {
    name: &'static str,
    client: bool,
    server: bool,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "server-only",
        client: false,
        server: true,
    },
    Shape {
        name: "client-only",
        client: true,
        server: false,
    },
    Shape {
        name: "client-and-server",
        client: true,
        server: true,
    },
];

/// A span of the request's trace `trace` (ids are small numbers, distinct per request).
fn span(trace: u8, id: u64, parent: Option<u64>, name: &str, kind: SpanKind, at: u64) -> Span {
    Span {
        trace_id: vec![trace; 16],
        span_id: (u64::from(trace) << 32 | id).to_be_bytes().to_vec(),
        parent_span_id: parent
            .map(|p| (u64::from(trace) << 32 | p).to_be_bytes().to_vec())
            .unwrap_or_default(),
        name: name.into(),
        kind: kind as i32,
        start_time_unix_nano: at,
        end_time_unix_nano: at + 1_000_000,
        ..Default::default()
    }
}

/// One request of `shape`: the executor's root agent span and four tool calls (with their
/// HTTP client spans when the client is traced) as one resource, `orders-api`'s server spans
/// (children of the client spans, else of the tool spans) as a second one in the same trace.
fn request(trace: u8, shape: Shape, start: u64) -> ExportTraceServiceRequest {
    let request_id = format!("req-downstream-{}", shape.name);
    let ours = |mut s: Span| {
        s.attributes.push(text("executor.request_id", &request_id));
        s
    };
    let mut root = ours(span(
        trace,
        1,
        None,
        "invoke_agent orders",
        SpanKind::Internal,
        start,
    ));
    root.attributes
        .push(text("gen_ai.operation.name", "invoke_agent"));
    root.end_time_unix_nano = start + 100_000_000;
    let (mut executor, mut orders) = (vec![root], Vec::new());
    for call in 0..CALLS {
        let at = start + (call + 1) * 10_000_000;
        let tool_id = 10 + call;
        let mut tool = ours(span(
            trace,
            tool_id,
            Some(1),
            "execute_tool create_order",
            SpanKind::Internal,
            at,
        ));
        tool.attributes.extend([
            text("gen_ai.operation.name", "execute_tool"),
            text("gen_ai.tool.name", "create_order"),
        ]);
        executor.push(tool);
        let mut caller = tool_id;
        if shape.client {
            let mut http = ours(span(
                trace,
                20 + call,
                Some(tool_id),
                "POST",
                SpanKind::Client,
                at + 1_000,
            ));
            http.attributes.push(text("http.request.method", "POST"));
            executor.push(http);
            caller = 20 + call;
        }
        if shape.server {
            let mut handler = span(
                trace,
                30 + call,
                Some(caller),
                "POST /v1/orders",
                SpanKind::Server,
                at + 2_000,
            );
            handler.attributes.push(text("http.route", "/v1/orders"));
            orders.push(handler);
        }
    }
    let executor_resource = vec![
        text("service.name", "order-executor"),
        text("executor.tenant_id", "acme"),
    ];
    let mut req = spans_request(executor_resource, executor);
    if !orders.is_empty() {
        // `orders-api` knows neither the request nor the tenant: its spans join both by trace.
        let orders_resource = vec![text("service.name", "orders-api")];
        let second: ResourceSpans = spans_request(orders_resource, orders)
            .resource_spans
            .remove(0);
        req.resource_spans.push(second);
    }
    req
}

fn text_of<'a>(row: &'a Map<String, Value>, key: &str) -> &'a str {
    row[key].as_str().unwrap_or_default()
}

#[test]
fn a_downstream_call_counts_once_whichever_side_traced_it() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "300ms".into())],
        ..Default::default()
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    let url = format!("{}/v1/traces", d.http_url());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for (i, shape) in SHAPES.iter().enumerate() {
        let body = request(i as u8 + 1, *shape, now).encode_to_vec();
        let (status, resp) = rt.block_on(post(&url, "application/x-protobuf", None, body));
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    }
    d.wait_for_complete_summaries(SHAPES.len() as u64);
    d.stop();

    let rows = read_table(&d.data_dir, "requests");
    assert_eq!(rows.len(), SHAPES.len(), "one summary per request");
    for shape in SHAPES {
        let id = format!("req-downstream-{}", shape.name);
        let row = rows
            .iter()
            .find(|r| text_of(r, "request_id") == id)
            .unwrap_or_else(|| panic!("no summary for {id}"));
        let sides = u64::from(shape.client) + u64::from(shape.server);
        let count = |k: &str| row[k].as_u64();
        assert_eq!(text_of(row, "completeness"), "complete", "{id}");
        assert_eq!(text_of(row, "tenant"), "acme", "{id}");
        assert_eq!(count("span_count"), Some(1 + CALLS + CALLS * sides), "{id}");
        assert_eq!(count("orphan_count"), Some(0), "{id}");
        assert_eq!(count("tool_calls"), Some(CALLS), "{id}");
        assert_eq!(count("downstream_calls"), Some(CALLS), "{id}");
    }
    // The archive keeps each span's class as normalize gave it: a server span is `other`, a
    // client span `downstream`; only the summary pairs them.
    let spans = read_table(&d.data_dir, "spans");
    let classes = |service: &str, kind: &str| -> Vec<&str> {
        spans
            .iter()
            .filter(|s| text_of(s, "service_name") == service && text_of(s, "span_kind") == kind)
            .map(|s| text_of(s, "span_class"))
            .collect()
    };
    assert_eq!(classes("orders-api", "server"), vec!["other"; 8]);
    assert_eq!(classes("order-executor", "client"), vec!["downstream"; 8]);
}
