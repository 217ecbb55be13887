//! Freshness: while the daemon serves, what it acknowledged is visible to `toolwatch query`
//! and `toolwatch trace --live` before any file completes, and the completed files plus the
//! live rows never count a row twice, while files keep completing.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::harness::{loadgen, parquet_files, toolwatch, wait_for, Daemon, DaemonOptions};
use crate::protect_e2e::{assert_clean, canary_request};

fn query_live(data: &Path, admin: SocketAddr, sql: &str) -> Output {
    toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(data)
        .arg("--live")
        .arg(admin.to_string())
        .args(["--format", "json", sql])
        .output()
        .expect("run toolwatch query")
}

fn rows_live(data: &Path, admin: SocketAddr, sql: &str) -> Vec<Value> {
    let out = query_live(data, admin, sql);
    assert!(
        out.status.success(),
        "query failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON rows")
}

fn count(data: &Path, admin: SocketAddr, sql: &str) -> u64 {
    rows_live(data, admin, sql)
        .first()
        .and_then(|r| r["n"].as_u64())
        .unwrap_or(0)
}

fn trace_live(data: &Path, admin: SocketAddr, id: &str) -> Output {
    toolwatch()
        .arg("trace")
        .arg("--data-dir")
        .arg(data)
        .arg("--live")
        .arg(admin.to_string())
        .args(["--json", id])
        .output()
        .expect("run toolwatch trace")
}

/// The raw bytes of `GET /v1/live/{table}` (a fresh connection, `Connection: close`).
fn live_bytes(admin: SocketAddr, table: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).expect("connect");
    write!(
        s,
        "GET /v1/live/{table} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("read");
    let at = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers end");
    let head = String::from_utf8_lossy(&all[..at]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    all[at + 4..].to_vec()
}

async fn post_json(d: &Daemon, path: &str, body: &Value) {
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}{path}", d.http_url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_rows_are_queryable_before_any_file_completes() {
    // Defaults (files complete after 5 minutes), a short quiet period for summaries.
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "300ms".into())],
        ..Default::default()
    });
    let (data, admin) = (d.data_dir.clone(), d.admin);
    let sent = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "30",
        "--tenants",
        "2",
        "--seed",
        "71",
    ]);
    let spans = sent["spans"].as_u64().expect("spans sent");
    let (canary_spans, canary_logs) =
        canary_request("0af7651916cd43dd8448eb211c80319c", "canary-live");
    post_json(&d, "/v1/traces", &canary_spans).await;
    post_json(&d, "/v1/logs", &canary_logs).await;
    let spans = spans + 1;

    let blocking = tokio::task::spawn_blocking(move || {
        let n = wait_for("every acknowledged span to be queryable", || {
            let n = count(
                &data,
                admin,
                "SELECT count(*) AS n FROM spans WHERE tenant <> ''",
            );
            (n >= spans).then_some(n)
        });
        assert_eq!(n, spans, "each span once");
        assert!(
            parquet_files(&data, "spans").is_empty(),
            "no file completed yet: the rows came from the daemon's memory"
        );
        let distinct = count(
            &data,
            admin,
            "SELECT count(DISTINCT trace_id || span_id) AS n FROM spans",
        );
        assert_eq!(distinct, spans);
        // Files only: nothing yet.
        let out = toolwatch()
            .arg("query")
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--no-live",
                "--format",
                "json",
                "SELECT count(*) AS n FROM spans",
            ])
            .output()
            .expect("query");
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(rows[0]["n"], 0);

        // One request: its spans at once, its summary after the quiet period.
        let id = rows_live(
            &data,
            admin,
            "SELECT request_id FROM spans WHERE request_id IS NOT NULL ORDER BY request_id LIMIT 1",
        )[0]["request_id"]
            .as_str()
            .expect("a request id")
            .to_string();
        let view: Value = wait_for("trace to show the request with its summary", || {
            let out = trace_live(&data, admin, &id);
            if !out.status.success() {
                return None;
            }
            let v: Value = serde_json::from_slice(&out.stdout).ok()?;
            (!v["summary"].is_null()).then_some(v)
        });
        assert_eq!(view["request_id"], id.as_str());
        let requests = wait_for("every request summarized", || {
            let n = count(
                &data,
                admin,
                "SELECT count(DISTINCT request_id) AS n FROM requests WHERE request_id LIKE 'req-%'",
            );
            (n >= 30).then_some(n)
        });
        assert_eq!(requests, 30);

        // What the live endpoint serves is as protected as the archive.
        for table in ["spans", "logs", "requests"] {
            let bytes = live_bytes(admin, table);
            assert!(!bytes.is_empty());
            assert_clean(
                &String::from_utf8_lossy(&bytes),
                &format!("/v1/live/{table}"),
            );
        }
    });
    blocking.await.expect("checks");
    d.stop();
    assert_clean(&d.log_text(), "the daemon's log");
}

#[test]
fn files_completing_meanwhile_never_double_count() {
    // Small files: buffers keep completing while the reader reads files and live rows.
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            ("TOOLWATCH_ARCHIVE__MAX_FILE_BYTES".into(), "32KiB".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_EVERY".into(), "0s".into()),
        ],
        ..Default::default()
    });
    let (data, admin) = (d.data_dir.clone(), d.admin);
    let target = d.grpc_url();
    let sender = std::thread::spawn(move || {
        let mut spans = 0;
        for seed in 0..6u64 {
            let r = loadgen(&[
                "--target",
                &target,
                "--requests",
                "40",
                "--tenants",
                "3",
                "--seed",
                &(100 + seed).to_string(),
                "--rate",
                "200",
            ]);
            spans += r["spans"].as_u64().expect("spans");
        }
        spans
    });
    let sql = "SELECT count(*) AS n, count(DISTINCT trace_id || span_id) AS d FROM spans";
    let mut reads = 0;
    while !sender.is_finished() {
        let r = rows_live(&data, admin, sql);
        assert_eq!(r[0]["n"], r[0]["d"], "a span seen twice: {r:?}");
        reads += 1;
    }
    let spans = sender.join().expect("sender");
    assert!(reads > 0);
    let n = wait_for("every span queryable", || {
        let r = rows_live(&data, admin, sql);
        assert_eq!(r[0]["n"], r[0]["d"], "a span seen twice: {r:?}");
        let n = r[0]["n"].as_u64()?;
        (n >= spans).then_some(n)
    });
    assert_eq!(n, spans);
    assert!(
        parquet_files(&data, "spans").len() > 1,
        "files completed during the run"
    );
    d.stop();
    let out = toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(&data)
        .args(["--format", "json", sql])
        .output()
        .expect("query");
    let r: Vec<Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        r[0]["n"].as_u64(),
        Some(spans),
        "all in files after the stop"
    );
}
