//! End to end: loadgen's planted secrets and a canary set of our own go in over gRPC and
//! HTTP; afterwards nothing toolwatch produced — the archive decoded by DuckDB (spans, logs and
//! request summaries), the daemon's log, `/metrics`, and what `toolwatch trace` and
//! `toolwatch query` print — holds any of them, and the fields around them are intact.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use serde_json::{json, Value};

use crate::harness::{all_bytes, contains, loadgen, read_table_python, wait_for, Daemon};
use crate::otlp_json::post_accepted;

/// Our own canaries, one per family, none of them real.
pub const CANARIES: &[&str] = &[
    "AKIAQX7Z3K9M2P4V8R6T",
    "sk-ant-api03-Qm9vYmFyQmF6UXV4Q29ycmVjdEhvcnNlQmF0dGVyeVN0YXBsZVhZWjEyMzQ1Njc4OTBhYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAx",
    "glpat-Zk3q9XbT2mLw8RvNc1dF",
    "whsec_Zk3q9XbT2mLw8RvNc1dF5gH0jKaQ7uYe",
    "canary.person@example.net",
    "5500 0000 0000 0004",
    "DE89370400440532013000",
    "078-05-1120",
    "hunter2-C4n4ry!",
    // No vendor's shape: found only as a member of a YAML block under `secrets:`.
    "Qm7vTz2KpX9wLr4NbY6cJd3s",
];

pub fn kv(key: &str, value: Value) -> Value {
    json!({ "key": key, "value": value })
}

pub fn s(v: &str) -> Value {
    json!({ "stringValue": v })
}

