//! The compatibility matrix (issue 17): agent-framework instrumentations from PyPI, as they
//! ship, exporting with their own OTLP setup to the real daemon, against a local
//! OpenAI-compatible stub (`tests/python/openai_stub.py`). Each row checks the `spans` and
//! `requests` rows: span classes, models, tokens, tool calls, content redacted.

use serde_json::{Map, Value};

use crate::harness::{
    all_bytes, assert_readers_agree, contains, python, python_mcp1, read_table, run_python_in,
    Daemon,
};

/// The secret the user's message carries (an AWS access key id shape).
const SECRET: &str = "AKIAQX7Z3K9M2P4V8R6T";

/// What a run left: the script's output, the daemon (stopped), and its `/metrics` text at
/// the end.
struct Run {
    out: Value,
    daemon: Daemon,
    metrics: String,
}

/// Runs `script` against a fresh daemon until one request completes.
fn run_row(script: &str, args: &[&str]) -> Run {
    run_row_in(&python(), script, args)
}

/// [`run_row`] with another venv's interpreter.
fn run_row_in(python: &std::path::Path, script: &str, args: &[&str]) -> Run {
    let mut d = Daemon::start();
    let endpoint = d.http_url();
    let mut all = vec!["--endpoint", endpoint.as_str()];
    all.extend_from_slice(args);
    let out = run_python_in(python, script, &all, &[]);
    let out: Value = serde_json::from_str(&out).expect("script output");
    d.wait_for_complete_summaries(1);
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();
    Run {
        out,
        daemon: d,
        metrics,
    }
}

/// The user's secret is nowhere the daemon wrote: not in any table as read back (the
/// archive's columns are compressed, so the bytes alone would not show it), the journal's
/// bytes, the daemon's log or its metrics.
fn assert_secret_nowhere(lib: &str, d: &Daemon, metrics: &str) {
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
    chat_row_with(
        row,
        if content {
            Content::Spans
        } else {
            Content::Off
        },
    );
}

/// Where a chat row's library is asked to put the messages.
#[derive(Clone, Copy, PartialEq)]
enum Content {
    Off,
    /// As span attributes (JSON text).
    Spans,
    /// On `gen_ai.client.inference.operation.details` log records, as structured values
    /// (openai-v2 only).
    Events,
}

