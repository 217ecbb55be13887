//! The OTLP export, end to end: a second toolwatch is the downstream receiver. What the first
//! archives arrives there with the same ids and values, no planted secret reaches it (nor the
//! journal on either side), and a downstream outage loses nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::harness::{free_addr, loadgen, read_table_python, wait_for, Daemon, DaemonOptions};
use crate::monitoring::write_file;
use crate::otlp_json::post_accepted;
use crate::protect_e2e::{assert_clean, canary_request};

/// Columns that legitimately differ downstream: the downstream's own redaction record (it sees
/// already-redacted text), attributes (toolwatch adds `toolwatch.tenant` and
/// `toolwatch.redactions`, and the hash travels as an attribute), and the hash column
/// (compared against that attribute instead).
const DIFFERENT: [&str; 3] = ["redactions", "attributes", "idempotency_key_hash"];

fn upstream_config(dir: &Path, url: &str, protocol: &str) -> PathBuf {
    write_file(
        dir,
        "upstream.toml",
        &format!(
            r#"
[[export.endpoints]]
name = "downstream"
url = "{url}"
protocol = "{protocol}"
max_batch_items = 200
initial_backoff = "100ms"
max_backoff = "500ms"
"#
        ),
    )
}

fn rows_by_id(data_dir: &Path, table: &str, key: &[&str]) -> BTreeMap<String, Map<String, Value>> {
    let mut out = BTreeMap::new();
    for row in read_table_python("duckdb", data_dir, table) {
        let id: Vec<String> = key
            .iter()
            .map(|k| row.get(*k).map(|v| v.to_string()).unwrap_or_default())
            .collect();
        let previous = out.insert(id.join("/"), row);
        assert!(previous.is_none(), "a row twice in {}", data_dir.display());
    }
    out
}

fn attributes(row: &Map<String, Value>) -> Map<String, Value> {
    let text = row["attributes"].as_str().unwrap_or("{}");
    serde_json::from_str(text).expect("attributes JSON")
}

/// Every upstream row is downstream, with the same values; the downstream carries the tenant
/// and hash toolwatch added as attributes, and otherwise the same attributes.
fn assert_same_rows(
    up: &BTreeMap<String, Map<String, Value>>,
    down: &BTreeMap<String, Map<String, Value>>,
    table: &str,
) {
    let up_ids: BTreeSet<&String> = up.keys().collect();
    let down_ids: BTreeSet<&String> = down.keys().collect();
    assert_eq!(up_ids, down_ids, "{table}: different rows downstream");
    for (id, u) in up {
        let d = &down[id];
        for (col, value) in u {
            if DIFFERENT.contains(&col.as_str()) {
                continue;
            }
            assert_eq!(Some(value), d.get(col), "{table} {id}: column {col}");
        }
        let mut ua = attributes(u);
        let mut da = attributes(d);
        assert_eq!(
            da.remove("toolwatch.tenant"),
            Some(u["tenant"].clone()),
            "{table} {id}: tenant attribute"
        );
        // DuckDB gives a map as an object, or as a list of key/value pairs.
        let fired = match &u["redactions"] {
            Value::Object(m) => !m.is_empty(),
            Value::Array(a) => !a.is_empty(),
            _ => false,
        };
        assert_eq!(
            da.remove("toolwatch.redactions").is_some(),
            fired,
            "{table} {id}: redactions attribute"
        );
        if let Some(hash) = u.get("idempotency_key_hash").filter(|v| !v.is_null()) {
            assert_eq!(
                da.remove("executor.idempotency_key_hash").as_ref(),
                Some(hash),
                "{table} {id}: idempotency key hash"
            );
        }
        ua.remove("toolwatch.tenant");
        // What each instance derives before its own redaction (the downstream drops the
        // upstream's and sees already-redacted text): not compared.
        for derived in [
            "toolwatch.secrets_sent",
            "toolwatch.secrets_returned",
            "toolwatch.confirmation_digest_matches",
        ] {
            ua.remove(derived);
            da.remove(derived);
        }
        assert_eq!(ua, da, "{table} {id}: attributes");
    }
}