/// One span and one log record carrying every canary in a different place.
pub fn canary_request(trace: &str, tenant: &str) -> (Value, Value) {
    let c = CANARIES;
    let values_yaml = format!("secrets:\n  openai: {}\n  enabled: true\n", c[9]);
    let tool_args = json!({
        "order_ref": "ORD-77", "card": c[5], "notes": { "iban": c[6] }, "content": values_yaml,
    })
    .to_string();
    let double = json!({ "arguments": json!({ "ssn": c[7] }).to_string() }).to_string();
    let resource = json!({ "attributes": [
        kv("service.name", s("canary-executor")),
        kv("executor.tenant_id", s(tenant)),
        kv("deploy.env", s(&format!("AWS_SECRET_ACCESS_KEY=x AWS_KEY={}", c[0]))),
    ]});
    let spans = json!({ "resourceSpans": [{
        "resource": resource,
        "scopeSpans": [{ "spans": [{
            "traceId": trace, "spanId": "1a2b3c4d5e6f7081", "name": format!("execute_tool refund for {}", c[4]),
            "kind": 1, "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225600500000000",
            "status": { "code": 2, "message": format!("upstream rejected key {}", c[1]) },
            "attributes": [
                kv("gen_ai.operation.name", s("execute_tool")),
                kv("gen_ai.tool.name", s("refund_order")),
                kv("gen_ai.tool.call.arguments", s(&tool_args)),
                kv("gen_ai.tool.call.result", s(&double)),
                kv("db.password", s(c[8])),
                kv("nested", json!({ "kvlistValue": { "values": [
                    kv("list", json!({ "arrayValue": { "values": [ s(&format!("token {}", c[2])) ] } })),
                ]}})),
                kv("bytes", json!({ "bytesValue": base64_of(&format!("Authorization: Bearer {}", c[3])) })),
            ],
            "events": [{ "timeUnixNano": "1767225600100000000", "name": "exception",
                "attributes": [ kv("exception.message", s(&format!("stripe said {}", c[3]))) ] }],
            "links": [{ "traceId": trace, "spanId": "0102030405060708",
                "attributes": [ kv("reason", s(&format!("follow-up for {}", c[4]))) ] }],
        }]}]
    }]});
    let logs = json!({ "resourceLogs": [{
        "resource": resource,
        "scopeLogs": [{ "logRecords": [{
            "timeUnixNano": "1767225600200000000", "observedTimeUnixNano": "1767225600200000000",
            "traceId": trace, "spanId": "1a2b3c4d5e6f7081", "severityNumber": 17,
            "body": { "kvlistValue": { "values": [
                kv("message", s(&format!("login failed for {} with password: {}", c[4], c[8]))),
                kv("order_ref", s("ORD-77")),
            ]}},
            "attributes": [ kv("curl", s(&format!("curl -u admin:{} https://api", c[8]))) ],
        }]}]
    }]});
    (spans, logs)
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

pub fn assert_clean(text: &str, what: &str) {
    let planted = toolwatch_cli::loadgen::PLANTED;
    for secret in CANARIES.iter().chain(planted) {
        let escaped = serde_json::to_string(secret).expect("json");
        let escaped = &escaped[1..escaped.len() - 1];
        assert!(
            !text.contains(secret) && !text.contains(escaped),
            "{secret:?} survived in {what}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_planted_secret_leaves_toolwatch() {
    let mut d = Daemon::start();
    let grpc = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "80",
        "--seed",
        "21",
    ]);
    let http = loadgen(&[
        "--target",
        &d.http_url(),
        "--http",
        "--requests",
        "40",
        "--seed",
        "22",
    ]);
    assert!(
        grpc["planted_secrets"].as_u64().unwrap_or(0)
            + http["planted_secrets"].as_u64().unwrap_or(0)
            > 20
    );

    // Our canaries over HTTP/JSON, and the same over gRPC/protobuf for another tenant.
    let (spans, logs) = canary_request("0af7651916cd43dd8448eb211c80319c", "canary-http");
    for (path, body) in [("/v1/traces", &spans), ("/v1/logs", &logs)] {
        post_accepted(&d, path, body).await;
    }
    let (spans, _) = canary_request("1bf7651916cd43dd8448eb211c80319d", "canary-grpc");
    let req: opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest =
        toolwatch::receive::decode::json(spans.to_string().as_bytes()).expect("decodes");
    TraceServiceClient::connect(d.grpc_url())
        .await
        .expect("connect")
        .export(req)
        .await
        .expect("gRPC export accepted");

    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    let span_rows = read_table_python("duckdb", &d.data_dir, "spans");
    let log_rows = read_table_python("duckdb", &d.data_dir, "logs");
    let expected_spans =
        grpc["spans"].as_u64().unwrap_or(0) + http["spans"].as_u64().unwrap_or(0) + 2;
    assert_eq!(span_rows.len() as u64, expected_spans);
    assert_clean(
        &serde_json::to_string(&span_rows).expect("json"),
        "the spans table",
    );
    assert_clean(
        &serde_json::to_string(&log_rows).expect("json"),
        "the logs table",
    );
    assert_clean(&d.log_text(), "the daemon's log");
    assert_clean(&metrics, "/metrics");

    // The request summaries, and what `trace` and `query` print from the archive.
    let request_rows = read_table_python("duckdb", &d.data_dir, "requests");
    assert!(
        request_rows
            .iter()
            .any(|r| r["request_id"] == "0af7651916cd43dd8448eb211c80319c"),
        "the canary request was summarized"
    );
    assert_clean(
        &serde_json::to_string(&request_rows).expect("json"),
        "the requests table",
    );
    for trace_id in [
        "0af7651916cd43dd8448eb211c80319c",
        "1bf7651916cd43dd8448eb211c80319d",
    ] {
        for json in [false, true] {
            let mut cmd = crate::harness::toolwatch();
            cmd.arg("trace").arg("--data-dir").arg(&d.data_dir);
            if json {
                cmd.arg("--json");
            }
            let out = cmd.arg(trace_id).output().expect("trace");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("refund_order"), "{text}");
            assert_clean(&text, "toolwatch trace");
        }
    }
    for (format, sql) in [
        ("json", "SELECT * FROM spans"),
        ("csv", "SELECT * FROM logs"),
        ("table", "SELECT * FROM requests"),
    ] {
        let out = crate::harness::toolwatch()
            .args(["query", "--format", format, "--data-dir"])
            .arg(&d.data_dir)
            .arg(sql)
            .output()
            .expect("query");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_clean(&String::from_utf8_lossy(&out.stdout), "toolwatch query");
    }

    // The fields around the secrets are intact, and provenance names the rules.
    for tenant in ["canary-http", "canary-grpc"] {
        let row = span_rows
            .iter()
            .find(|r| r["tenant"] == tenant)
            .expect("canary span");
        assert_eq!(row["tool_name"], "refund_order");
        assert_eq!(
            row["name"],
            "execute_tool refund for [REDACTED:email_address]"
        );
        assert_eq!(
            row["status_message"],
            "upstream rejected key [REDACTED:anthropic_api_key]"
        );
        let args: Value =
            serde_json::from_str(row["tool_arguments"].as_str().expect("args")).expect("JSON kept");
        assert_eq!(args["order_ref"], "ORD-77");
        assert_eq!(args["card"], "[REDACTED:payment_card_number]");
        assert_eq!(args["notes"]["iban"], "[REDACTED:iban]");
        assert_eq!(
            args["content"],
            "secrets:\n  openai: [REDACTED:secret_key_assignment]\n  enabled: true\n"
        );
        let attrs: Value =
            serde_json::from_str(row["attributes"].as_str().expect("attrs")).expect("JSON");
        assert_eq!(attrs["db.password"], "[REDACTED:credential_key]");
        let redactions = row["redactions"].as_object().expect("map");
        for rule in [
            "email_address",
            "anthropic_api_key",
            "payment_card_number",
            "iban",
            "us_social_security_number",
            "credential_key",
            "gitlab_token",
            "stripe_webhook_secret",
            "aws_access_key_id",
            "secret_key_assignment",
        ] {
            assert!(
                redactions.get(rule).and_then(Value::as_u64).unwrap_or(0) >= 1,
                "{tenant}: {rule} not recorded in {redactions:?}"
            );
        }
    }
    let log = log_rows
        .iter()
        .find(|r| r["tenant"] == "canary-http")
        .expect("canary log");
    let body: Value = serde_json::from_str(log["body"].as_str().expect("body")).expect("JSON body");
    assert_eq!(body["order_ref"], "ORD-77");
    for rule in [
        "email_address",
        "payment_card_number",
        "aws_access_key_id",
        "credential_key",
    ] {
        assert!(
            metrics.contains(&format!("toolwatch_redactions_total{{rule=\"{rule}\"}}")),
            "{rule} missing from /metrics"
        );
    }
}

