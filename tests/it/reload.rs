//! SIGHUP: new redaction rules in force from a journal record the log names, under load,
//! nothing lost; a configuration that does not compile is refused and the rules in force
//! stay. JSON logs with their field names.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::Value;

use crate::harness::{read_table, wait_for, Daemon, DaemonOptions};
use crate::otlp::{attribute, spans_request, text};
use crate::otlp_json::post;

/// A token the rule added by the reload recognizes (24 lower-case letters and digits, not a
/// run of one character, which detectors skip as a placeholder).
fn token(seq: u64) -> String {
    let mixed = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("acme_tok_{mixed:016x}{:08x}", seq as u32 ^ 0xa5a5_a5a5)
}

/// Request `seq`: one span of its own trace, its note holding the request's token.
fn request(seq: u64) -> Vec<u8> {
    let span = Span {
        trace_id: (u128::from(seq) + 1).to_be_bytes().to_vec(),
        span_id: (seq + 1).to_be_bytes().to_vec(),
        name: "order lookup".into(),
        start_time_unix_nano: 1_767_225_600_000_000_000 + seq,
        end_time_unix_nano: 1_767_225_600_000_000_000 + seq + 1,
        attributes: vec![
            // Named, so no consumer holds it back waiting for its trace's tenant.
            text("executor.tenant_id", "acme"),
            attribute("seq", any_value::Value::IntValue(seq as i64)),
            text("note", &format!("order {}", token(seq))),
        ],
        ..Default::default()
    };
    spans_request(vec![], vec![span]).encode_to_vec()
}

const RULE: &str = r#"
[[redaction.detectors]]
id = "acme_order_token"
description = "ACME order tokens"
regex = 'acme_tok_([a-z0-9]{24})'
group = 1
keywords = ["acme_tok_"]
action = "mask"
"#;

fn hangup(d: &Daemon) {
    // SAFETY: a signal to our own child process.
    unsafe {
        libc::kill(d.pid() as libc::pid_t, libc::SIGHUP);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_redaction_rules_take_effect_at_a_journal_record_under_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolwatch.toml");
    std::fs::write(&config, "[log]\nlevel = \"info\"\n").expect("config");
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config.clone()),
        ..Default::default()
    });
    let url = format!("{}/v1/traces", d.http_url());
    // One sender, one request (one journal record) at a time: journal order is send order.
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut seq = 0;
            while !stop.load(Ordering::SeqCst) {
                let (status, _) = post(&url, "application/x-protobuf", None, request(seq)).await;
                assert_eq!(status, 200, "request {seq}");
                seq += 1;
                acked.store(seq, Ordering::SeqCst);
            }
            seq
        })
    };
    let at_least = |n: u64| {
        let acked = Arc::clone(&acked);
        move || (acked.load(Ordering::SeqCst) >= n).then_some(())
    };
    tokio::task::block_in_place(|| wait_for("100 requests", at_least(100)));
    std::fs::write(&config, format!("[log]\nlevel = \"info\"\n{RULE}")).expect("config");
    hangup(&d);
    let reloaded = "SIGHUP: redaction rules and hashing key reloaded";
    let line = tokio::task::block_in_place(|| {
        wait_for("the reload", || {
            d.log_text()
                .lines()
                .find(|l| l.contains(reloaded))
                .map(str::to_string)
        })
    });
    // The harness runs the daemon with JSON logs: the record number is a field of its own.
    let event: Value = serde_json::from_str(&line).expect("a JSON log line");
    let last_old = event["last_record_under_old_rules"]
        .as_u64()
        .unwrap_or_else(|| panic!("no record number in {line}"));
    let after_reload = acked.load(Ordering::SeqCst);
    tokio::task::block_in_place(|| wait_for("100 more", at_least(after_reload + 100)));
    // A rule that does not compile: refused, the rules in force stay.
    std::fs::write(
        &config,
        format!(
            "[log]\nlevel = \"info\"\n{}",
            RULE.replace("{24})'", "{24}'")
        ),
    )
    .expect("config");
    hangup(&d);
    tokio::task::block_in_place(|| {
        wait_for("the refusal", || {
            d.log_text()
                .contains("SIGHUP: configuration refused; everything in force stays")
                .then_some(())
        })
    });
    let after_refusal = acked.load(Ordering::SeqCst);
    tokio::task::block_in_place(|| wait_for("50 more", at_least(after_refusal + 50)));
    stop.store(true, Ordering::SeqCst);
    let sent = sender.await.expect("sender");
    d.stop();

    // Journal records are numbered from 1, one per request here: requests 0..last_old were
    // protected by the old rules, every later one by the new.
    assert!(
        last_old >= 100 && last_old < sent - 150,
        "{last_old} of {sent}"
    );
    let spans = read_table(&d.data_dir, "spans");
    assert_eq!(spans.len() as u64, sent, "nothing lost");
    let mut seen = vec![false; sent as usize];
    for s in &spans {
        let attributes: Value =
            serde_json::from_str(s["attributes"].as_str().expect("attributes")).expect("json");
        let seq = attributes["seq"].as_u64().expect("seq");
        assert!(!seen[seq as usize], "request {seq} archived once");
        seen[seq as usize] = true;
        let note = attributes["note"].as_str().expect("note");
        if seq < last_old {
            assert_eq!(note, format!("order {}", token(seq)), "request {seq}");
        } else {
            assert_eq!(
                note, "order acme_tok_[REDACTED:acme_order_token]",
                "request {seq}"
            );
        }
    }
}

