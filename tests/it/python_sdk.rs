//! The official OpenTelemetry Python SDK exporters (gRPC and HTTP/protobuf) into the real
//! daemon; the archive read back by the Rust parquet reader, pyarrow and DuckDB.

use serde_json::{json, Map, Value};

use crate::harness::{assert_readers_agree, by_key, run_python, Daemon};

const BASE: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
const MS: i64 = 1_000_000;

fn send(d: &Daemon, protocol: &str, gzip: bool) -> Value {
    let endpoint = match protocol {
        "grpc" => d.grpc_url(),
        _ => d.http_url(),
    };
    let mut args = vec!["--protocol", protocol, "--endpoint", endpoint.as_str()];
    if gzip {
        args.push("--gzip");
    }
    serde_json::from_str(&run_python("send_otlp.py", &args)).expect("sender output")
}

fn expect_fields(row: &Map<String, Value>, expected: Value) {
    for (k, v) in expected.as_object().expect("object") {
        assert_eq!(&row[k], v, "column {k} of span {}", row["name"]);
    }
}

fn check_archive(protocol: &str, gzip: bool) {
    let mut d = Daemon::start();
    let sent = send(&d, protocol, gzip);
    d.stop();

    let spans = assert_readers_agree(&d.data_dir, "spans");
    assert_eq!(spans.len(), 4, "{protocol}: four spans archived");
    let spans = by_key(&spans, "span_id");
    let id = |name: &str| {
        sent["spans"][name]["span_id"]
            .as_str()
            .expect("id")
            .to_string()
    };
    let trace = sent["spans"]["root"]["trace_id"]
        .as_str()
        .expect("trace id");
    for name in ["root", "chat", "tool", "down"] {
        let row = &spans[&id(name)];
        assert_eq!(row["trace_id"], trace);
        assert_eq!(row["tenant"], "acme");
        assert_eq!(row["date"], "2026-01-01");
        assert_eq!(row["hour"], "00");
        assert_eq!(row["service_name"], "py-executor");
        assert_eq!(row["scope_name"], "py-executor");
        assert_eq!(row["scope_version"], "1.2.3");
        assert_eq!(row["schema_version"], 1);
        assert_eq!(row["claimed_tenant"], "acme");
    }

    expect_fields(
        &spans[&id("root")],
        json!({
            "parent_span_id": null, "span_class": "agent", "span_kind": "internal",
            "name": "invoke_agent support", "start_time": BASE, "end_time": BASE + 1300 * MS,
            "duration_ns": 1300 * MS, "operation": "invoke_agent", "agent_name": "support",
            "request_id": "req-py-1", "principal_id": "alice", "stop_reason": "completed",
            "status_code": "unset", "attributes": "{}", "events": "[]", "links": "[]",
        }),
    );
    expect_fields(
        &spans[&id("chat")],
        json!({
            "parent_span_id": id("root"), "span_class": "model", "span_kind": "client",
            "start_time": BASE + MS, "end_time": BASE + 801 * MS, "duration_ns": 800 * MS,
            "operation": "chat", "provider": "anthropic", "request_model": "claude-sonnet-4",
            "response_model": "claude-sonnet-4-20250514", "input_tokens": 1200,
            "output_tokens": 340, "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": null, "finish_reasons": "tool_calls",
            "request_id": "req-py-1", "principal_id": null, "attributes": "{}",
        }),
    );
    let tool = &spans[&id("tool")];
    expect_fields(
        tool,
        json!({
            "parent_span_id": id("root"), "span_class": "tool", "operation": "execute_tool",
            "tool_name": "refund_order", "tool_call_id": "call_42", "tool_type": "function",
            "tool_arguments": "{\"order_id\":\"ORD-1\",\"amount_cents\":1250}",
            "tool_result": "{\"status\":\"refunded\"}", "request_id": "req-py-1",
            "principal_id": "alice", "effect_class": "write",
            "policy_decision": "require_confirmation", "policy_reason": "refund.over_limit",
            "retry_attempt": 1, "timeout_ms": 30000, "result_code": "ok", "result_bytes": 21,
            "confirmation_status": "approved", "resource_id": "orders/ORD-1",
            "tool_version": "2.3.0", "claimed_cost_usd": 0.0042, "status_code": "ok",
            "attributes": "{\"custom.note\":\"kept\"}",
            "events": format!(
                "[{{\"time_unix_nano\":{},\"name\":\"executor.confirmation\",\"attributes\":{{\"confirmation.by\":\"bob\"}}}}]",
                BASE + 950 * MS
            ),
            "redactions": {},
        }),
    );
    // The raw idempotency key is never stored; its keyed hash is.
    let hash = tool["idempotency_key_hash"].as_str().expect("hash present");
    assert!(
        hash.starts_with("hmac:") && hash.len() == 5 + 8 + 1 + 64,
        "{hash}"
    );
    for row in spans.values() {
        assert!(!serde_json::to_string(row)
            .expect("json")
            .contains("idem-py-secret-1"));
    }
    expect_fields(
        &spans[&id("down")],
        json!({
            "parent_span_id": id("tool"), "span_class": "downstream", "span_kind": "client",
            "operation": null, "start_time": BASE + 1000 * MS, "end_time": BASE + 1100 * MS,
            "attributes": "{\"http.request.method\":\"POST\",\"http.response.status_code\":201}",
        }),
    );

    let logs = assert_readers_agree(&d.data_dir, "logs");
    assert_eq!(logs.len(), 1, "{protocol}: one log record archived");
    expect_fields(
        &logs[0],
        json!({
            "time": BASE + 960 * MS, "observed_time": BASE + 961 * MS, "trace_id": trace,
            "span_id": id("tool"), "severity_number": 13, "severity_text": "WARN",
            "body": "confirmation requested", "event_name": "executor.confirmation_requested",
            "policy_decision": "require_confirmation", "request_id": "req-py-1",
            "tenant": "acme", "scope_name": "executor.policy", "attributes": "{}",
        }),
    );
}

#[test]
fn python_sdk_grpc_exporter_archives_exact_values() {
    check_archive("grpc", false);
}

#[test]
fn python_sdk_http_exporter_archives_exact_values() {
    check_archive("http", false);
}

#[test]
fn python_sdk_gzip_over_both_transports() {
    check_archive("grpc", true);
    check_archive("http", true);
}
