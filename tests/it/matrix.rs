//! The compatibility matrix (issue 17): agent-framework instrumentations from PyPI, as they
//! ship, exporting with their own OTLP setup to the real daemon, against a local
//! OpenAI-compatible stub (`tests/python/openai_stub.py`). Each row checks the `spans` and
//! `requests` rows: span classes, models, tokens, tool calls, content redacted.

use serde_json::{Map, Value};

use crate::harness::{all_bytes, assert_readers_agree, contains, read_table, run_python, Daemon};

/// The secret the user's message carries (an AWS access key id shape).
const SECRET: &str = "AKIAQX7Z3K9M2P4V8R6T";

/// What a run left: its trace id, the daemon (stopped), and its `/metrics` text at the end.
struct Run {
    trace: String,
    daemon: Daemon,
    metrics: String,
}

/// Runs `script` against a fresh daemon.
fn run_row(script: &str, args: &[&str]) -> Run {
    let mut d = Daemon::start();
    let endpoint = d.http_url();
    let mut all = vec!["--endpoint", endpoint.as_str()];
    all.extend_from_slice(args);
    let out: Value = serde_json::from_str(&run_python(script, &all)).expect("script output");
    assert_eq!(out["stub_requests"], 2, "two model turns reached the stub");
    d.wait_for_complete_summaries(1);
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();
    let trace = out["trace_id"].as_str().expect("trace id").to_string();
    Run {
        trace,
        daemon: d,
        metrics,
    }
}

fn text<'a>(row: &'a Map<String, Value>, column: &str) -> &'a str {
    row[column]
        .as_str()
        .unwrap_or_else(|| panic!("{column}: {:?}", row[column]))
}

