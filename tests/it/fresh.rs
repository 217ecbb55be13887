//! Freshness: while the daemon serves on its defaults (files complete after 5 minutes),
//! `toolwatch query` and `toolwatch trace` ask it for copies of what it buffers and read them
//! beside the files, so what it acknowledged is read at once and no file is written for it;
//! `--flush` has it write the buffers out first; `--no-flush` reads the disk as it is. The
//! copies carry protected rows only; the flush answer and the address file carry no data.

use std::path::Path;

use serde_json::Value;

use crate::harness::{
    loadgen, metric_at, parquet_files, toolwatch, trace_json, trace_nodes, wait_for, Daemon,
    DaemonOptions,
};
use crate::protect_e2e::{assert_clean, canary_request};

fn query(data: &Path, extra: &[&str], sql: &str) -> Vec<Value> {
    let out = toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(data)
        .args(extra)
        .args(["--format", "json", sql])
        .output()
        .expect("run toolwatch query");
    assert!(
        out.status.success(),
        "query failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "no warning expected: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON rows")
}

fn count(data: &Path, extra: &[&str], sql: &str) -> u64 {
    query(data, extra, sql)
        .first()
        .and_then(|r| r["n"].as_u64())
        .expect("a count")
}

async fn post(url: &str, body: Option<&Value>) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut req = client.post(url);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.expect("post");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_acknowledged_is_read_at_once_while_serving() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            ("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "300ms".into()),
            ("TOOLWATCH_ARCHIVE__COMPACT_EVERY".into(), "0s".into()),
        ],
        ..Default::default()
    });
    let data = d.data_dir.clone();
    let address_file = std::fs::read_to_string(data.join("state/admin.addr")).expect("address");
    assert_eq!(address_file.trim(), d.admin.to_string());
    let (canary_spans, canary_logs) =
        canary_request("0af7651916cd43dd8448eb211c80319d", "canary-fresh");
    assert_eq!(
        post(&format!("{}/v1/traces", d.http_url()), Some(&canary_spans))
            .await
            .0,
        200
    );
    assert_eq!(
        post(&format!("{}/v1/logs", d.http_url()), Some(&canary_logs))
            .await
            .0,
        200
    );
    let target = d.grpc_url();
    let admin = d.admin;
    tokio::task::spawn_blocking(move || {
        let sent = loadgen(&[
            "--target", &target, "--requests", "30", "--tenants", "2", "--seed", "71",
        ]);
        let spans = sent["spans"].as_u64().expect("spans sent") + 1;
        // Nothing completed yet on disk: the files wait for their age (5 minutes).
        assert_eq!(
            count(&data, &["--no-flush"], "SELECT count(*) AS n FROM spans"),
            0
        );
        assert!(parquet_files(&data, "spans").is_empty());
        // A query reads copies of the daemon's buffers: every span, once, and still no file.
        let sql = "SELECT count(*) AS n FROM spans";
        assert_eq!(count(&data, &[], sql), spans);
        assert_eq!(
            count(&data, &[], "SELECT count(DISTINCT trace_id || span_id) AS n FROM spans"),
            spans
        );
        assert_eq!(
            count(
                &data,
                &[],
                "SELECT count(*) AS n FROM logs WHERE trace_id = '0af7651916cd43dd8448eb211c80319d'"
            ),
            1
        );
        assert!(parquet_files(&data, "spans").is_empty(), "copies, not files");

        // A request's spans at once; its summary once the quiet period has passed.
        let id = query(
            &data,
            &[],
            "SELECT request_id FROM spans WHERE request_id LIKE 'req-%' ORDER BY request_id LIMIT 1",
        )[0]["request_id"]
            .as_str()
            .expect("a request id")
            .to_string();
        let out = trace_json(&data, &id);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let view: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!(view["request_id"], id.as_str());
        let traces: Vec<String> = view["trace_ids"]
            .as_array()
            .expect("trace ids")
            .iter()
            .map(|t| format!("'{}'", t.as_str().expect("an id")))
            .collect();
        let in_traces = format!(
            "SELECT count(*) AS n FROM spans WHERE trace_id IN ({})",
            traces.join(", ")
        );
        assert_eq!(trace_nodes(&view["spans"]), count(&data, &[], &in_traces));
        assert!(trace_nodes(&view["spans"]) > 1);
        let summaries = wait_for("every request summarized and readable", || {
            let n = count(
                &data,
                &[],
                "SELECT count(DISTINCT request_id) AS n FROM requests WHERE request_id LIKE 'req-%'",
            );
            (n >= 30).then_some(n)
        });
        assert_eq!(summaries, 30);
        assert!(parquet_files(&data, "spans").is_empty() && parquet_files(&data, "requests").is_empty());

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let sample = |name: &str| metric_at(admin, name).unwrap_or(0.0);
        // The copies themselves: every span in them, protected (the canaries are gone from
        // every value of every row, and from the body's bytes as sent).
        let copied = "toolwatch_archive_reader_copy_seconds_count{outcome=\"copied\"}";
        let copies_before = sample(copied);
        assert!(copies_before >= 5.0, "the reads above took copies: {copies_before}");
        let body = rt.block_on(async {
            let r = reqwest::get(format!("http://{admin}/v1/archive/buffered")).await.expect("get");
            assert_eq!(r.status().as_u16(), 200);
            r.bytes().await.expect("body")
        });
        assert_eq!(sample(copied), copies_before + 1.0);
        assert_clean(&String::from_utf8_lossy(&body), "the buffered rows' body");
        let set = toolwatch::archive::write::snapshot::BufferedSet::decode(body).expect("a body");
        let mut rows_in = std::collections::BTreeMap::<String, u64>::new();
        let mut text = String::new();
        for f in &set.files {
            let table = f.entry.path.split('/').next().expect("table").to_string();
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f.data.clone())
                .expect("a Parquet file")
                .build()
                .expect("reader");
            let batches: Vec<_> = reader.map(|b| b.expect("batch")).collect();
            let n: usize = batches.iter().map(|b| b.num_rows()).sum();
            assert_eq!(n as u64, f.entry.rows, "{}", f.entry.path);
            *rows_in.entry(table).or_default() += n as u64;
            text.push_str(&arrow::util::pretty::pretty_format_batches(&batches).expect("text").to_string());
        }
        assert_eq!(rows_in.get("spans"), Some(&spans));
        // The loadgen runs and the canary request.
        assert_eq!(rows_in.get("requests"), Some(&31));
        assert!(text.contains("canary-fresh"), "the rows are there in full");
        assert_clean(&text, "the buffered rows' values");

        // --flush writes the buffers out first: then the files alone hold every span, and a
        // read with copies still counts each once.
        assert_eq!(count(&data, &["--flush"], sql), spans);
        assert!(!parquet_files(&data, "spans").is_empty());
        assert_eq!(count(&data, &["--no-flush"], sql), spans);
        assert_eq!(count(&data, &[], sql), spans);
        // Flushes are one file per partition at most, not one per query: nothing new to write.
        let files = parquet_files(&data, "spans").len();
        assert_eq!(count(&data, &["--flush"], sql), spans);
        assert_eq!(parquet_files(&data, "spans").len(), files);

        // The flush answer names journal positions, never data. Each request is timed, and
        // each writer's writing out for it: one more of each.
        let timed = [
            "toolwatch_archive_reader_flush_seconds_count{outcome=\"flushed\"}",
            "toolwatch_archive_reader_flush_write_seconds_count{writer=\"spans_logs\"}",
            "toolwatch_archive_reader_flush_write_seconds_count{writer=\"requests\"}",
            "toolwatch_archive_reader_flush_write_seconds_count{writer=\"alarms\"}",
        ];
        let before: Vec<f64> = timed.iter().map(|m| sample(m)).collect();
        assert!(before[0] >= 1.0, "the queries above flushed: {before:?}");
        let (status, body) = rt.block_on(post(&format!("http://{admin}/v1/archive/flush"), None));
        assert_eq!(status, 200, "{body}");
        let after: Vec<f64> = timed.iter().map(|m| sample(m)).collect();
        let more: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(more, vec![1.0; 4], "{timed:?}: {before:?} then {after:?}");
        let answer: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(answer["flushed"], true);
        // Every writer answers: the archive's (one per `[pipeline] workers`: `spans_logs`,
        // then `spans_logs.1`, ...), then the summaries' and the alarms'.
        let writers: Vec<(String, bool)> = answer["writers"]
            .as_array()
            .expect("writers")
            .iter()
            .map(|w| (w["writer"].as_str().unwrap_or("").to_string(), w["flushed"] == true))
            .collect();
        let archive = writers.len() - 2;
        let mut expected: Vec<(String, bool)> = (0..archive)
            .map(|i| match i {
                0 => ("spans_logs".to_string(), true),
                i => (format!("spans_logs.{i}"), true),
            })
            .collect();
        expected.extend([("requests".to_string(), true), ("alarms".to_string(), true)]);
        assert!(archive >= 1, "{writers:?}");
        assert_eq!(writers, expected);
        assert_clean(&body, "the flush answer");
        assert_clean(&address_file, "the address file");
    })
    .await
    .expect("checks");
    d.stop();
    assert!(
        !d.data_dir.join("state/admin.addr").exists(),
        "the address file goes with the daemon"
    );
    assert_clean(&d.log_text(), "the daemon's log");
}