fn chat_row_with(row: ChatRow, content: Content) {
    let mut args = vec!["--library", row.library];
    match content {
        Content::Off => {}
        Content::Spans => args.push("--content"),
        Content::Events => args.extend(["--content", "--events"]),
    }
    let Run {
        out,
        daemon: d,
        metrics,
    } = run_row("matrix_openai_chat.py", &args);
    assert_eq!(out["stub_requests"], 2, "two model turns reached the stub");
    let trace = text(out.as_object().expect("output"), "trace_id");
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
        if content == Content::Spans {
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
    if content == Content::Events {
        let logs = assert_readers_agree(&d.data_dir, "logs");
        assert_operation_details(&logs, &spans[1..]);
    } else {
        let logs = read_table(&d.data_dir, "logs");
        assert!(logs.is_empty(), "{lib}: {logs:?}");
    }
    assert_secret_nowhere(lib, &d, &metrics);
}

/// One `gen_ai.client.inference.operation.details` log record per model turn, in the turn's
/// span, its messages as structured values (lists of maps, not JSON text), the secret in the
/// user's message redacted inside them.
fn assert_operation_details(logs: &[Map<String, Value>], turns: &[Map<String, Value>]) {
    let mut logs = logs.to_vec();
    logs.sort_by_key(|r| r["time"].as_i64());
    let spans: Vec<&Value> = logs.iter().map(|r| &r["span_id"]).collect();
    let turn_spans: Vec<&Value> = turns.iter().map(|r| &r["span_id"]).collect();
    assert_eq!(spans, turn_spans);
    let user = "Weather in Oslo? My AWS key is [REDACTED:aws_access_key_id].";
    for (i, log) in logs.iter().enumerate() {
        assert_eq!(
            text(log, "event_name"),
            "gen_ai.client.inference.operation.details"
        );
        assert_eq!(text(log, "tenant"), "acme");
        assert_eq!(log["trace_id"], turns[i]["trace_id"]);
        assert_eq!(
            log["redactions"],
            serde_json::json!({"aws_access_key_id": 1})
        );
        let attributes: Value = serde_json::from_str(text(log, "attributes")).expect("json");
        let input = &attributes["gen_ai.input.messages"];
        assert_eq!(input[1]["role"], "user", "{input}");
        assert_eq!(input[1]["parts"][0]["content"], user, "{input}");
        let output = &attributes["gen_ai.output.messages"][0]["parts"][0];
        if i == 0 {
            let call = serde_json::json!({
                "type": "tool_call", "id": "call_weather_1", "name": "get_weather",
                "arguments": {"city": "Oslo"},
            });
            assert_eq!(output, &call);
        } else {
            assert_eq!(output["content"], "It is 4 degrees in Oslo.");
        }
    }
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

/// Content on the log event the 2026 conventions define, not on the span.
#[test]
fn openai_v2_content_as_events_is_redacted() {
    chat_row_with(openai_v2(), Content::Events);
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

/// What one tracer of the OpenAI Agents SDK makes of the same run (the agent
/// `weather_agent` over the Responses API: a turn calling `get_weather`, the tool, a turn
/// answering), span by span in start order.
struct AgentsRow {
    library: &'static str,
    script: &'static str,
    /// Whether content capture was asked for (`--content`).
    content: bool,
    /// (name, class, agent name) of the eight spans, in start order.
    spans: [[&'static str; 3]; 8],
    request_model: &'static str,
    response_model: Option<&'static str>,
    response_ids: [Option<&'static str>; 2],
    finish_reasons: [&'static str; 2],
    cache_read_input_tokens: [Option<i64>; 2],
    /// The tool span's arguments and result as archived.
    tool_io: (&'static str, &'static str),
}

/// Positions of the two model turns and the tool call among an [`AgentsRow`]'s spans.
const AGENT_MODEL_SPANS: [usize; 2] = [4, 7];
const AGENT_TOOL_SPAN: usize = 5;

/// An agent run traced by `row.library`: the SDK's trace as one request, with its agent, its
/// two model turns and its function tool. The application adds no span.
fn agents_row(row: AgentsRow) {
    let lib = row.library;
    let args: &[&str] = if row.content { &["--content"] } else { &[] };
    let Run {
        out,
        daemon: d,
        metrics,
    } = run_row(row.script, args);
    assert_eq!(out["stub_requests"], 2, "two model turns reached the stub");
    let mut spans = assert_readers_agree(&d.data_dir, "spans");
    spans.sort_by_key(|r| r["start_time"].as_i64());
    let trace = text(&spans[0], "trace_id").to_string();
    let shape: Vec<[&str; 3]> = spans
        .iter()
        .map(|r| {
            let agent = r["agent_name"].as_str().unwrap_or("");
            [text(r, "name"), text(r, "span_class"), agent]
        })
        .collect();
    assert_eq!(shape, row.spans, "{lib}");
    for span in &spans {
        assert_eq!(text(span, "trace_id"), trace, "{lib}");
        assert_eq!(span["tenant"], "acme", "{lib}");
        assert_eq!(text(span, "span_kind"), "internal", "{lib}");
    }
    let models = AGENT_MODEL_SPANS.map(|i| &spans[i]);
    let usage = [(11, 7), (20, 9)];
    for (i, span) in models.iter().enumerate() {
        let turn = format!("{lib} turn {}", i + 1);
        assert_eq!(text(span, "operation"), "chat", "{turn}");
        assert_eq!(text(span, "provider"), "openai", "{turn}");
        assert_eq!(text(span, "request_model"), row.request_model, "{turn}");
        assert_eq!(
            span["response_model"].as_str(),
            row.response_model,
            "{turn}"
        );
        assert_eq!(span["response_id"].as_str(), row.response_ids[i], "{turn}");
        assert_eq!(
            text(span, "finish_reasons"),
            row.finish_reasons[i],
            "{turn}"
        );
        let tokens = [&span["input_tokens"], &span["output_tokens"]];
        assert_eq!(
            tokens,
            [usage[i].0, usage[i].1].map(Value::from).each_ref(),
            "{turn}"
        );
        assert_eq!(
            span["cache_read_input_tokens"].as_i64(),
            row.cache_read_input_tokens[i],
            "{turn}"
        );
    }
    let tool = &spans[AGENT_TOOL_SPAN];
    assert_eq!(text(tool, "operation"), "execute_tool", "{lib}");
    assert_eq!(text(tool, "tool_name"), "get_weather", "{lib}");
    assert_eq!(
        tool["parent_span_id"], spans[3]["span_id"],
        "{lib}: in the first turn"
    );
    // The SDK's function span has no call id: the id is only in the model turn's messages.
    assert_eq!(tool["tool_call_id"], Value::Null, "{lib}");
    assert_eq!(text(tool, "tool_arguments"), row.tool_io.0, "{lib}");
    assert_eq!(text(tool, "tool_result"), row.tool_io.1, "{lib}");
    for span in models {
        let attributes = text(span, "attributes");
        let redactions = span["redactions"].to_string();
        if row.content {
            assert!(attributes.contains("call_weather_1"), "{lib}: {attributes}");
            assert!(
                redactions.contains("aws_access_key_id"),
                "{lib}: {redactions}"
            );
        } else {
            assert!(!attributes.contains("Oslo"), "{lib}: {attributes}");
            assert_eq!(redactions, "{}", "{lib}");
        }
    }
    let requests = read_table(&d.data_dir, "requests");
    assert_eq!(requests.len(), 1, "{lib}: one request per agent run");
    let r = &requests[0];
    assert_eq!(text(r, "request_id"), trace);
    assert_eq!(text(r, "completeness"), "complete");
    let counts = [&r["span_count"], &r["model_turns"], &r["tool_calls"]];
    assert_eq!(counts, [8, 2, 1].map(Value::from).each_ref(), "{lib}");
    assert_eq!(
        r["tool_calls_by_tool"],
        serde_json::json!({"get_weather": 1})
    );
    let sums = [
        &r["input_tokens"],
        &r["output_tokens"],
        &r["cache_read_tokens"],
    ];
    assert_eq!(sums, [31, 16, 3].map(Value::from).each_ref(), "{lib}");
    assert_secret_nowhere(lib, &d, &metrics);
}

/// OpenInference's spans of the run (`tests/python/matrix_openai_agents.py`).
fn agents_openinference(content: bool) -> AgentsRow {
    AgentsRow {
        library: "openai-agents + openinference",
        script: "matrix_openai_agents.py",
        content,
        // The SDK's trace root and the agent run are AGENT spans; the task and each turn are
        // CHAIN spans, which name no GenAI operation.
        spans: [
            ["Agent workflow", "agent", ""],
            ["Agent workflow", "other", ""],
            ["weather_agent", "agent", "weather_agent"],
            ["turn", "other", ""],
            ["response", "model", ""],
            ["get_weather", "tool", ""],
            ["turn", "other", ""],
            ["response", "model", ""],
        ],
        // `llm.model_name` is the model that answered; no response id is sent.
        request_model: "gpt-4o-mini-2026-01-01",
        response_model: None,
        response_ids: [None, None],
        // OpenInference reports `stop` for the turn that called the tool too.
        finish_reasons: ["stop", "stop"],
        cache_read_input_tokens: [Some(3), Some(0)],
        tool_io: if content {
            ("{\"city\": \"Oslo\"}", "4C")
        } else {
            // OpenInference's own placeholder for hidden values.
            ("__REDACTED__", "__REDACTED__")
        },
    }
}

#[test]
fn openai_agents_openinference_content_off() {
    agents_row(agents_openinference(false));
}

#[test]
fn openai_agents_openinference_content_on_is_redacted() {
    agents_row(agents_openinference(true));
}

/// Pydantic Logfire's spans of the same run (`tests/python/matrix_logfire.py`): span names
/// are its message templates; agent and function spans are known by them. Logfire always
/// captures content.
#[test]
fn logfire_openai_agents_is_redacted() {
    agents_row(AgentsRow {
        library: "logfire",
        script: "matrix_logfire.py",
        content: true,
        spans: [
            ["OpenAI Agents trace: {name}", "agent", ""],
            ["Task: Agent workflow", "other", ""],
            ["Agent run: {name!r}", "agent", "weather_agent"],
            ["Turn {turn} for agent weather_agent", "other", ""],
            ["Responses API with {gen_ai.request.model!r}", "model", ""],
            ["Function: {name}", "tool", ""],
            ["Turn {turn} for agent weather_agent", "other", ""],
            ["Responses API with {gen_ai.request.model!r}", "model", ""],
        ],
        request_model: "gpt-4o-mini",
        response_model: Some("gpt-4o-mini-2026-01-01"),
        response_ids: [Some("resp_stub_1"), Some("resp_stub_2")],
        // Sent as JSON text (`'["tool_calls"]'`), read as the list.
        finish_reasons: ["tool_calls", "stop"],
        // Sent only when not zero.
        cache_read_input_tokens: [Some(3), None],
        tool_io: ("{\"city\": \"Oslo\"}", "4C"),
    });
}

/// The MCP Python SDK's own tracing (`tests/python/matrix_mcp.py`): a client and its stdio
/// server in two processes, each exporting its spans; the trace crosses in `params._meta`, and
/// the tenant is named only by the application's root span in the client's process.
#[test]
fn mcp_sdk_client_and_server_are_one_request() {
    let lib = "mcp";
    let Run {
        out,
        daemon: d,
        metrics,
    } = run_row("matrix_mcp.py", &[]);
    let trace = text(out.as_object().expect("output"), "trace_id");
    let mut spans: Vec<_> = assert_readers_agree(&d.data_dir, "spans")
        .into_iter()
        .filter(|r| r["trace_id"] == trace)
        .collect();
    spans.sort_by_key(|r| r["start_time"].as_i64());
    let shape: Vec<[&str; 4]> = spans
        .iter()
        .map(|r| {
            let method = r["mcp_method"].as_str().unwrap_or("");
            [
                text(r, "name"),
                text(r, "span_kind"),
                text(r, "span_class"),
                method,
            ]
        })
        .collect();
    // The client's spans name the method, not the tool: calls to a downstream server. The
    // server's `tools/call` spans name the tool (`gen_ai.tool.name`): the tool calls.
    let expected = [
        ["weather run", "internal", "other", ""],
        ["MCP send initialize", "client", "downstream", "initialize"],
        ["initialize", "server", "other", "initialize"],
        ["MCP send tools/list", "client", "downstream", "tools/list"],
        ["tools/list", "server", "other", "tools/list"],
        [
            "MCP send tools/call get_weather",
            "client",
            "downstream",
            "tools/call",
        ],
        ["tools/call get_weather", "server", "tool", "tools/call"],
        [
            "MCP send tools/call get_forecast",
            "client",
            "downstream",
            "tools/call",
        ],
        ["tools/call get_forecast", "server", "tool", "tools/call"],
    ];
    assert_eq!(shape, expected, "{lib}");
    for (i, span) in spans.iter().enumerate() {
        // The server's process names no tenant: its spans take the request's.
        assert_eq!(span["tenant"], "acme", "{lib} span {i}");
        if i >= 2 && i % 2 == 0 {
            // Each server span is the child of the client span that sent its request.
            assert_eq!(
                span["parent_span_id"],
                spans[i - 1]["span_id"],
                "{lib} span {i}"
            );
            let attributes: Value = serde_json::from_str(text(span, "attributes")).expect("json");
            assert_eq!(
                attributes["mcp.protocol.version"], "2025-11-25",
                "{lib} span {i}"
            );
            assert_eq!(
                attributes["jsonrpc.request.id"],
                (i / 2).to_string(),
                "{lib}"
            );
        }
    }
    let (weather, forecast) = (&spans[6], &spans[8]);
    assert_eq!(text(weather, "tool_name"), "get_weather");
    assert_eq!(text(weather, "status_code"), "unset");
    assert_eq!(text(forecast, "tool_name"), "get_forecast");
    assert_eq!(text(forecast, "status_code"), "error");
    let attributes: Value = serde_json::from_str(text(forecast, "attributes")).expect("json");
    assert_eq!(attributes["error.type"], "tool_error");
    // No arguments or results are traced by this SDK.
    for call in [weather, forecast] {
        assert_eq!(call["tool_arguments"], Value::Null);
        assert_eq!(call["tool_result"], Value::Null);
    }
    let mut requests = read_table(&d.data_dir, "requests");
    requests.sort_by_key(|r| r["span_count"].as_i64());
    assert_eq!(requests.len(), 2, "{lib}: the run and the notification");
    let r = &requests[1];
    assert_eq!(text(r, "request_id"), trace);
    assert_eq!(
        (text(r, "tenant"), text(r, "completeness")),
        ("acme", "complete")
    );
    let counts = [
        &r["span_count"],
        &r["tool_calls"],
        &r["downstream_calls"],
        &r["errors"],
    ];
    assert_eq!(counts, [9, 2, 4, 1].map(Value::from).each_ref(), "{lib}");
    let by_tool = serde_json::json!({"get_forecast": 1, "get_weather": 1});
    assert_eq!(r["tool_calls_by_tool"], by_tool);
    // The server traces `notifications/initialized` as a trace of its own (the SDK carries
    // no context on notifications): a one-span request under the default tenant, since
    // nothing in it names one.
    let n = &requests[0];
    assert_eq!(n["span_count"], 1);
    assert_eq!(text(n, "tenant"), "default");
    let lone: Vec<_> = read_table(&d.data_dir, "spans")
        .into_iter()
        .filter(|s| s["trace_id"] != trace)
        .map(|s| text(&s, "name").to_string())
        .collect();
    assert_eq!(lone, ["notifications/initialized"]);
    assert!(
        metrics.contains("toolwatch_tool_calls_total{tenant=\"acme\",tool=\"get_weather\"} 1"),
        "{lib}: {metrics}"
    );
    assert_secret_nowhere(lib, &d, &metrics);
}

/// OpenLLMetry's `opentelemetry-instrumentation-mcp` with the MCP Python SDK 1.x
/// (`tests/python/matrix_mcp.py --openllmetry`, in the `.venv-mcp1` venv), in both processes:
/// the client's `X.tool` spans are the tool calls (name, arguments and result from
/// `traceloop.entity.*`, content on by default), the server's `ResponseStreamWriter` spans
/// (two per response) are `other`.
#[test]
fn openllmetry_mcp_client_and_server_are_one_request() {
    let lib = "openllmetry mcp";
    let Run {
        out,
        daemon: d,
        metrics,
    } = run_row_in(&python_mcp1(), "matrix_mcp.py", &["--openllmetry"]);
    let trace = text(out.as_object().expect("output"), "trace_id");
    let spans = assert_readers_agree(&d.data_dir, "spans");
    let mut names: Vec<[&str; 2]> = spans
        .iter()
        .map(|r| [text(r, "name"), text(r, "span_class")])
        .collect();
    names.sort();
    let writer = ["ResponseStreamWriter", "other"];
    let mut expected = vec![
        ["get_forecast.tool", "tool"],
        ["get_weather.tool", "tool"],
        ["initialize.mcp", "other"],
        ["tools/list.mcp", "other"],
        ["weather run", "other"],
    ];
    // Two per answered request (four), one for the client's notification.
    expected.extend([writer; 9]);
    expected.sort();
    assert_eq!(names, expected, "{lib}");
    for span in &spans {
        assert_eq!(text(span, "trace_id"), trace, "{lib}");
        // The server's process names no tenant: its spans take the request's.
        assert_eq!(span["tenant"], "acme", "{lib}");
    }
    let named = |name: &str| {
        spans
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    let weather = named("get_weather.tool");
    assert_eq!(text(weather, "tool_name"), "get_weather");
    // Its `{"tool_name", "arguments"}` wrapper as sent; the secret in the arguments redacted.
    let arguments: Value = serde_json::from_str(text(weather, "tool_arguments")).expect("json");
    let redacted = "[REDACTED:aws_access_key_id]";
    let sent = serde_json::json!({"tool_name": "get_weather", "arguments": {"city": "Oslo", "note": redacted}});
    assert_eq!(arguments, sent, "{lib}");
    assert_eq!(
        weather["redactions"],
        serde_json::json!({"aws_access_key_id": 1})
    );
    assert_eq!(text(weather, "tool_result"), r#"{"result": "4C"}"#);
    assert_eq!(weather["tool_call_id"], Value::Null, "{lib}: none is sent");
    let forecast = named("get_forecast.tool");
    assert_eq!(text(forecast, "status_code"), "error");
    let attributes: Value = serde_json::from_str(text(forecast, "attributes")).expect("json");
    assert_eq!(attributes["error.type"], "tool_error");
    // The server's answer to the weather call (JSON-RPC id 2) is under the client's tool span.
    let answers: Vec<_> = spans
        .iter()
        .filter(|r| {
            r["attributes"]
                .as_str()
                .is_some_and(|a| a.contains(r#""mcp.request.id":"2""#))
        })
        .collect();
    assert_eq!(answers.len(), 2, "{lib}");
    assert!(
        answers
            .iter()
            .any(|a| a["parent_span_id"] == weather["span_id"]),
        "{lib}: the server's span continues the client's"
    );
    let requests = read_table(&d.data_dir, "requests");
    assert_eq!(requests.len(), 1, "{lib}");
    let r = &requests[0];
    assert_eq!(text(r, "request_id"), trace);
    assert_eq!(
        (text(r, "tenant"), text(r, "completeness")),
        ("acme", "complete")
    );
    let counts = [
        &r["span_count"],
        &r["tool_calls"],
        &r["downstream_calls"],
        &r["errors"],
    ];
    // Errors: the failed tool's span and the server's span that answered it.
    assert_eq!(counts, [14, 2, 0, 2].map(Value::from).each_ref(), "{lib}");
    let by_tool = serde_json::json!({"get_forecast": 1, "get_weather": 1});
    assert_eq!(r["tool_calls_by_tool"], by_tool);
    assert_secret_nowhere(lib, &d, &metrics);
}

/// An MCP call traced as the MCP conventions ask, by client and server alike (each names the
/// tool and the JSON-RPC id; the server's span is the child of the client's), each side
/// exported by its own process in its own request, the server's first: one tool call in the
/// request, in the budgets and in the tool-call counter. No shipped library in the matrix
/// does this yet (the MCP SDK 2.3 client names no tool), so the spans are built here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_traced_on_both_sides_is_one_tool_call() {
    use crate::otlp::{spans_request, text as kv};
    use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
    use prost::Message;

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let side = |id: u8, parent: Option<u8>, kind: SpanKind, name: &str, tenant: bool| {
        let mut attributes = vec![
            kv("mcp.method.name", "tools/call"),
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "get_weather"),
            kv("jsonrpc.request.id", "3"),
        ];
        if tenant {
            attributes.push(kv("executor.tenant_id", "acme"));
        }
        let span = Span {
            trace_id: vec![0x5a; 16],
            span_id: vec![id; 8],
            parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
            name: name.into(),
            kind: kind as i32,
            start_time_unix_nano: now + u64::from(id) * 1_000,
            end_time_unix_nano: now + 1_000_000,
            attributes,
            ..Default::default()
        };
        spans_request(vec![], vec![span]).encode_to_vec()
    };
    let mut d = Daemon::start();
    let url = format!("{}/v1/traces", d.http_url());
    let server = side(
        2,
        Some(1),
        SpanKind::Server,
        "tools/call get_weather",
        false,
    );
    let client = side(1, None, SpanKind::Client, "tools/call get_weather", true);
    for body in [server, client] {
        let (status, _) = crate::otlp_json::post(&url, "application/x-protobuf", None, body).await;
        assert_eq!(status, 200);
    }
    let usage = "toolwatch_budget_usage{tenant=\"acme\",scope=\"request\",budget=\"tool_calls\"}";
    tokio::task::block_in_place(|| {
        crate::harness::wait_for("both sides counted", || {
            (d.metric("toolwatch_received_items_total{signal=\"traces\"}")? == 2.0).then_some(())
        });
        d.wait_for_complete_summaries(1);
    });
    assert_eq!(
        d.metric(usage),
        Some(1.0),
        "one call in the request's budget"
    );
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();
    assert!(
        metrics.contains("toolwatch_tool_calls_total{tenant=\"acme\",tool=\"get_weather\"} 1\n"),
        "{metrics}"
    );
    let spans = read_table(&d.data_dir, "spans");
    let classes: Vec<&str> = spans.iter().map(|s| text(s, "span_class")).collect();
    assert_eq!(
        classes,
        ["tool", "tool"],
        "both sides archived as tool spans"
    );
    let requests = read_table(&d.data_dir, "requests");
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["tool_calls"], 1);
    assert_eq!(
        requests[0]["tool_calls_by_tool"],
        serde_json::json!({"get_weather": 1})
    );
}