/// Nanoseconds since the Unix epoch.
fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `n` tool calls of one request (distinct arguments), spans `first..first+n`.
fn tool_calls(first: u64, n: u64) -> Vec<u8> {
    let spans = (first..first + n)
        .map(|i| Span {
            trace_id: vec![9; 16],
            span_id: (i + 1).to_be_bytes().to_vec(),
            name: "execute_tool search".into(),
            start_time_unix_nano: now_ns() + i,
            end_time_unix_nano: now_ns() + i + 1,
            attributes: vec![
                text("gen_ai.operation.name", "execute_tool"),
                text("gen_ai.tool.name", "search"),
                text("gen_ai.tool.call.arguments", &format!("{{\"q\":{i}}}")),
                text("executor.request_id", "req-reload"),
                text("executor.tenant_id", "acme"),
            ],
            ..Default::default()
        })
        .collect();
    spans_request(vec![], spans).encode_to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowered_budgets_fire_at_once_on_sighup_with_the_usage_so_far() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolwatch.toml");
    let budgets = |n: u64| format!("[budget.request]\ntool_calls = {n}\n");
    std::fs::write(&config, budgets(50)).expect("config");
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config.clone()),
        ..Default::default()
    });
    let url = format!("{}/v1/traces", d.http_url());
    let (status, _) = post(&url, "application/x-protobuf", None, tool_calls(0, 10)).await;
    assert_eq!(status, 200);
    let usage = "toolwatch_budget_usage{tenant=\"acme\",scope=\"request\",budget=\"tool_calls\"}";
    let limit = "toolwatch_budget_limit{tenant=\"acme\",scope=\"request\",budget=\"tool_calls\"}";
    tokio::task::block_in_place(|| {
        wait_for("ten calls counted", || {
            (d.metric(usage)? == 10.0).then_some(())
        })
    });
    assert_eq!(d.metric(limit), Some(50.0));
    std::fs::write(&config, budgets(8)).expect("config");
    hangup(&d);
    tokio::task::block_in_place(|| {
        wait_for("the new limit", || (d.metric(limit)? == 8.0).then_some(()))
    });
    assert!(d
        .log_text()
        .contains("SIGHUP: budgets reloaded (usage so far kept)"));
    // The same request goes on: its count did not start again.
    let (status, _) = post(&url, "application/x-protobuf", None, tool_calls(10, 1)).await;
    assert_eq!(status, 200);
    tokio::task::block_in_place(|| {
        wait_for("the eleventh call", || {
            (d.metric(usage)? == 11.0).then_some(())
        })
    });
    d.stop();
    let mut alarms = read_table(&d.data_dir, "alarms");
    // Warning and limit of one jump share a time: warning first, as raised.
    let rank = |level: &Value| {
        ["warning", "limit", "resolved"]
            .iter()
            .position(|l| level == l)
    };
    alarms.sort_by_key(|a| (a["time"].as_i64(), rank(&a["level"])));
    let fired: Vec<(String, String, f64, f64)> = alarms
        .iter()
        .filter(|a| a["budget"] == "tool_calls")
        .map(|a| {
            let text = |c: &str| a[c].as_str().expect(c).to_string();
            let num = |c: &str| a[c].as_f64().expect(c);
            (
                text("level"),
                text("scope_id"),
                num("observed"),
                num("limit_value"),
            )
        })
        .collect();
    let at_reload = |level: &str| (level.to_string(), "req-reload".to_string(), 10.0, 8.0);
    // Fired at the reload, with the ten calls made before it; resolved when the daemon
    // stopped (request usage is not kept across a restart).
    assert_eq!(
        fired[..2],
        [at_reload("warning"), at_reload("limit")],
        "{fired:?}"
    );
    let resolved = ("resolved".to_string(), "req-reload".to_string(), 11.0, 8.0);
    assert_eq!(fired[2..], [resolved], "{fired:?}");
}

