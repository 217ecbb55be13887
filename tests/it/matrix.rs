//! The compatibility matrix (issue 17): agent-framework instrumentations from PyPI, as they
//! ship, exporting with their own OTLP setup to the real daemon, against a local
//! OpenAI-compatible stub (`tests/python/openai_stub.py`). Each row checks the `spans` and
//! `requests` rows: span classes, models, tokens, tool calls, content redacted.

use serde_json::{Map, Value};

use crate::harness::{all_bytes, assert_readers_agree, contains, read_table, run_python, Daemon};

/// The secret the user's message carries (an AWS access key id shape).
const SECRET: &str = "AKIAQX7Z3K9M2P4V8R6T";

/// Runs `script` against a fresh daemon; the run's trace id and the daemon (stopped).
fn run_row(script: &str, extra: &[&str]) -> (String, Daemon) {
    let mut d = Daemon::start();
    let endpoint = d.http_url();
    let mut args = vec!["--endpoint", endpoint.as_str()];
    args.extend_from_slice(extra);
    let out: Value = serde_json::from_str(&run_python(script, &args)).expect("script output");
    d.wait_for_complete_summaries(1);
    d.stop();
    (out["trace_id"].as_str().expect("trace id").to_string(), d)
}

fn text<'a>(row: &'a Map<String, Value>, column: &str) -> &'a str {
    row[column]
        .as_str()
        .unwrap_or_else(|| panic!("{column}: {:?}", row[column]))
}

/// The official `opentelemetry-instrumentation-openai-v2`: two chat turns under the
/// application's root span, one request; content only when asked for, and then redacted.
fn openai_v2(content: bool) {
    let extra: &[&str] = if content { &["--content"] } else { &[] };
    let (trace, d) = run_row("matrix_openai_v2.py", extra);
    let mut spans = assert_readers_agree(&d.data_dir, "spans");
    spans.sort_by_key(|r| r["start_time"].as_i64());
    let classes: Vec<&str> = spans.iter().map(|r| text(r, "span_class")).collect();
    assert_eq!(classes, ["other", "model", "model"]);
    for row in &spans {
        assert_eq!(text(row, "trace_id"), trace);
        assert_eq!(row["tenant"], "acme");
    }
    let turns = [("tool_calls", 11, 7), ("stop", 20, 9)];
    for (row, (finish, input, output)) in spans[1..].iter().zip(turns) {
        assert_eq!(text(row, "name"), "chat gpt-4o-mini");
        assert_eq!(text(row, "span_kind"), "client");
        assert_eq!(text(row, "operation"), "chat");
        assert_eq!(text(row, "provider"), "openai");
        assert_eq!(text(row, "request_model"), "gpt-4o-mini");
        assert_eq!(text(row, "response_model"), "gpt-4o-mini-2026-01-01");
        assert_eq!(text(row, "finish_reasons"), finish);
        assert_eq!(row["input_tokens"], input);
        assert_eq!(row["output_tokens"], output);
        // This version sends no cached-token count (the stub reported 3 on the first turn).
        assert_eq!(row["cache_read_input_tokens"], Value::Null);
        assert!(text(row, "response_id").starts_with("chatcmpl-stub-"));
    }
    let requests = read_table(&d.data_dir, "requests");
    assert_eq!(requests.len(), 1, "one request per agent run");
    let r = &requests[0];
    assert_eq!(text(r, "request_id"), trace);
    assert_eq!(text(r, "completeness"), "complete");
    assert_eq!(
        (&r["span_count"], &r["model_turns"], &r["tool_calls"]),
        (&Value::from(3), &Value::from(2), &Value::from(0))
    );
    assert_eq!(
        (&r["input_tokens"], &r["output_tokens"]),
        (&Value::from(31), &Value::from(16))
    );
    // Content: the messages (with the tool call's id and arguments) as the library sends
    // them, the secret in the user's message redacted everywhere the daemon wrote.
    let attributes: Vec<Value> = spans[1..]
        .iter()
        .map(|r| serde_json::from_str(text(r, "attributes")).expect("attributes JSON"))
        .collect();
    let input = attributes[1]["gen_ai.input.messages"].as_str();
    if content {
        let input = input.expect("input messages on the second turn");
        assert!(
            input.contains("call_weather_1") && input.contains("Oslo"),
            "{input}"
        );
        let first = attributes[0]["gen_ai.input.messages"]
            .as_str()
            .expect("first turn");
        assert!(!first.contains(SECRET), "{first}");
        assert!(
            spans[1]["redactions"].to_string().contains("aws"),
            "{:?}",
            spans[1]["redactions"]
        );
    } else {
        assert_eq!(input, None, "no content unless asked for");
    }
    assert!(
        !contains(&all_bytes(&d.data_dir), SECRET),
        "the secret reached the data directory"
    );
}

#[test]
fn openai_v2_content_off() {
    openai_v2(false);
}

#[test]
fn openai_v2_content_on_is_redacted() {
    openai_v2(true);
}