/// A kvlist nested `levels` deep with `leaf` at the bottom.
fn nested(levels: usize, leaf: Value) -> Value {
    (0..levels).fold(
        leaf,
        |inner, i| json!({ "kvlistValue": { "values": [ kv(&format!("level{i}"), inner) ] } }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_protect_cannot_examine_are_replaced_and_counted() {
    let mut d = Daemon::start();
    let canary = "too-deep-C4n4ry-Zk3q9XbT2mLw8";
    let spans = json!({ "resourceSpans": [{
        "resource": { "attributes": [ kv("service.name", s("deep-executor")) ] },
        "scopeSpans": [{ "spans": [{
            "traceId": "2cf7651916cd43dd8448eb211c80319e", "spanId": "2a2b3c4d5e6f7081",
            "name": "execute_tool deep", "kind": 1,
            "startTimeUnixNano": "1767225600000000000", "endTimeUnixNano": "1767225600500000000",
            "attributes": [
                kv("deep", nested(20, s(canary))),
                kv("shallow", s("kept as sent")),
                kv("blob", json!({ "bytesValue": base64_of_bytes(&[0xff, 0xfe, 0x00, 0x41]) })),
            ],
        }]}]
    }]});
    post_accepted(&d, "/v1/traces", &spans).await;
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    for reason in ["max_depth_exceeded", "unexaminable_bytes"] {
        let sample =
            format!("toolwatch_quarantined_items_total{{signal=\"traces\",reason=\"{reason}\"}} 1");
        assert!(
            metrics.contains(&sample),
            "{sample} missing from:\n{metrics}"
        );
    }
    let rows = read_table_python("duckdb", &d.data_dir, "spans");
    assert_eq!(rows.len(), 1);
    let text = serde_json::to_string(&rows).expect("json");
    assert!(!text.contains(canary), "the too-deep value was stored");
    let attrs: Value =
        serde_json::from_str(rows[0]["attributes"].as_str().expect("attrs")).expect("JSON");
    assert_eq!(attrs["shallow"], "kept as sent");
    assert_eq!(attrs["blob"], "[REDACTED:unexaminable_bytes] 4 bytes");
    assert!(text.contains("[REDACTED:max_depth_exceeded]"), "{text}");
    assert!(!d.log_text().contains(canary));
}

fn base64_of_bytes(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The canary the learned-values tests plant: 40 characters, what the AWS secret key rule
/// removes after `aws_secret_access_key=`.
const LEARNED_SECRET: &str = "q8Zr2LmX4vT9wK1pZk3q9XbT2mLw8RvNc1dF5gH0";
const LEARNED_IDEMPOTENCY_KEY: &str = "idem-7f3c9a2e-51b4-4c1d-9e8f-2a6b0c4d8e1f";

fn send_learned(d: &Daemon, phase: &str) {
    crate::harness::run_python(
        "send_learned.py",
        &[
            "--endpoint",
            &d.http_url(),
            "--secret",
            LEARNED_SECRET,
            "--idempotency-key",
            LEARNED_IDEMPOTENCY_KEY,
            "--phase",
            phase,
        ],
    );
}

/// Every byte under `dir`, files concatenated.
fn body_of<'a>(logs: &'a [serde_json::Map<String, Value>], tenant: &str, starts: &str) -> &'a str {
    logs.iter()
        .filter(|r| r["tenant"] == tenant)
        .filter_map(|r| r["body"].as_str())
        .find(|b| b.starts_with(starts))
        .unwrap_or_else(|| panic!("no {tenant} log body starting {starts:?} in {logs:?}"))
}

/// A secret removed where it stands in context is removed when it comes again bare in a later
/// batch of the same tenant, and kept in another tenant's; the raw idempotency key, hashed in
/// its attribute, is removed where the executor echoes it (tool arguments, status message,
/// log body) and reaches no table, the journal, the daemon's log or `/metrics`.
#[test]
fn a_secret_seen_in_context_is_removed_bare_in_later_batches_of_its_tenant_only() {
    let mut d = Daemon::start();
    send_learned(&d, "both");
    // Two values learned, both acme's (the secret and the raw key), and nothing forgotten:
    // the gauges are refreshed every second.
    let bytes = (LEARNED_SECRET.len() + LEARNED_IDEMPOTENCY_KEY.len()) as f64;
    wait_for("the learned values' gauges", || {
        (d.metric("toolwatch_protect_learned_values") == Some(2.0)
            && d.metric("toolwatch_protect_learned_bytes") == Some(bytes))
        .then_some(())
    });
    for reason in ["limit", "ttl"] {
        let sample = format!("toolwatch_protect_learned_forgotten_total{{reason=\"{reason}\"}}");
        assert_eq!(d.metric(&sample), Some(0.0), "{sample}");
    }
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    let spans = read_table_python("duckdb", &d.data_dir, "spans");
    let logs = read_table_python("duckdb", &d.data_dir, "logs");
    let requests = read_table_python("duckdb", &d.data_dir, "requests");
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(logs.len(), 3, "{logs:?}");
    let span = &spans[0];
    // As the SDK sent it (Python's spacing), less the learned value.
    assert_eq!(
        span["tool_arguments"],
        r#"{"order": "A-1", "previous_attempt": "[REDACTED:learned:idempotency_key]"}"#
    );
    assert_eq!(
        span["status_message"],
        "retry of [REDACTED:learned:idempotency_key] failed"
    );
    let attributes = span["attributes"].as_str().expect("attributes");
    assert!(
        attributes.contains("aws_secret_access_key=[REDACTED:aws_secret_access_key]"),
        "{attributes}"
    );
    assert_eq!(
        body_of(&logs, "acme", "{"),
        r#"{"k": "[REDACTED:learned:aws_secret_access_key]"}"#
    );
    assert_eq!(
        body_of(&logs, "acme", "idempotency"),
        "idempotency key [REDACTED:learned:idempotency_key] reused"
    );
    // Learned values never cross tenants: globex's record is stored as sent.
    assert_eq!(
        body_of(&logs, "globex", "{"),
        format!(r#"{{"k": "{LEARNED_SECRET}"}}"#)
    );

    for (what, text) in [
        ("spans", serde_json::to_string(&spans).expect("json")),
        ("requests", serde_json::to_string(&requests).expect("json")),
        ("the daemon's log", d.log_text()),
        ("/metrics", metrics.clone()),
    ] {
        assert!(!text.contains(LEARNED_SECRET), "{what} holds the secret");
        assert!(
            !text.contains(LEARNED_IDEMPOTENCY_KEY),
            "{what} holds the idempotency key"
        );
    }
    let acme_logs: Vec<_> = logs.iter().filter(|r| r["tenant"] == "acme").collect();
    let acme_logs = serde_json::to_string(&acme_logs).expect("json");
    assert!(!acme_logs.contains(LEARNED_SECRET));
    assert!(!serde_json::to_string(&logs)
        .expect("json")
        .contains(LEARNED_IDEMPOTENCY_KEY));
    let journal = all_bytes(&d.data_dir.join("journal"));
    assert!(!journal.is_empty());
    assert!(
        !contains(&journal, LEARNED_IDEMPOTENCY_KEY),
        "the journal holds the key"
    );
    assert!(
        !contains(&journal, &format!("aws_secret_access_key={LEARNED_SECRET}")),
        "the journal holds the secret in context"
    );
    let learned = |rule: &str| {
        crate::harness::metric_text(
            &metrics,
            &format!("toolwatch_redactions_total{{rule=\"learned:{rule}\"}}"),
        )
    };
    assert_eq!(learned("aws_secret_access_key"), Some(1.0));
    assert_eq!(learned("idempotency_key"), Some(3.0));
}

/// What a restart promises: learned values live in memory only, so a restart forgets them. The
/// secret is still removed where it stands in context; a bare sighting after the restart is
/// stored as sent (schemas/redaction-rules.md, "Learned values").
#[test]
fn learned_values_are_forgotten_at_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    let opts = || crate::harness::DaemonOptions {
        data_dir: Some(data_dir.clone()),
        ..Default::default()
    };
    let mut d = Daemon::start_with(opts());
    send_learned(&d, "context");
    d.stop();
    let mut d = Daemon::start_with(opts());
    send_learned(&d, "bare");
    d.stop();
    let spans = read_table_python("duckdb", &data_dir, "spans");
    let logs = read_table_python("duckdb", &data_dir, "logs");
    assert_eq!(spans.len(), 1);
    let attributes = spans[0]["attributes"].as_str().expect("attributes");
    assert!(
        attributes.contains("[REDACTED:aws_secret_access_key]"),
        "{attributes}"
    );
    assert!(!attributes.contains(LEARNED_SECRET));
    assert_eq!(
        body_of(&logs, "acme", "{"),
        format!(r#"{{"k": "{LEARNED_SECRET}"}}"#)
    );
}

/// A private key block of five base64 lines (not a key: the lines are generated), and its
/// lines.
fn key_block() -> (String, Vec<String>) {
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let lines: Vec<String> = (0..5)
        .map(|i| {
            let tail: String = (1..64)
                .map(|j| char::from(B64[(i * 97 + j * 31 + 11) % 64]))
                .collect();
            format!("M{tail}")
        })
        .collect();
    let block = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----",
        lines.join("\n")
    );
    (block, lines)
}

/// Occurrences of `needle` in `hay`, overlapping ones included.
fn occurrences(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

/// Each kind of secret is learned as the secret itself, not its surroundings: seen bare
/// later in a log record, a span event and a resource attribute of the same tenant (official
/// Python SDK), it is in no table, the journal, the daemon's log or `/metrics`; another
/// tenant's record of the same value is kept as sent.
#[test]
fn every_kind_of_secret_seen_bare_again_is_removed_in_every_signal_of_its_tenant() {
    let (block, lines) = key_block();
    // (where the secret stands first, the secrets it teaches)
    let one = |context: &str, secret: &str| (context.to_string(), vec![secret.to_string()]);
    let mut kinds: Vec<(String, Vec<String>)> = vec![
        one(
            "db at postgres://app:Pg7vQ2xLm9Zt@db.internal:5432/orders",
            "Pg7vQ2xLm9Zt",
        ),
        one(
            "cloning https://deploy:Hx4kW8pQ2nVr@git.example.com/repo.git",
            "Hx4kW8pQ2nVr",
        ),
        one(
            "curl -H 'Authorization: Bearer tK9mQ2vX7pL4wR8zN3bC6d' https://api.example.com",
            "tK9mQ2vX7pL4wR8zN3bC6d",
        ),
        one(
            "Server=db;User Id=sa;Password=Wq8rT3yU6iO9;",
            "Wq8rT3yU6iO9",
        ),
        one("export DB_PASSWORD=Zr8tY2uI5oP7", "Zr8tY2uI5oP7"),
        one(
            &format!("wrote ~/.aws/credentials: aws_secret_access_key={LEARNED_SECRET}"),
            LEARNED_SECRET,
        ),
        // Read by position or from a comment (issue 36's shapes).
        one(
            "requests.get(url, auth=('bob', 'Ab7uK2pL9qWx'))",
            "Ab7uK2pL9qWx",
        ),
        one(
            "htpasswd -b /etc/nginx/.htpasswd admin Fj3kP8sQ2wXe",
            "Fj3kP8sQ2wXe",
        ),
        one("redis-cli -h cache -a Rn5tY8uQ3wEz ping", "Rn5tY8uQ3wEz"),
        one("# AMQP_PASSWORD = qorvendix", "qorvendix"),
        // Credentials nobody had named before (probe lines of issue 36); a command's
        // arguments as an array, the flag and its value in items of their own.
        one(
            r#"{"command": "psql", "args": ["-U", "app", "--password", "Gt5rE2wQ8yUi"]}"#,
            "Gt5rE2wQ8yUi",
        ),
        one("Kennwort: Lq8vN3xR7tZp", "Lq8vN3xR7tZp"),
        one(
            "machine api.example.com login bob password Mw4nB8vC2xQz",
            "Mw4nB8vC2xQz",
        ),
        one(
            "echo Tz6yH1gF5dSa | docker login -u bob --password-stdin registry.example.com",
            "Tz6yH1gF5dSa",
        ),
        one(
            "SET PASSWORD FOR 'app'@'%' = 'Ku3jM7nB4vCx';",
            "Ku3jM7nB4vCx",
        ),
    ];
    kinds.push((
        format!("cat id_rsa\n{block}\n"),
        lines.iter().cloned().chain([lines.concat()]).collect(),
    ));
    let secrets: Vec<String> = kinds.iter().flat_map(|(_, s)| s.clone()).collect();
    let contexts: Vec<&String> = kinds.iter().map(|(c, _)| c).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let plan = dir.path().join("plan.json");
    std::fs::write(
        &plan,
        json!({ "contexts": contexts, "secrets": secrets }).to_string(),
    )
    .expect("write plan");

    let mut d = Daemon::start();
    let sent: Value = serde_json::from_str(&crate::harness::run_python(
        "send_resighted.py",
        &[
            "--endpoint",
            &d.http_url(),
            "--plan",
            plan.to_str().expect("utf-8 path"),
        ],
    ))
    .expect("sender output");
    assert_eq!(sent["acme_spans"], kinds.len() + 2 * secrets.len());
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    let spans = read_table_python("duckdb", &d.data_dir, "spans");
    let logs = read_table_python("duckdb", &d.data_dir, "logs");
    let requests = read_table_python("duckdb", &d.data_dir, "requests");
    assert_eq!(spans.len(), kinds.len() + 2 * secrets.len());
    assert_eq!(logs.len(), 2 * secrets.len());
    let row = |r: &serde_json::Map<String, Value>| serde_json::to_string(r).expect("row");
    // Where each secret stood first, only the secret went: the URL keeps its host.
    let outputs: Vec<String> = spans.iter().map(row).collect();
    assert!(
        outputs.iter().any(|r| r
            .contains("postgres://app:[REDACTED:url_userinfo_password]@db.internal:5432/orders")),
        "{outputs:?}"
    );
    let acme: Vec<String> = spans
        .iter()
        .chain(&logs)
        .filter(|r| r["tenant"] == "acme")
        .map(row)
        .collect();
    assert_eq!(acme.len(), kinds.len() + 3 * secrets.len());
    for secret in &secrets {
        for r in &acme {
            assert!(
                !r.contains(secret.as_str()),
                "{secret} in an acme row: {r:.400}"
            );
        }
        for (what, text) in [
            ("requests", serde_json::to_string(&requests).expect("json")),
            ("the daemon's log", d.log_text()),
            ("/metrics", metrics.clone()),
        ] {
            assert!(!text.contains(secret.as_str()), "{secret} in {what}");
        }
    }
    // Every bare sighting was removed as a learned value (bare, nothing else would remove
    // them): each of the 3 sightings of each secret.
    let learned_rows = acme
        .iter()
        .filter(|r| r.contains("[REDACTED:learned:"))
        .count();
    assert_eq!(learned_rows, 3 * secrets.len());
    // globex learned nothing: its records are as sent.
    let mut globex: Vec<&str> = logs
        .iter()
        .filter(|r| r["tenant"] == "globex")
        .filter_map(|r| r["body"].as_str())
        .collect();
    globex.sort_unstable();
    let mut expected: Vec<String> = secrets
        .iter()
        .map(|s| json!({ "k": s }).to_string().replace("\":\"", "\": \""))
        .collect();
    expected.sort_unstable();
    assert_eq!(globex, expected);
    // The journal holds each secret only where globex's records hold it.
    let journal = all_bytes(&d.data_dir.join("journal"));
    for secret in &secrets {
        let in_globex: usize = expected
            .iter()
            .map(|b| occurrences(b.as_bytes(), secret))
            .sum();
        assert_eq!(
            occurrences(&journal, secret),
            in_globex,
            "{secret} in the journal beyond globex's records"
        );
    }
}
