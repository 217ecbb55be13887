//! Who may write: bearer tokens on both receivers from the official exporters (Python SDK
//! over gRPC and HTTP, Rust `opentelemetry-otlp` with gRPC metadata, loadgen), tenant
//! binding, SIGHUP rotation under load, and no token anywhere it should not be.

use std::collections::BTreeSet;
use std::path::Path;

use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use serde_json::Value;

use crate::harness::{
    all_bytes, assert_readers_agree, contains, loadgen, read_ids, read_table, run_python_env,
    span_keys, toolwatch, wait_for, Daemon, DaemonOptions, SpanKey,
};

const EU_TOKEN: &str = "tw-eu-4f9c2b7e1d8a63509e17";
const SOLO_TOKEN: &str = "tw-solo-8b1e5d3c7a902f64aa31";
const CANARY: &str = "tw-canary-d41d8cd98f00b204e980";
const RETIRED_TOKEN: &str = "tw-retired-77e1c0d9b3a2";

pub fn sha(token: &str) -> String {
    toolwatch::receive::auth::token_sha256(token)
}

fn write_config(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("toolwatch.toml");
    std::fs::write(&path, body).expect("write config");
    path
}

fn two_senders() -> String {
    format!(
        "[auth]\nmode = \"required\"\n\n[[auth.senders]]\nname = \"executor-eu\"\ntoken_sha256 = \"{}\"\ntenants = [\"acme\", \"globex\"]\n\n[[auth.senders]]\nname = \"solo\"\ntoken_sha256 = \"{}\"\ntenants = [\"initech\"]\n\n[[auth.senders]]\nname = \"retired\"\ntoken_sha256 = \"{} until 2020-01-01T00:00:00Z\"\ntenants = [\"acme\"]\n\n[admin]\nopen_metrics = true\n",
        sha(EU_TOKEN),
        sha(SOLO_TOKEN),
        sha(RETIRED_TOKEN)
    )
}

/// One run through the Python exporters with `headers` as OTEL_EXPORTER_OTLP_HEADERS.
fn send(
    protocol: &str,
    endpoint: &str,
    headers: Option<&str>,
    request: &str,
    claim: Option<&str>,
) -> Value {
    let mut args = vec![
        "--protocol",
        protocol,
        "--endpoint",
        endpoint,
        "--request",
        request,
        "--canary",
        CANARY,
    ];
    if let Some(c) = claim {
        args.extend(["--claim", c]);
    }
    let env: Vec<(&str, &str)> = headers
        .map(|h| ("OTEL_EXPORTER_OTLP_HEADERS", h))
        .into_iter()
        .collect();
    serde_json::from_str(&run_python_env("send_auth.py", &args, &env)).expect("sender output")
}

