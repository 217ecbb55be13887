//! `toolwatch scrub`: values archived before a rule existed are removed from every file,
//! atomically for a concurrent reader, recorded in the manifest, and finished after a
//! `kill -9` in the middle.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::logs::{LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{Span as _, SpanKind, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use serde_json::{Map, Value};

use crate::harness::{
    assert_readers_agree, query_n, read_table, toolwatch, verify_archive as verify, wait_for,
    Daemon,
};

/// A credential of a format no built-in rule knows: learned after the fact.
const TOKEN: &str = "zqtok_4f1c2a9b8e7d6c5b4a3f";
/// The rule that knows it, added to the configuration afterwards.
const RULE: &str = r#"
[[redaction.detectors]]
id = "zq_token"
description = "ZQ service tokens"
regex = "zqtok_[0-9a-f]{20}"
"#;
/// One leaked value, removed with `--value-from-stdin`.
const LEAKED: &str = "Tr0ub4dor-and-3-horses";

/// 2026-01-01T23:00:00Z: the three hours sent straddle a date.
const BASE_NS: u64 = 1_767_308_400_000_000_000;
const TENANTS: [&str; 2] = ["acme", "globex"];

fn at(hour: u64, ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH
        + Duration::from_nanos(BASE_NS + hour * 3_600_000_000_000 + ms * 1_000_000)
}

