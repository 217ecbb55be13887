//! `toolwatch replay`: Collector `file` exporter captures (written here by hand, in each of
//! its formats) into a running daemon; killed part-way and run again, every span archived
//! once; refusals reported with file, message number and reason; secrets in the files
//! reach neither the archive nor the replay's own output and state.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::Value;

use crate::harness::{all_bytes, contains, read_table, toolwatch, Daemon};
use crate::otlp::{attribute, spans_request};

const SECRET: &str = "AKIAQX7Z3K9M2P4V8R6T";
const SPANS_PER_MESSAGE: u64 = 10;

/// One OTLP/JSON traces request (one line of a capture): spans `first..first+n` of their own
/// traces (two spans a trace), the first span carrying the secret.
fn json_line(first: u64, n: u64) -> String {
    let spans: Vec<String> = (first..first + n)
        .map(|i| {
            let secret = if i == first {
                format!(r#",{{"key":"db.statement","value":{{"stringValue":"key={SECRET}"}}}}"#)
            } else {
                String::new()
            };
            format!(
                r#"{{"traceId":"{:032x}","spanId":"{:016x}","name":"call {i}","kind":3,"startTimeUnixNano":"{}","endTimeUnixNano":"{}","attributes":[{{"key":"n","value":{{"intValue":"{i}"}}}}{secret}]}}"#,
                i / 2 + 1,
                i + 1,
                1_767_225_600_000_000_000u64 + i * 1_000,
                1_767_225_600_000_000_000u64 + i * 1_000 + 500,
            )
        })
        .collect();
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"replayed"}}}}]}},"scopeSpans":[{{"scope":{{"name":"capture"}},"spans":[{}]}}]}}]}}"#,
        spans.join(",")
    )
}

/// The same spans as a protobuf request.
fn proto_message(first: u64, n: u64) -> Vec<u8> {
    let spans = (first..first + n)
        .map(|i| Span {
            trace_id: (u128::from(i / 2 + 1)).to_be_bytes().to_vec(),
            span_id: (i + 1).to_be_bytes().to_vec(),
            name: format!("call {i}"),
            kind: 3,
            start_time_unix_nano: 1_767_225_600_000_000_000 + i * 1_000,
            end_time_unix_nano: 1_767_225_600_000_000_000 + i * 1_000 + 500,
            attributes: vec![attribute("n", any_value::Value::IntValue(i as i64))],
            ..Default::default()
        })
        .collect();
    spans_request(vec![], spans).encode_to_vec()
}

/// What the capture holds, for the assertions.
struct Capture {
    spans: u64,
    /// Refusals in `traces.json`: (line, reason fragment).
    refused: Vec<(u64, &'static str)>,
}

/// A Collector capture directory: a rotated gzip JSON-lines file, the live JSON-lines file
/// (with a broken line, a span the daemon refuses, a metrics line and a logs line), and a
/// length-prefixed protobuf file with every other message zstd-compressed.
fn write_capture(dir: &Path) -> Capture {
    let mut next = 0u64;
    let mut lines = |count: u64| -> Vec<String> {
        (0..count)
            .map(|_| {
                let l = json_line(next, SPANS_PER_MESSAGE);
                next += SPANS_PER_MESSAGE;
                l
            })
            .collect()
    };
    // Rotated first (its name sorts before the live file's, as the exporter names them).
    let rotated = lines(300).join("\n") + "\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(rotated.as_bytes()).expect("gzip");
    let gz = gz.finish().expect("gzip");
    std::fs::write(dir.join("traces-2026-12-01T00-00-00.000.json.gz"), gz).expect("write");
    let mut live = lines(100);
    live.insert(
        10,
        format!("{{\"resourceSpans\": [{{\"broken\": \"{SECRET}"),
    );
    live.insert(
        20,
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102","spanId":"0102030405060708","name":"short id"}]}]}]}"#.into(),
    );
    live.insert(30, r#"{"resourceMetrics":[]}"#.into());
    live.insert(
        40,
        format!(
            r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{"timeUnixNano":"1767225600000000000","body":{{"stringValue":"login with {SECRET}"}}}},{{"timeUnixNano":"1767225600000000001","body":{{"stringValue":"b"}}}},{{"timeUnixNano":"1767225600000000002","body":{{"stringValue":"c"}}}}]}}]}}]}}"#
        ),
    );
    std::fs::write(dir.join("traces.json"), live.join("\n") + "\n").expect("write");
    let mut framed = Vec::new();
    for m in 0..40u64 {
        let mut body = proto_message(next, SPANS_PER_MESSAGE);
        next += SPANS_PER_MESSAGE;
        if m % 2 == 1 {
            body = zstd::encode_all(&body[..], 3).expect("zstd");
        }
        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
        framed.extend_from_slice(&body);
    }
    std::fs::write(dir.join("spans.pb"), framed).expect("write");
    Capture {
        spans: next,
        // Lines are numbered from 1.
        refused: vec![(11, "not JSON"), (21, "traceId")],
    }
}