/// What one OpenAI instrumentation puts in the two model turns' rows (the stub's answers are
/// the same for all: a `get_weather` call, then the answer).
struct ChatRow {
    library: &'static str,
    span_name: &'static str,
    span_kind: &'static str,
    /// OpenInference's `llm.model_name` is the model that answered.
    request_model: &'static str,
    response_model: Option<&'static str>,
    /// Whether `gen_ai.response.id` is sent.
    response_id: bool,
    finish_reasons: [&'static str; 2],
    cache_read_input_tokens: [Option<i64>; 2],
}

/// A chat agent run through `row.library` (`tests/python/matrix_openai_chat.py`): two model
/// turns under the application's root span, one request; content only when captured, and
/// then with the tool call's id and the user's secret redacted.
fn chat_row(row: ChatRow, content: bool) {
    let mut args = vec!["--library", row.library];
    if content {
        args.push("--content");
    }
    let Run {
        trace,
        daemon: d,
        metrics,
    } = run_row("matrix_openai_chat.py", &args);
    let lib = row.library;
    let mut spans = assert_readers_agree(&d.data_dir, "spans");
    spans.sort_by_key(|r| r["start_time"].as_i64());
    let classes: Vec<&str> = spans.iter().map(|r| text(r, "span_class")).collect();
    assert_eq!(classes, ["other", "model", "model"], "{lib}");
    for span in &spans {
        assert_eq!(text(span, "trace_id"), trace, "{lib}");
        assert_eq!(span["tenant"], "acme", "{lib}");
    }
    let tokens = [(11, 7), (20, 9)];
    for (i, span) in spans[1..].iter().enumerate() {
        let turn = format!("{lib} turn {}", i + 1);
        assert_eq!(text(span, "name"), row.span_name, "{turn}");
        assert_eq!(text(span, "span_kind"), row.span_kind, "{turn}");
        assert_eq!(text(span, "operation"), "chat", "{turn}");
        assert_eq!(text(span, "provider"), "openai", "{turn}");
        assert_eq!(text(span, "request_model"), row.request_model, "{turn}");
        assert_eq!(
            span["response_model"].as_str(),
            row.response_model,
            "{turn}"
        );
        assert_eq!(
            text(span, "finish_reasons"),
            row.finish_reasons[i],
            "{turn}"
        );
        assert_eq!(span["input_tokens"], tokens[i].0, "{turn}");
        assert_eq!(span["output_tokens"], tokens[i].1, "{turn}");
        assert_eq!(
            span["cache_read_input_tokens"].as_i64(),
            row.cache_read_input_tokens[i],
            "{turn}"
        );
        let id = span["response_id"].as_str();
        assert_eq!(
            id,
            row.response_id
                .then(|| format!("chatcmpl-stub-{}", i + 1))
                .as_deref(),
            "{turn}"
        );
    }
    let requests = read_table(&d.data_dir, "requests");
    assert_eq!(requests.len(), 1, "{lib}: one request per agent run");
    let r = &requests[0];
    assert_eq!(text(r, "request_id"), trace);
    assert_eq!(text(r, "completeness"), "complete");
    let counts = [&r["span_count"], &r["model_turns"], &r["tool_calls"]];
    assert_eq!(counts, [3, 2, 0].map(Value::from).each_ref(), "{lib}");
    let sums = [&r["input_tokens"], &r["output_tokens"]];
    assert_eq!(sums, [31, 16].map(Value::from).each_ref(), "{lib}");
    // Content: the messages as the library sends them (the tool call's id inside), the
    // secret in the user's message redacted everywhere the daemon wrote.
    for span in &spans[1..] {
        let attributes = text(span, "attributes");
        let redactions = span["redactions"].to_string();
        if content {
            assert!(
                attributes.contains("Oslo") && attributes.contains("call_weather_1"),
                "{lib}: {attributes}"
            );
            assert!(
                redactions.contains("aws_access_key_id"),
                "{lib}: {redactions}"
            );
        } else {
            assert!(
                !attributes.contains("Oslo"),
                "{lib}: content not captured: {attributes}"
            );
            assert_eq!(redactions, "{}", "{lib}");
        }
    }
    // Nowhere: not in any table as read back (the archive's columns are compressed, so the
    // bytes alone would not show it), the journal's bytes, the daemon's log or its metrics.
    for table in ["spans", "requests", "logs"] {
        let rows = serde_json::to_string(&read_table(&d.data_dir, table)).expect("rows");
        assert!(!rows.contains(SECRET), "{lib}: the secret is in {table}");
    }
    assert!(
        !contains(&all_bytes(&d.data_dir), SECRET),
        "{lib}: the secret is in the data directory (the journal)"
    );
    assert!(
        !d.log_text().contains(SECRET),
        "{lib}: the secret is in the log"
    );
    assert!(
        !metrics.is_empty() && !metrics.contains(SECRET),
        "{lib}: metrics"
    );
}

fn openai_v2() -> ChatRow {
    ChatRow {
        library: "openai-v2",
        span_name: "chat gpt-4o-mini",
        span_kind: "client",
        request_model: "gpt-4o-mini",
        response_model: Some("gpt-4o-mini-2026-01-01"),
        response_id: true,
        finish_reasons: ["tool_calls", "stop"],
        // Not sent by this version (the stub reported 3 on the first turn).
        cache_read_input_tokens: [None, None],
    }
}

fn openllmetry() -> ChatRow {
    ChatRow {
        library: "openllmetry",
        span_name: "openai.chat",
        span_kind: "client",
        request_model: "gpt-4o-mini",
        response_model: Some("gpt-4o-mini-2026-01-01"),
        response_id: true,
        // OpenLLMetry maps OpenAI's `tool_calls` to `tool_call`.
        finish_reasons: ["tool_call", "stop"],
        cache_read_input_tokens: [Some(3), Some(0)],
    }
}

fn openinference() -> ChatRow {
    ChatRow {
        library: "openinference",
        span_name: "ChatCompletion",
        span_kind: "internal",
        request_model: "gpt-4o-mini-2026-01-01",
        response_model: None,
        response_id: false,
        finish_reasons: ["tool_calls", "stop"],
        cache_read_input_tokens: [Some(3), Some(0)],
    }
}

#[test]
fn openai_v2_content_off() {
    chat_row(openai_v2(), false);
}

#[test]
fn openai_v2_content_on_is_redacted() {
    chat_row(openai_v2(), true);
}

#[test]
fn openllmetry_openai_content_off() {
    chat_row(openllmetry(), false);
}

#[test]
fn openllmetry_openai_content_on_is_redacted() {
    chat_row(openllmetry(), true);
}

#[test]
fn openinference_openai_content_off() {
    chat_row(openinference(), false);
}

#[test]
fn openinference_openai_content_on_is_redacted() {
    chat_row(openinference(), true);
}