/// Per tenant and hour: six tool calls (the token in the arguments of three, the leaked
/// value in an attribute of one) and a log record holding both, through the Rust SDK.
fn send(d: &Daemon) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let _guard = rt.enter();
    for tenant in TENANTS {
        let resource = Resource::builder()
            .with_service_name("scrub-executor")
            .with_attribute(KeyValue::new("executor.tenant_id", tenant))
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
        let tracer = tracer_provider.tracer("scrub-executor");
        let logger = logger_provider.logger("scrub-executor");
        for hour in 0..3 {
            for j in 0..6u64 {
                let args = if j % 2 == 0 {
                    format!(r#"{{"note":"use {TOKEN} now","n":{j}}}"#)
                } else {
                    format!(r#"{{"n":{j}}}"#)
                };
                let comment = if j == 1 {
                    format!("the code is {LEAKED}")
                } else {
                    "ok".to_string()
                };
                let mut span = tracer
                    .span_builder("execute_tool lookup")
                    .with_kind(SpanKind::Internal)
                    .with_start_time(at(hour, j * 10))
                    .with_attributes(vec![
                        KeyValue::new("gen_ai.operation.name", "execute_tool"),
                        KeyValue::new("gen_ai.tool.name", "lookup"),
                        KeyValue::new("gen_ai.tool.call.id", format!("call_{hour}_{j}")),
                        KeyValue::new("gen_ai.tool.call.arguments", args),
                        KeyValue::new("executor.request_id", format!("req-{tenant}-{hour}-{j}")),
                        KeyValue::new("ticket.comment", comment),
                    ])
                    .start(&tracer);
                span.end_with_timestamp(at(hour, j * 10 + 5));
            }
            let mut record = logger.create_log_record();
            record.set_timestamp(at(hour, 100));
            record.set_severity_number(Severity::Info);
            record.set_body(format!("rotated {TOKEN}; old code {LEAKED}").into());
            logger.emit(record);
        }
        tracer_provider.shutdown().expect("spans sent");
        logger_provider.shutdown().expect("logs sent");
    }
}

/// Text values holding `needle`, per tenant, over every table (identifier columns
/// included: none should hold it).
fn holding(data: &Path, needle: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for table in ["spans", "logs", "requests", "alarms", "findings"] {
        for row in read_table(data, table) {
            let n = row
                .values()
                .filter(|v| v.as_str().is_some_and(|s| s.contains(needle)))
                .count();
            if n > 0 {
                out.push((text(&row, "tenant"), text(&row, "date"), n));
            }
        }
    }
    out.sort();
    out
}

fn text(row: &Map<String, Value>, key: &str) -> String {
    row.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn total(found: &[(String, String, usize)]) -> usize {
    found.iter().map(|(_, _, n)| n).sum()
}

/// Runs `toolwatch scrub` with `args`; (exit code, stdout, stderr).
fn scrub(data: &Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = toolwatch()
        .arg("scrub")
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start scrub");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(v) = stdin {
        writeln!(pipe, "{v}").expect("write stdin");
    }
    drop(pipe);
    let out = child.wait_with_output().expect("scrub");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `toolwatch scrub --config <config> --rule <rule> [extra]`; (exit code, stdout, stderr).
fn scrub_rule(data: &Path, config: &Path, rule: &str, extra: &[&str]) -> (i32, String, String) {
    let config = config.to_str().expect("utf-8");
    let mut args = vec!["--config", config, "--rule", rule];
    args.extend_from_slice(extra);
    scrub(data, &args, None)
}

/// Runs `toolwatch scrub` that stops at `step`, waits for it to get there, kills it.
fn scrub_killed_at(data: &Path, config: &Path, step: &str) {
    let marker = data.join(format!("paused-{step}"));
    let mut child = toolwatch()
        .arg("scrub")
        .arg("--data-dir")
        .arg(data)
        .arg("--config")
        .arg(config)
        // One thread: the kill finds exactly one partition at `step`.
        .args(["--rule", "zq_token", "--threads", "1"])
        .env(
            "_TOOLWATCH_COMPACT_PAUSE",
            format!("{step}:{}", marker.display()),
        )
        .stdout(Stdio::null())
        .spawn()
        .expect("start scrub");
    wait_for(&format!("scrub to reach {step}"), || {
        marker.exists().then_some(())
    });
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    std::fs::remove_file(&marker).expect("marker");
}

/// `select count(*) as n` through `toolwatch query`, from the files alone.
fn count(data: &Path, sql: &str) -> u64 {
    query_n(data, &["--no-flush"], sql)
}

#[test]
fn scrub_removes_values_archived_before_the_rule_existed_through_readers_and_kills() {
    let mut d = Daemon::start();
    send(&d);
    // 2 tenants x 3 hours x (6 spans, 1 log).
    wait_for("36 spans and 6 logs journaled", || {
        let spans = d.metric("toolwatch_received_items_total{signal=\"traces\"}")?;
        let logs = d.metric("toolwatch_received_items_total{signal=\"logs\"}")?;
        (spans as u64 == 36 && logs as u64 == 6).then_some(())
    });
    d.stop();
    let data = d.data_dir.clone();
    let config = data.parent().expect("parent").join("scrub.toml");
    std::fs::write(&config, RULE).expect("config");

    // Before: the token in 3 arguments per tenant and hour, and in each log body.
    let before = holding(&data, TOKEN);
    assert_eq!(total(&before), 2 * 3 * (3 + 1), "{before:?}");
    assert_eq!(total(&holding(&data, LEAKED)), 2 * 3 * 2);
    let spans = count(&data, "select count(*) as n from spans");
    let logs = count(&data, "select count(*) as n from logs");
    assert_eq!((spans, logs), (36, 6));
    assert_eq!(verify(&data), (vec![], 0));

    // A dry run counts without changing anything.
    let (code, out, _) = scrub_rule(&data, &config, "zq_token", &["--dry-run"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("would have removed 24 values from 12 files"),
        "{out}"
    );
    assert_eq!(total(&holding(&data, TOKEN)), 24);

    // Killed with a partition's new folder built, not swapped: nothing changed.
    scrub_killed_at(&data, &config, "built");
    assert_eq!(total(&holding(&data, TOKEN)), 24);
    assert_eq!(verify(&data), (vec![], 0), "a killed scrub before its swap");
    // Killed between a swap and its manifest lines: the one partition is scrubbed, and the
    // lines wait in the work area (until then, verify sees the swap as unrecorded).
    scrub_killed_at(&data, &config, "exchanged");
    assert_eq!(
        total(&holding(&data, TOKEN)),
        21,
        "one spans partition (3 values) swapped"
    );
    let (problems, code) = verify(&data);
    assert_eq!(code, 1);
    assert_eq!(problems.len(), 2, "{problems:?}");

    // The rest, with a reader counting rows throughout: never a row missing or doubled.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, data) = (Arc::clone(&stop), data.clone());
        std::thread::spawn(move || {
            let mut reads = 0u32;
            while !stop.load(Ordering::SeqCst) || reads == 0 {
                assert_eq!(count(&data, "select count(*) as n from spans"), 36);
                assert_eq!(count(&data, "select count(*) as n from logs"), 6);
                reads += 1;
            }
            reads
        })
    };
    let (code, out, err) = scrub_rule(&data, &config, "zq_token", &[]);
    stop.store(true, Ordering::SeqCst);
    let reads = reader.join().expect("the reader saw every row once");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("removed 21 values from 11 files"), "{out}");
    assert!(reads >= 1);
    assert_eq!(holding(&data, TOKEN), vec![]);
    assert_eq!(verify(&data), (vec![], 0), "recovered and recorded");
    // Every removal is counted on its row.
    let removed: i64 = ["spans", "logs"]
        .iter()
        .flat_map(|t| read_table(&data, t))
        .filter_map(|r| r.get("redactions")?.get("zq_token")?.as_i64())
        .sum();
    assert_eq!(removed, 24);
    let spans_rows = assert_readers_agree(&data, "spans");
    assert_eq!(spans_rows.len(), 36);
    assert_eq!(
        spans_rows
            .iter()
            .filter(|r| text(r, "tool_arguments").contains("[REDACTED:zq_token]"))
            .count(),
        18
    );
    let manifests = std::fs::read_dir(data.join("manifest"))
        .expect("manifests")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("read"))
        .collect::<String>();
    assert_eq!(manifests.matches("\"reason\":\"scrub\"").count(), 2 * 12);

    // Scrubbing again finds nothing.
    let (code, out, _) = scrub_rule(&data, &config, "zq_token", &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with("removed 0 values from 0 files"), "{out}");

    // One leaked value from stdin, for one tenant from the second date on.
    let (code, out, err) = scrub(
        &data,
        &[
            "--value-from-stdin",
            "--tenant",
            "acme",
            "--since",
            "2026-01-02",
        ],
        Some(LEAKED),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("removed 4 values from 4 files"), "{out}");
    assert!(!out.contains(LEAKED) && !err.contains(LEAKED));
    assert!(!manifests.contains(LEAKED));
    let left = holding(&data, LEAKED);
    assert_eq!(
        left,
        vec![
            ("acme".to_string(), "2026-01-01".to_string(), 1),
            ("acme".to_string(), "2026-01-01".to_string(), 1),
            ("globex".to_string(), "2026-01-01".to_string(), 1),
            ("globex".to_string(), "2026-01-01".to_string(), 1),
            ("globex".to_string(), "2026-01-02".to_string(), 1),
            ("globex".to_string(), "2026-01-02".to_string(), 1),
            ("globex".to_string(), "2026-01-02".to_string(), 1),
            ("globex".to_string(), "2026-01-02".to_string(), 1),
        ]
    );
    assert_eq!(verify(&data), (vec![], 0));
    assert_eq!(count(&data, "select count(*) as n from spans"), 36);

    // Refused: an unknown rule, a value too short; neither echoes the value.
    let (code, _, err) = scrub(&data, &["--rule", "no_such_rule"], None);
    assert_eq!(code, 2);
    assert!(err.contains("no redaction rule \"no_such_rule\""), "{err}");
    let (code, _, err) = scrub(&data, &["--value-from-stdin"], Some("short"));
    assert_eq!(code, 2);
    assert!(
        err.contains("at least 8") && !err.contains("short\""),
        "{err}"
    );
}