/// Raw bytes of every file below `dir` that is not Parquet (journal segments, checkpoints,
/// state), as lossy text, for canary searches.
fn raw_files(dir: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_none_or(|x| x != "parquet") {
                out.push_str(&String::from_utf8_lossy(&std::fs::read(&p).expect("read")));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_toolwatch_receives_what_the_first_archives_and_no_secret() {
    let mut down = Daemon::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = upstream_config(dir.path(), &down.grpc_url(), "grpc");
    let mut up = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let report = loadgen(&[
        "--http",
        "--target",
        &up.http_url(),
        "--requests",
        "120",
        "--tenants",
        "2",
        "--seed",
        "31",
    ]);
    let (spans, logs) = canary_request("4bf92f3577b34da6a3ce929d0e0e4736", "tenant-canary");
    post_accepted(&up, "/v1/traces", &spans).await;
    post_accepted(&up, "/v1/logs", &logs).await;
    // A graceful stop drains the export before it exits.
    up.stop();
    let sent = up.log_text();
    down.stop();

    let span_key = ["trace_id", "span_id"];
    let up_spans = rows_by_id(&up.data_dir, "spans", &span_key);
    let down_spans = rows_by_id(&down.data_dir, "spans", &span_key);
    assert_eq!(
        up_spans.len() as u64,
        report["spans"].as_u64().expect("spans") + 1,
        "upstream archived every acknowledged span"
    );
    assert_same_rows(&up_spans, &down_spans, "spans");
    let log_key = ["time", "trace_id", "span_id", "body"];
    let up_logs = rows_by_id(&up.data_dir, "logs", &log_key);
    let mut down_logs = rows_by_id(&down.data_dir, "logs", &log_key);
    // Findings travel as log records too (the canary request has no stop reason): each names
    // a finding the upstream raised; the rest are the upstream's logs exactly.
    let up_findings: BTreeSet<String> = read_table_python("duckdb", &up.data_dir, "findings")
        .iter()
        .filter_map(|f| f["finding_id"].as_str().map(str::to_string))
        .collect();
    let finding_records: Vec<String> = down_logs
        .iter()
        .filter(|(_, r)| r["event_name"] == "toolwatch.finding")
        .map(|(k, _)| k.clone())
        .collect();
    for key in &finding_records {
        let attrs = attributes(&down_logs[key]);
        let id = attrs["toolwatch.finding.id"].as_str().unwrap_or_default();
        assert!(
            up_findings.contains(id),
            "{id}: a finding the upstream raised"
        );
    }
    let all_down_logs = down_logs.clone();
    down_logs.retain(|k, _| !finding_records.contains(k));
    assert!(up_logs.len() > 1);
    assert_same_rows(&up_logs, &down_logs, "logs");
    let down_logs = all_down_logs;

    for (rows, what) in [
        (&down_spans, "downstream spans"),
        (&down_logs, "downstream logs"),
    ] {
        assert_clean(&serde_json::to_string(rows).expect("json"), what);
    }
    assert_clean(&raw_files(&up.data_dir), "upstream journal and state");
    assert_clean(&raw_files(&down.data_dir), "downstream journal and state");
    assert_clean(&sent, "upstream log");
    assert_clean(&down.log_text(), "downstream log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_outage_loses_nothing() {
    let listen = (free_addr(), free_addr());
    let down_dir = tempfile::tempdir().expect("tempdir");
    let down_data = down_dir.path().join("data");
    let start_down = || {
        Daemon::start_with(DaemonOptions {
            data_dir: Some(down_data.clone()),
            listen: Some(listen),
            ..Default::default()
        })
    };
    let mut down = start_down();
    let config = upstream_config(down_dir.path(), &format!("http://{}", listen.1), "http");
    let mut up = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let send = |seed: &str| {
        loadgen(&[
            "--target",
            &up.grpc_url(),
            "--requests",
            "60",
            "--seed",
            seed,
        ])["spans"]
            .as_u64()
            .expect("spans")
    };
    let mut acked = send("41");
    down.stop();
    acked += send("42");
    // The endpoint is down: the export retries and its lag grows.
    wait_for("export retries while the downstream is down", || {
        up.metric(r#"toolwatch_export_requests_total{endpoint="downstream",outcome="retried"}"#)
            .filter(|&n| n >= 2.0)
    });
    let mut down = start_down();
    acked += send("43");
    up.stop();
    down.stop();
    let key = ["trace_id", "span_id"];
    let up_spans = rows_by_id(&up.data_dir, "spans", &key);
    let down_spans = rows_by_id(&down_data, "spans", &key);
    assert_eq!(up_spans.len() as u64, acked);
    let up_ids: BTreeSet<&String> = up_spans.keys().collect();
    let down_ids: BTreeSet<&String> = down_spans.keys().collect();
    assert_eq!(up_ids, down_ids, "every span reached the downstream once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_go_downstream_too_and_a_restart_resends_what_a_dead_endpoint_did_not_take() {
    let listen = (free_addr(), free_addr());
    let dir = tempfile::tempdir().expect("tempdir");
    let up_data = dir.path().join("up");
    let down_data = dir.path().join("down");
    let mut config = std::fs::read_to_string(upstream_config(
        dir.path(),
        &format!("http://{}", listen.1),
        "http",
    ))
    .expect("config");
    config.push_str(
        "[journal]\nshutdown_deadline = \"2s\"\n[budget.request]\ntool_calls = 2\nrepeated_calls = 0\n",
    );
    let config = write_file(dir.path(), "alarms.toml", &config);
    let start_up = || {
        Daemon::start_with(DaemonOptions {
            data_dir: Some(up_data.clone()),
            config: Some(config.clone()),
            ..Default::default()
        })
    };
    // The downstream is not there yet: the export retries, and a stop gives up after 2 s.
    let mut up = start_up();
    let report = loadgen(&[
        "--target",
        &up.grpc_url(),
        "--requests",
        "20",
        "--seed",
        "51",
    ]);
    wait_for("the export retrying against the missing downstream", || {
        up.metric(r#"toolwatch_export_requests_total{endpoint="downstream",outcome="retried"}"#)
            .filter(|&n| n >= 1.0)
    });
    up.stop();
    assert!(
        up.log_text()
            .contains("consumers did not catch up with the journal in time"),
        "the shutdown deadline was reached"
    );
    // The downstream comes up; the upstream's next start resends from its checkpoint.
    let mut down = Daemon::start_with(DaemonOptions {
        data_dir: Some(down_data.clone()),
        listen: Some(listen),
        ..Default::default()
    });
    let mut up = start_up();
    wait_for("the export to catch up", || {
        up.metric(r#"toolwatch_export_lag_records{endpoint="downstream"}"#)
            .filter(|&n| n == 0.0)
    });
    up.stop();
    down.stop();

    let key = ["trace_id", "span_id"];
    let up_spans = rows_by_id(&up_data, "spans", &key);
    assert_eq!(
        up_spans.len() as u64,
        report["spans"].as_u64().expect("spans")
    );
    let down_spans = rows_by_id(&down_data, "spans", &key);
    let up_ids: BTreeSet<&String> = up_spans.keys().collect();
    let down_ids: BTreeSet<&String> = down_spans.keys().collect();
    assert_eq!(up_ids, down_ids, "every span reached the downstream");
    // Every alarm the upstream archived arrived as a log record naming it.
    let alarm_ids: BTreeSet<String> = read_table_python("duckdb", &up_data, "alarms")
        .iter()
        .map(|r| r["alarm_id"].as_str().expect("alarm_id").to_string())
        .collect();
    assert!(alarm_ids.len() >= 4, "{} alarms", alarm_ids.len());
    let downstream_alarm_ids: BTreeSet<String> = read_table_python("duckdb", &down_data, "logs")
        .iter()
        .filter_map(|r| {
            attributes(r)
                .get("toolwatch.alarm.id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    assert_eq!(alarm_ids, downstream_alarm_ids);
}