fn results(sent: &Value) -> (String, String) {
    (
        sent["spans"].as_str().unwrap_or("").to_string(),
        sent["logs"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn senders_authenticate_on_both_receivers_and_write_only_their_tenants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &two_senders());
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config.clone()),
        ..Default::default()
    });
    let eu = format!("authorization=Bearer%20{EU_TOKEN}");
    let solo = format!("authorization=Bearer%20{SOLO_TOKEN}");
    let mut sent = Vec::new();
    for protocol in ["grpc", "http"] {
        let endpoint = if protocol == "grpc" {
            d.grpc_url()
        } else {
            d.http_url()
        };
        let refused = ("FAILURE".to_string(), "FAILURE".to_string());
        let none = send(
            protocol,
            &endpoint,
            None,
            &format!("{protocol}-none"),
            Some("acme"),
        );
        assert_eq!(results(&none), refused, "{protocol}: no token");
        let wrong = send(
            protocol,
            &endpoint,
            Some("authorization=Bearer%20tw-eu-not-the-token"),
            &format!("{protocol}-wrong"),
            Some("acme"),
        );
        assert_eq!(results(&wrong), refused, "{protocol}: unknown token");
        let expired = send(
            protocol,
            &endpoint,
            Some(&format!("authorization=Bearer%20{RETIRED_TOKEN}")),
            &format!("{protocol}-expired"),
            Some("acme"),
        );
        assert_eq!(results(&expired), refused, "{protocol}: expired token");
        let header = format!("{eu},x-toolwatch-tenant=globex");
        for (name, headers, claim) in [
            ("globex", eu.as_str(), Some("globex")),
            ("victim", eu.as_str(), Some("victim")),
            ("header", header.as_str(), None),
            ("solo", solo.as_str(), None),
        ] {
            let request = format!("{protocol}-{name}");
            let out = send(protocol, &endpoint, Some(headers), &request, claim);
            assert_eq!(
                results(&out),
                ("SUCCESS".to_string(), "SUCCESS".to_string()),
                "{request}"
            );
            sent.push((request, out));
        }
    }
    for transport in ["grpc", "http"] {
        for reason in ["missing", "unknown_token", "expired_token"] {
            let sample = format!(
                "toolwatch_auth_refused_total{{transport=\"{transport}\",reason=\"{reason}\"}}"
            );
            assert_eq!(
                d.metric(&sample),
                Some(2.0),
                "{sample}: one traces and one logs export"
            );
        }
        for signal in ["traces", "logs"] {
            let sample = format!(
                "toolwatch_otlp_rejected_requests_total{{transport=\"{transport}\",signal=\"{signal}\",reason=\"unauthenticated\"}}"
            );
            assert_eq!(d.metric(&sample), Some(3.0), "{sample}");
        }
    }
    assert_eq!(
        d.metric("toolwatch_tenant_mismatch_total{sender=\"executor-eu\"}"),
        Some(2.0),
        "the two roots claiming victim"
    );
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    let spans = assert_readers_agree(&d.data_dir, "spans");
    assert_eq!(
        spans.len(),
        16,
        "4 runs x 2 spans x 2 protocols, none of the refused"
    );
    for (request, out) in &sent {
        let row = |id: &str| {
            spans
                .iter()
                .find(|r| r["span_id"] == out[id])
                .unwrap_or_else(|| panic!("{request}: {id} archived"))
        };
        let (root, tool) = (row("root"), row("tool"));
        let kind = request.rsplit('-').next().unwrap_or("");
        let (tenant, sender, root_claim, tool_claim) = match kind {
            "globex" => ("globex", "executor-eu", Value::from("globex"), Value::Null),
            "victim" => ("acme", "executor-eu", Value::from("victim"), Value::Null),
            "header" => (
                "globex",
                "executor-eu",
                Value::from("globex"),
                Value::from("globex"),
            ),
            _ => ("initech", "solo", Value::Null, Value::Null),
        };
        for r in [root, tool] {
            assert_eq!(r["tenant"], tenant, "{request}");
            assert_eq!(r["sender"], sender, "{request}");
        }
        assert_eq!(root["claimed_tenant"], root_claim, "{request}: root");
        assert_eq!(tool["claimed_tenant"], tool_claim, "{request}: tool");
    }
    assert!(
        spans.iter().all(|r| r["tenant"] != "victim"),
        "nothing is filed under a tenant the sender may not write"
    );
    let logs = read_table(&d.data_dir, "logs");
    let filed: BTreeSet<(String, String)> = logs
        .iter()
        .map(|l| {
            (
                l["request_id"].as_str().unwrap_or("").to_string(),
                format!(
                    "{}/{}",
                    l["tenant"].as_str().unwrap_or(""),
                    l["sender"].as_str().unwrap_or("")
                ),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = ["grpc", "http"]
        .iter()
        .flat_map(|p| {
            [
                (format!("{p}-globex"), "globex/executor-eu".to_string()),
                (format!("{p}-victim"), "acme/executor-eu".to_string()),
                (format!("{p}-header"), "globex/executor-eu".to_string()),
                (format!("{p}-solo"), "initech/solo".to_string()),
            ]
        })
        .collect();
    assert_eq!(filed, want);
    assert_eq!(logs.len(), 8);

    let alarms = read_table(&d.data_dir, "alarms");
    let binding: Vec<_> = alarms
        .iter()
        .filter(|a| a["budget"] == "tenant_binding")
        .collect();
    assert_eq!(binding.len(), 1, "one episode: {binding:?}");
    let a = binding[0];
    assert_eq!(
        (
            &a["scope"],
            &a["scope_id"],
            &a["tenant"],
            &a["level"],
            &a["reason"]
        ),
        (
            &Value::from("sender"),
            &Value::from("executor-eu"),
            &Value::from("acme"),
            &Value::from("limit"),
            &Value::from("tenant_mismatch")
        )
    );
    assert_eq!(a["request_id"], "grpc-victim");

    // No token, and no token's hash, anywhere toolwatch writes or says anything.
    let bytes = all_bytes(&d.data_dir);
    let log = d.log_text();
    for needle in [
        EU_TOKEN,
        SOLO_TOKEN,
        RETIRED_TOKEN,
        "tw-eu-not-the-token",
        &sha(EU_TOKEN),
        &sha(SOLO_TOKEN),
    ] {
        assert!(!contains(&bytes, needle), "{needle} in the data directory");
        assert!(!log.contains(needle), "{needle} in the daemon log");
        assert!(!metrics.contains(needle), "{needle} in /metrics");
    }
    assert!(
        contains(&bytes, "auth-executor"),
        "the check reads real files"
    );
    let shown = toolwatch()
        .args(["check-config", "--config"])
        .arg(&config)
        .output()
        .expect("check-config");
    assert!(shown.status.success());
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("name = \"executor-eu\""), "{shown}");
    for needle in [&sha(EU_TOKEN), &sha(SOLO_TOKEN)] {
        assert!(
            !shown.contains(needle.as_str()),
            "check-config shows a token hash"
        );
    }
}

#[test]
fn a_daemon_reachable_from_other_machines_without_auth_does_not_start() {
    let out = toolwatch()
        .args([
            "serve",
            "--otlp-http",
            "0.0.0.0:0",
            "--otlp-grpc",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(tempfile::tempdir().expect("tempdir").path())
        .output()
        .expect("run serve");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("auth.mode") && err.contains("listen.otlp_http is 0.0.0.0:0"),
        "{err}"
    );
}

/// A span through the Rust exporter, the token in gRPC metadata; true when the export
/// succeeded.
fn rust_export(endpoint: &str, token: &str, request: &str) -> bool {
    rust_export_with(endpoint, Some(token), None, request)
}

/// [`rust_export`] with an optional token and TLS settings.
pub(crate) fn rust_export_with(
    endpoint: &str,
    token: Option<&str>,
    tls: Option<tonic::transport::ClientTlsConfig>,
    request: &str,
) -> bool {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let _guard = rt.enter();
    let mut metadata = tonic::metadata::MetadataMap::new();
    if let Some(token) = token {
        metadata.insert(
            "authorization",
            format!("Bearer {token}").parse().expect("metadata value"),
        );
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(std::time::Duration::from_secs(5))
        .with_metadata(metadata);
    if let Some(tls) = tls {
        builder = builder.with_tls_config(tls);
    }
    let exporter = builder.build().expect("span exporter");
    let result = std::sync::Arc::new(std::sync::Mutex::new(None));
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(ResultProcessor {
            exporter: std::sync::Mutex::new(exporter),
            result: std::sync::Arc::clone(&result),
        })
        .build();
    let tracer = provider.tracer("rust-executor");
    let mut span = tracer
        .span_builder("execute_tool rotate")
        .with_attributes(vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("executor.request_id", request.to_string()),
        ])
        .start(&tracer);
    span.end();
    let _ = provider.shutdown();
    let ok = result.lock().expect("result").unwrap_or(false);
    ok
}

/// Exports each span as it ends and keeps whether the export succeeded (the SDK's simple
/// processor only logs a failure).
#[derive(Debug)]
struct ResultProcessor {
    exporter: std::sync::Mutex<opentelemetry_otlp::SpanExporter>,
    result: std::sync::Arc<std::sync::Mutex<Option<bool>>>,
}

impl opentelemetry_sdk::trace::SpanProcessor for ResultProcessor {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

    fn on_end(&self, span: opentelemetry_sdk::trace::SpanData) {
        use opentelemetry_sdk::trace::SpanExporter as _;
        let exporter = self.exporter.lock().expect("exporter");
        let r = futures_executor_block_on(exporter.export(vec![span]));
        *self.result.lock().expect("result") = Some(r.is_ok());
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(
        &self,
        _: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

fn futures_executor_block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(f)
}

#[test]
fn tokens_rotate_on_sighup_under_load_and_nothing_acknowledged_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = "tw-rotate-old-0c1f9e22b7";
    let new = "tw-rotate-new-77d3a0e5c4";
    let senders = |hashes: &str| {
        format!(
            "[auth]\nmode = \"required\"\n\n[[auth.senders]]\nname = \"rotating\"\ntoken_sha256 = {hashes}\ntenants = [\"tenant-0\"]\n"
        )
    };
    let config = write_config(dir.path(), &senders(&format!("\"{}\"", sha(old))));
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config.clone()),
        ..Default::default()
    });
    let token_file = dir.path().join("old.token");
    std::fs::write(&token_file, format!("{old}\n")).expect("token file");
    let acked = dir.path().join("acked.txt");
    let target = d.grpc_url();
    let load = {
        let (token_file, acked) = (token_file.clone(), acked.clone());
        std::thread::spawn(move || {
            loadgen(&[
                "--target",
                &target,
                "--requests",
                "1500",
                "--rate",
                "250",
                "--batch",
                "5",
                "--token-file",
                token_file.to_str().expect("utf-8"),
                "--acked-file",
                acked.to_str().expect("utf-8"),
            ])
        })
    };
    let reloads = |d: &Daemon| d.log_text().matches("SIGHUP: senders reloaded").count();
    wait_for("the load to be under way", || {
        (std::fs::metadata(&acked).map(|m| m.len()).unwrap_or(0) > 0).then_some(())
    });
    // Old and new together while the load runs on the old token.
    std::fs::write(
        &config,
        senders(&format!("[\"{}\", \"{}\"]", sha(old), sha(new))),
    )
    .expect("rewrite");
    send_hangup(&d);
    wait_for("the reload", || (reloads(&d) == 1).then_some(()));
    assert!(
        rust_export(&d.grpc_url(), new, "rotated-new"),
        "the new token works at once"
    );
    // A file that does not validate is refused; the senders in force stay.
    std::fs::write(&config, senders("\"not-a-hash\"")).expect("rewrite");
    send_hangup(&d);
    wait_for("the refusal to be logged", || {
        d.log_text()
            .contains("SIGHUP: configuration refused")
            .then_some(())
    });
    assert!(rust_export(&d.grpc_url(), new, "after-bad-file"));
    let report = load.join().expect("loadgen thread");
    assert_eq!(report["failed_batches"], 0, "{report}");
    // The old token goes.
    std::fs::write(&config, senders(&format!("\"{}\"", sha(new)))).expect("rewrite");
    send_hangup(&d);
    wait_for("the second reload", || (reloads(&d) == 2).then_some(()));
    assert!(
        !rust_export(&d.grpc_url(), old, "old-after-rotation"),
        "the old token is refused"
    );
    assert!(rust_export(&d.grpc_url(), new, "new-after-rotation"));
    d.stop();

    let spans = read_table(&d.data_dir, "spans");
    let archived: BTreeSet<SpanKey> = span_keys(&spans).into_iter().collect();
    let acked_ids = read_ids(&acked);
    for id in &acked_ids {
        assert!(archived.contains(id), "acknowledged span {id:?} archived");
    }
    let n = acked_ids.len() as u64;
    assert_eq!(report["spans"].as_u64(), Some(n), "{report}");
    assert!(n > 1000, "{n} spans acknowledged under load");
    let requests: BTreeSet<&str> = spans
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    for r in ["rotated-new", "after-bad-file", "new-after-rotation"] {
        assert!(requests.contains(r), "{r} archived");
    }
    assert!(!requests.contains("old-after-rotation"));
    assert!(spans
        .iter()
        .all(|r| r["sender"] == "rotating" && r["tenant"] == "tenant-0"));
}

fn send_hangup(d: &Daemon) {
    let pid = d.pid();
    // SAFETY: a signal to our own child process.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGHUP);
    }
}