/// Messages done so far over every file's kept progress.
fn messages_done(state: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(state) else {
        return 0;
    };
    entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            // Not the file being written aside (it repeats the one it replaces).
            (path.extension()? == "json").then_some(path)
        })
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| v["messages"].as_u64())
        .sum()
}

#[test]
fn a_replay_killed_part_way_resumes_and_archives_each_span_once() {
    let mut d = Daemon::start();
    let work = tempfile::tempdir().expect("tempdir");
    let capture_dir = work.path().join("capture");
    std::fs::create_dir(&capture_dir).expect("mkdir");
    let capture = write_capture(&capture_dir);
    let state = work.path().join("state");
    let target = d.http_url();
    let replay = || {
        let mut c = toolwatch();
        c.arg("replay")
            .args(["--target", &target, "--tenant", "acme", "--json"])
            .arg("--state-dir")
            .arg(&state)
            .arg(&capture_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    // First run: killed once it is into the gzip file (the files go in path order:
    // spans.pb's 40 messages first).
    let mut first = replay().spawn().expect("replay");
    let deadline = Instant::now() + Duration::from_secs(120);
    while messages_done(&state) < 60 {
        assert!(Instant::now() < deadline, "no progress kept");
        assert!(
            first.try_wait().expect("wait").is_none(),
            "the replay ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    first.kill().expect("kill");
    let killed = first.wait_with_output().expect("wait");
    assert!(!killed.status.success());
    let done_before = messages_done(&state);
    assert!(done_before < 340, "killed in the gzip file: {done_before}");

    // Second run: resumes, finishes, reports the refusals.
    let out = replay().output().expect("replay");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "refusals: exit 1\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("report");
    assert_eq!(report["spans"], capture.spans, "{report}");
    assert_eq!(report["log_records"], 3);
    assert_eq!(report["skipped"], 1);
    assert_eq!(report["refused"], 2);
    assert_eq!(report["stopped"], Value::Null);
    let files = report["files"].as_array().expect("files");
    let names: Vec<&str> = files
        .iter()
        .map(|f| {
            f["path"]
                .as_str()
                .expect("path")
                .rsplit('/')
                .next()
                .expect("name")
        })
        .collect();
    assert_eq!(
        names,
        [
            "spans.pb",
            "traces-2026-12-01T00-00-00.000.json.gz",
            "traces.json"
        ]
    );
    let resumed = files[1]["resumed_after"].as_u64().expect("resumed");
    assert!(resumed > 0 && resumed < 300, "{resumed}");
    assert!(
        stderr.contains(&format!("(resumed after message {resumed})")),
        "{stderr}"
    );
    let refused = files[2]["refused"].as_array().expect("refused");
    assert_eq!(refused.len(), 2);
    for (r, (line, why)) in refused.iter().zip(&capture.refused) {
        assert_eq!(r["message"], *line, "{r}");
        assert!(r["reason"].as_str().expect("reason").contains(why), "{r}");
        assert!(
            stderr.contains(&format!("refused message {line}: ")),
            "{stderr}"
        );
    }
    for f in files {
        assert_eq!(f["finished"], true);
    }

    // A third run has nothing left to send.
    let again = replay().output().expect("replay");
    let report: Value = serde_json::from_slice(&again.stdout).expect("report");
    assert_eq!(report["spans"], capture.spans);
    for f in report["files"].as_array().expect("files") {
        assert_eq!(f["resumed_after"], f["messages"], "{f}");
    }

    d.stop();
    let spans = read_table(&d.data_dir, "spans");
    assert_eq!(spans.len() as u64, capture.spans, "each span archived once");
    let ids: std::collections::HashSet<(&str, &str)> = spans
        .iter()
        .map(|s| {
            (
                s["trace_id"].as_str().expect("t"),
                s["span_id"].as_str().expect("s"),
            )
        })
        .collect();
    assert_eq!(ids.len() as u64, capture.spans);
    assert!(spans.iter().all(|s| s["tenant"] == "acme"));
    let logs = read_table(&d.data_dir, "logs");
    assert_eq!(logs.len(), 3);
    // The secrets in the capture: redacted in the archive, and in none of the replay's output
    // (its refusal reasons quote nothing) nor its kept progress.
    let archived = serde_json::to_string(&(spans, logs)).expect("rows");
    assert!(!archived.contains(SECRET));
    assert!(archived.contains("[REDACTED:aws_access_key_id]"));
    for output in [
        &killed.stdout,
        &killed.stderr,
        &out.stdout,
        &out.stderr,
        &again.stderr,
    ] {
        assert!(
            !contains(output, SECRET),
            "{}",
            String::from_utf8_lossy(output)
        );
    }
    assert!(!contains(&all_bytes(&state), SECRET));
    assert!(!contains(&all_bytes(&d.data_dir), SECRET));
    assert!(!d.log_text().contains(SECRET));
}

#[test]
fn replay_says_what_is_wrong_with_its_arguments_and_a_daemon_that_is_not_there() {
    let work = tempfile::tempdir().expect("tempdir");
    let missing = toolwatch()
        .args(["replay", "--state-dir"])
        .arg(work.path().join("s"))
        .arg(work.path().join("nope.json"))
        .output()
        .expect("replay");
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("nope.json") && err.contains("No such file"),
        "{err}"
    );
    // Nobody listening: it retries for --retry-for, then stops with its progress kept.
    let file = work.path().join("t.json");
    std::fs::write(&file, json_line(0, 2) + "\n").expect("write");
    let port = crate::harness::free_addr().port();
    let out = toolwatch()
        .args(["replay", "--retry-for", "1", "--target"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(work.path().join("s"))
        .arg(&file)
        .output()
        .expect("replay");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("did not take a request") && err.contains("cannot connect"),
        "{err}"
    );
    assert!(err.contains("run the replay again to resume"), "{err}");
    let bad_target = toolwatch()
        .args(["replay", "--target", "127.0.0.1:4318"])
        .arg(&file)
        .current_dir(work.path())
        .output()
        .expect("replay");
    assert_eq!(bad_target.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_target.stderr).contains("http:// or https://"));
}

#[test]
fn a_wrong_target_path_advances_nothing_and_a_rotated_file_keeps_its_progress() {
    let mut d = Daemon::start();
    let work = tempfile::tempdir().expect("tempdir");
    let capture = work.path().join("capture");
    std::fs::create_dir(&capture).expect("mkdir");
    let live = capture.join("traces.json");
    let lines: Vec<String> = (0..3).map(|i| json_line(100 + 2 * i, 2)).collect();
    std::fs::write(&live, lines.join("\n") + "\n").expect("write");
    let state = work.path().join("state");
    let replay = |target: &str| {
        toolwatch()
            .args([
                "replay",
                "--json",
                "--retry-for",
                "5",
                "--tenant",
                "acme",
                "--target",
                target,
            ])
            .arg("--state-dir")
            .arg(&state)
            .arg(&capture)
            .output()
            .expect("replay")
    };
    // The receiver's URL with a signal path: not a refusal of the data, a stop.
    let wrong = replay(&format!("{}/v1/traces", d.http_url()));
    assert_eq!(wrong.status.code(), Some(2));
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.contains("unexpected answer to /v1/traces/v1/traces: HTTP 404"),
        "{err}"
    );
    let report: Value = serde_json::from_slice(&wrong.stdout).expect("report");
    assert_eq!(report["files"][0]["messages"], 0, "nothing advanced");
    let right = replay(&d.http_url());
    assert_eq!(
        right.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
    let report: Value = serde_json::from_slice(&right.stdout).expect("report");
    assert_eq!(report["spans"], 6);
    // The exporter rotates: the file is renamed and a new one begins.
    let rotated = capture.join("traces-2026-12-03T10-00-00.000.json");
    std::fs::rename(&live, &rotated).expect("rotate");
    std::fs::write(&live, json_line(200, 4) + "\n").expect("write");
    let after = replay(&d.http_url());
    assert_eq!(after.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&after.stdout).expect("report");
    let files = report["files"].as_array().expect("files");
    let by_name = |name: &str| {
        files
            .iter()
            .find(|f| f["path"].as_str().is_some_and(|p| p.ends_with(name)))
            .unwrap_or_else(|| panic!("{name}: {report}"))
    };
    let old = by_name("traces-2026-12-03T10-00-00.000.json");
    assert_eq!(
        (old["resumed_after"].as_u64(), old["spans"].as_u64()),
        (Some(3), Some(6))
    );
    let new = by_name("/traces.json");
    assert_eq!(
        (new["resumed_after"].as_u64(), new["spans"].as_u64()),
        (Some(0), Some(4))
    );
    d.stop();
    let spans = read_table(&d.data_dir, "spans");
    assert_eq!(spans.len(), 10, "each span once");
}