#[test]
fn json_logs_keep_their_field_names() {
    // The harness runs the daemon with `log.format = "json"`.
    let mut d = Daemon::start();
    d.stop();
    let text = d.log_text();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 3, "{text}");
    for l in &lines {
        let time = l["timestamp"].as_str().expect("timestamp");
        assert!(chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{time}");
        assert!(time.ends_with('Z'), "UTC: {time}");
        let level = l["level"].as_str().expect("level");
        assert!(
            ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&level),
            "{l}"
        );
        assert!(
            l["target"]
                .as_str()
                .expect("target")
                .starts_with("toolwatch"),
            "{l}"
        );
        assert!(l["message"].is_string(), "{l}");
    }
    let ready = lines
        .iter()
        .find(|l| l["message"] == "toolwatch ready")
        .expect("the ready line");
    for field in ["otlp_grpc", "otlp_http", "admin", "data_dir", "instance_id"] {
        assert!(ready[field].is_string(), "{field}: {ready}");
    }
    assert_eq!(ready["target"], "toolwatch::serve");
}

/// The `seq` attribute of every span a daemon archived.
fn seqs(d: &Daemon) -> Vec<u64> {
    let mut out: Vec<u64> = read_table(&d.data_dir, "spans")
        .iter()
        .map(|s| {
            let attributes: Value =
                serde_json::from_str(s["attributes"].as_str().expect("attributes")).expect("json");
            attributes["seq"].as_u64().expect("seq")
        })
        .collect();
    out.sort_unstable();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_endpoint_moves_on_sighup_away_from_a_dead_one_and_nothing_is_lost_or_sent_twice()
{
    let mut first = Daemon::start();
    let mut second = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolwatch.toml");
    let endpoint = |url: &str| {
        format!(
            "[[export.endpoints]]\nname = \"downstream\"\nurl = \"{url}\"\nprotocol = \"http\"\nmax_batch_items = 20\ninitial_backoff = \"100ms\"\nmax_backoff = \"500ms\"\n"
        )
    };
    std::fs::write(&config, endpoint(&first.http_url())).expect("config");
    let mut up = Daemon::start_with(DaemonOptions {
        config: Some(config.clone()),
        ..Default::default()
    });
    let url = format!("{}/v1/traces", up.http_url());
    let send = |range: std::ops::Range<u64>| {
        let url = url.clone();
        async move {
            for seq in range {
                let (status, _) = post(&url, "application/x-protobuf", None, request(seq)).await;
                assert_eq!(status, 200, "request {seq}");
            }
        }
    };
    let received = "toolwatch_received_items_total{signal=\"traces\"}";
    let has = |d: &Daemon, n: f64| (d.metric(received)? == n).then_some(());
    send(0..100).await;
    tokio::task::block_in_place(|| wait_for("the first 100 downstream", || has(&first, 100.0)));
    // The downstream goes away: what comes next is retried against it...
    first.stop();
    send(100..150).await;
    // ...until the endpoint is moved.
    std::fs::write(&config, endpoint(&second.http_url())).expect("config");
    hangup(&up);
    send(150..200).await;
    tokio::task::block_in_place(|| wait_for("the other 100 at the second", || has(&second, 100.0)));
    assert!(up.log_text().contains(
        "SIGHUP: export endpoint reloaded; what it had not sent goes to the new settings"
    ));
    up.stop();
    // Received exactly once (the counter sees resends that the archive would merge).
    assert_eq!(second.metric(received), Some(100.0));
    second.stop();
    assert_eq!(seqs(&first), (0..100).collect::<Vec<_>>());
    assert_eq!(seqs(&second), (100..200).collect::<Vec<_>>());
}
