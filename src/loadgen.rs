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
//! server's `Retry-After`/`RetryInfo` when longer) for up to 30 s per export.

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
    "AKIAIOSFODNN7EXAMPLE",
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
            Profile::Normal => self.normal_run(n, tenants),
            Profile::Runaway => self.runaway_run(n, tenants),
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
            tenant: format!("tenant-{}", n % u64::from(tenants)),
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

    fn normal_run(&mut self, n: u64, tenants: u32) -> AgentRun {
        let tenant = format!("tenant-{}", n % u64::from(tenants));
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
    };
    (0..count).map(|n| g.run(n, tenants.max(1))).collect()
}

struct GrpcClients {
    traces: TraceServiceClient<tonic::transport::Channel>,
    logs: LogsServiceClient<tonic::transport::Channel>,
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
                Ok(Client::Grpc(Box::new(GrpcClients {
                    traces: TraceServiceClient::new(channel.clone()),
                    logs: LogsServiceClient::new(channel),
                })))
            }
            Protocol::Http => Ok(Client::Http(
                reqwest::Client::new(),
                opts.target.trim_end_matches('/').to_string(),
            )),
        }
    }

    async fn traces(&self, req: &ExportTraceServiceRequest) -> Sent {
        match self {
            Client::Grpc(g) => {
                let bytes = req.encoded_len() as u64;
                grpc_outcome(
                    g.traces.clone().export(req.clone()).await.map(|_| ()),
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
                grpc_outcome(g.logs.clone().export(req.clone()).await.map(|_| ()), bytes)
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
    let v = r
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
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

/// Attempts per export at most.
const MAX_ATTEMPTS: u32 = 64;
/// Time an export may spend being retried: long enough to outlast a daemon restart.
const MAX_RETRY_TIME: Duration = Duration::from_secs(30);
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
}
