//! The Rust `opentelemetry-otlp` tonic exporters into the real daemon, read back with the
//! Rust parquet reader.

use std::time::{Duration, SystemTime};

use opentelemetry::logs::{LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

use crate::harness::{by_key, read_table, Daemon};

const BASE_NS: u64 = 1_767_232_800_000_000_000; // 2026-01-01T02:00:00Z

fn at(offset_ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_nanos(BASE_NS + offset_ms * 1_000_000)
}

#[test]
fn rust_otlp_exporter_archives_exact_values() {
    let mut d = Daemon::start();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // tonic's channel runs its connection on the runtime it was built in.
    let _guard = rt.enter();
    let resource = Resource::builder()
        .with_service_name("rust-executor")
        .with_attribute(KeyValue::new("executor.tenant_id", "globex"))
        .build();
    let spans = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(d.grpc_url())
        .build()
        .expect("span exporter");
    let logs = opentelemetry_otlp::LogExporter::builder()
        .with_tonic()
        .with_endpoint(d.grpc_url())
        .build()
        .expect("log exporter");
    let tracer_provider = SdkTracerProvider::builder()
        .with_simple_exporter(spans)
        .with_resource(resource.clone())
        .build();
    let logger_provider = SdkLoggerProvider::builder()
        .with_simple_exporter(logs)
        .with_resource(resource)
        .build();
    let tracer = tracer_provider.tracer("rust-executor");
    let logger = logger_provider.logger("rust-executor");

    let mut tool = tracer
        .span_builder("execute_tool search_orders")
        .with_kind(SpanKind::Internal)
        .with_start_time(at(0))
        .with_attributes(vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", "search_orders"),
            KeyValue::new("gen_ai.tool.call.id", "call_rs_1"),
            KeyValue::new("executor.request_id", "req-rs-1"),
            KeyValue::new("executor.tenant_id", "initech"),
            KeyValue::new("executor.policy_decision", "deny"),
            KeyValue::new("executor.result_code", "denied"),
            KeyValue::new("executor.retry_attempt", 0i64),
            KeyValue::new("executor.cancelled", false),
        ])
        .start(&tracer);
    tool.set_status(Status::error("denied by policy"));
    let tool_ctx = tool.span_context().clone();
    let cx = Context::current().with_remote_span_context(tool_ctx.clone());
    let mut model = tracer
        .span_builder("text_completion")
        .with_kind(SpanKind::Client)
        .with_start_time(at(5))
        .with_attributes(vec![
            KeyValue::new("openinference.span.kind", "LLM"),
            KeyValue::new("llm.model_name", "llama-3-70b"),
            KeyValue::new("llm.provider", "meta"),
            KeyValue::new("llm.token_count.prompt", 77i64),
            KeyValue::new("llm.token_count.completion", 12i64),
            KeyValue::new("llm.token_count.prompt_details.cache_read", 40i64),
        ])
        .start_with_context(&tracer, &cx);
    model.end_with_timestamp(at(9));
    let mut record = logger.create_log_record();
    record.set_timestamp(at(2));
    record.set_observed_timestamp(at(3));
    record.set_severity_number(Severity::Warn);
    record.set_severity_text("WARN");
    record.set_body("denied search_orders".into());
    record.add_attribute("executor.policy_reason", "pii.bulk_export");
    record.add_attribute("extra.flag", true);
    record.set_trace_context(tool_ctx.trace_id(), tool_ctx.span_id(), None);
    logger.emit(record);
    tool.end_with_timestamp(at(10));
    tracer_provider.shutdown().expect("flush spans");
    logger_provider.shutdown().expect("flush logs");
    d.stop();

    let rows = read_table(&d.data_dir, "spans");
    assert_eq!(rows.len(), 2);
    let rows = by_key(&rows, "span_id");
    let tool_id = tool_ctx.span_id().to_string();
    let tool = &rows[&tool_id];
    assert_eq!(tool["trace_id"], tool_ctx.trace_id().to_string());
    // The span's own claim wins over the resource's.
    assert_eq!(tool["tenant"], "initech");
    assert_eq!(tool["claimed_tenant"], "initech");
    assert_eq!(tool["date"], "2026-01-01");
    assert_eq!(tool["hour"], "02");
    assert_eq!(tool["span_class"], "tool");
    assert_eq!(tool["tool_name"], "search_orders");
    assert_eq!(tool["tool_call_id"], "call_rs_1");
    assert_eq!(tool["policy_decision"], "deny");
    assert_eq!(tool["result_code"], "denied");
    assert_eq!(tool["retry_attempt"], 0);
    assert_eq!(tool["cancelled"], false);
    assert_eq!(tool["status_code"], "error");
    assert_eq!(tool["status_message"], "denied by policy");
    assert_eq!(tool["start_time"], BASE_NS as i64);
    assert_eq!(tool["end_time"], (BASE_NS + 10_000_000) as i64);
    assert_eq!(tool["scope_name"], "rust-executor");

    let model = rows
        .values()
        .find(|r| r["span_id"] != tool_id.as_str())
        .expect("model span");
    assert_eq!(model["tenant"], "globex");
    assert_eq!(model["parent_span_id"], tool_id.as_str());
    assert_eq!(model["span_class"], "model");
    assert_eq!(model["operation"], "chat");
    assert_eq!(model["provider"], "meta");
    assert_eq!(model["request_model"], "llama-3-70b");
    assert_eq!(model["input_tokens"], 77);
    assert_eq!(model["output_tokens"], 12);
    assert_eq!(model["cache_read_input_tokens"], 40);
    assert_eq!(model["attributes"], "{\"openinference.span.kind\":\"LLM\"}");

    let logs = read_table(&d.data_dir, "logs");
    assert_eq!(logs.len(), 1);
    let log = &logs[0];
    assert_eq!(log["tenant"], "globex");
    assert_eq!(log["trace_id"], tool_ctx.trace_id().to_string());
    assert_eq!(log["span_id"], tool_id.as_str());
    assert_eq!(log["time"], (BASE_NS + 2_000_000) as i64);
    assert_eq!(log["observed_time"], (BASE_NS + 3_000_000) as i64);
    assert_eq!(log["severity_number"], 13);
    assert_eq!(log["body"], "denied search_orders");
    assert_eq!(log["policy_reason"], "pii.bulk_export");
    assert_eq!(log["attributes"], "{\"extra.flag\":true}");
}