/// Scrub while the daemon writes and compacts the same partitions: every span stays, once,
/// and the manifests account for every file.
#[test]
fn scrub_beside_a_writing_and_compacting_daemon_loses_and_doubles_nothing() {
    let mut d = Daemon::start_with(crate::harness::DaemonOptions {
        env: vec![
            ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "200ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_EVERY".into(), "300ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_AFTER".into(), "1ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_MIN_FILES".into(), "2".into()),
        ],
        ..Default::default()
    });
    let data = d.data_dir.clone();
    // A rule that finds something in every agent run: the agent's name in span names.
    let config = data.parent().expect("parent").join("scrub.toml");
    std::fs::write(
        &config,
        "[[redaction.detectors]]\nid = \"agent_name\"\nregex = \"support-agent\"\n",
    )
    .expect("config");
    let target = d.grpc_url();
    let sender = std::thread::spawn(move || {
        crate::harness::loadgen(&[
            "--target",
            &target,
            "--requests",
            "300",
            "--rate",
            "100",
            "--seed",
            "61",
        ])
    });
    let mut scrubbed_while_writing = 0u32;
    while !sender.is_finished() {
        let (code, out, err) = scrub_rule(&data, &config, "agent_name", &[]);
        // Busy partitions (a file merged while it was rewritten) are scrubbed next round.
        assert!(code == 0 || code == 1, "{code}: {out}{err}");
        eprintln!("while writing: {}", out.trim());
        scrubbed_while_writing += 1;
    }
    let report = sender.join().expect("loadgen");
    let spans = report["spans"].as_u64().expect("spans");
    d.stop();
    let (code, out, err) = scrub_rule(&data, &config, "agent_name", &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(scrubbed_while_writing >= 1);
    assert_eq!(count(&data, "select count(*) as n from spans"), spans);
    assert_eq!(
        count(
            &data,
            "select count(*) as n from (select distinct trace_id, span_id from spans)"
        ),
        spans,
        "no span doubled"
    );
    assert_eq!(holding(&data, "support-agent"), vec![]);
    assert_eq!(verify(&data), (vec![], 0));
}
