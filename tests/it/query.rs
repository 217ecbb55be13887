//! `toolwatch query` and `toolwatch trace` against an archive written by the real daemon from
//! loadgen traffic. Expected answers are computed from the runs loadgen generated (rebuilt
//! with the same seed and start time), not from toolwatch's own output.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;

use crate::harness::{
    loadgen, loadgen_cost, loadgen_runs, toolwatch, wait_for, Daemon, DaemonOptions,
};

const SEED: u64 = 43;
const TENANTS: u32 = 2;
const REQUESTS: u64 = 40;

fn run_query(data: &Path, args: &[&str]) -> Output {
    toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .expect("run toolwatch query")
}

fn query_json(data: &Path, sql: &str) -> Vec<Value> {
    let out = run_query(data, &["--format", "json", sql]);
    assert!(
        out.status.success(),
        "query failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON rows")
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn attr_str<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    match attr(span, key) {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

fn attr_int(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key) {
        Some(any_value::Value::IntValue(i)) => Some(*i),
        _ => None,
    }
}

fn spans_of(run: &toolwatch_cli::loadgen::AgentRun) -> Vec<&Span> {
    run.traces
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .collect()
}

fn date_hour(ns: u64) -> (String, String) {
    let t = chrono::DateTime::from_timestamp_nanos(ns as i64);
    (t.format("%Y-%m-%d").to_string(), t.format("%H").to_string())
}

#[test]
fn query_and_trace_answer_incident_questions_exactly() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            ("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "300ms".into()),
            ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "1s".into()),
        ],
        ..Default::default()
    });
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        &REQUESTS.to_string(),
        "--tenants",
        &TENANTS.to_string(),
        "--seed",
        &SEED.to_string(),
        "--batch",
        "5",
    ]);
    let spans = report["spans"].as_u64().expect("spans");

    // While the daemon runs: a half-written file is never read, and completed files are.
    let partition = std::fs::read_dir(d.data_dir.join("spans"))
        .expect("spans folder")
        .flatten()
        .next()
        .expect("a tenant folder")
        .path();
    std::fs::write(
        partition.join(".part-garbage.parquet.inprogress"),
        b"not parquet at all",
    )
    .expect("plant a partial file");
    wait_for("every span in a completed file", || {
        let n = d.metric("toolwatch_archive_rows_total{table=\"spans\"}")?;
        (n as u64 == spans).then_some(())
    });
    let live = query_json(&d.data_dir, "SELECT count(*) AS n FROM spans");
    assert_eq!(live[0]["n"], spans, "query while serving");
    d.wait_for_complete_summaries(REQUESTS);
    d.stop();

    let runs = loadgen_runs(&report, SEED, TENANTS, REQUESTS);

    // 1. Denied tool calls for a tenant in one hour.
    let mut denied: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for run in &runs {
        for s in spans_of(run) {
            if attr_str(s, "executor.policy_decision") == Some("deny")
                && attr_str(s, "gen_ai.operation.name") == Some("execute_tool")
            {
                let (date, hour) = date_hour(s.start_time_unix_nano);
                *denied
                    .entry((run.expected.tenant.clone(), date, hour))
                    .or_default() += 1;
            }
        }
    }
    let ((tenant, date, hour), expected) = denied
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(k, n)| (k.clone(), *n))
        .expect("some denied calls");
    let got = query_json(
        &d.data_dir,
        &format!(
            "SELECT count(*) AS n FROM spans WHERE tenant = '{tenant}' AND date = '{date}' \
             AND hour = '{hour}' AND span_class = 'tool' AND policy_decision = 'deny'"
        ),
    );
    assert_eq!(got[0]["n"], expected);

    // 2. The most expensive requests.
    let mut costs: Vec<(f64, String)> = runs
        .iter()
        .map(|r| (loadgen_cost(&r.expected), r.expected.request_id.clone()))
        .collect();
    costs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let top = query_json(
        &d.data_dir,
        "SELECT request_id, cost_usd FROM requests ORDER BY cost_usd DESC, request_id LIMIT 3",
    );
    let top_ids: Vec<&str> = top
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    let want: Vec<&str> = costs.iter().take(3).map(|(_, id)| id.as_str()).collect();
    assert_eq!(top_ids, want);
    for (row, (cost, _)) in top.iter().zip(&costs) {
        let got = row["cost_usd"].as_f64().expect("cost");
        assert!((got - cost).abs() < 1e-9, "{got} != {cost}");
    }

    // 3. Tools with the most retries.
    let mut retries: BTreeMap<String, u64> = BTreeMap::new();
    for run in &runs {
        for s in spans_of(run) {
            if attr_int(s, "executor.retry_attempt").unwrap_or(0) > 0 {
                let tool = attr_str(s, "gen_ai.tool.name").unwrap_or_default();
                *retries.entry(tool.to_string()).or_default() += 1;
            }
        }
    }
    let mut want: Vec<(String, u64)> = retries.into_iter().collect();
    want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let got: Vec<(String, u64)> = query_json(
        &d.data_dir,
        "SELECT tool_name, count(*) AS retries FROM spans WHERE retry_attempt > 0 \
         GROUP BY tool_name ORDER BY retries DESC, tool_name",
    )
    .iter()
    .map(|r| {
        (
            r["tool_name"].as_str().unwrap_or_default().to_string(),
            r["retries"].as_u64().unwrap_or(0),
        )
    })
    .collect();
    assert!(!want.is_empty(), "the traffic should include retries");
    assert_eq!(got, want);

    // 4. Progress: a spinner on a terminal (a pty from `script`), nothing when piped.
    let piped = run_query(&d.data_dir, &["SELECT count(*) FROM spans"]);
    assert!(piped.status.success());
    assert!(
        piped.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    let command = format!(
        "{} query --data-dir {} 'SELECT count(*) AS n FROM spans'",
        crate::harness::binary(),
        d.data_dir.display()
    );
    let tty = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("run script(1)");
    assert!(tty.status.success());
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert!(screen.contains("scanning the archive"), "{screen}");
    assert!(screen.contains(&spans.to_string()), "{screen}");

    // 5. CSV and table output, and a clear error for bad SQL.
    let csv = run_query(
        &d.data_dir,
        &[
            "--format",
            "csv",
            "SELECT request_id, tool_calls_by_tool FROM requests ORDER BY request_id LIMIT 1",
        ],
    );
    assert!(csv.status.success());
    let csv = String::from_utf8_lossy(&csv.stdout);
    assert!(
        csv.starts_with(&format!(
            "request_id,tool_calls_by_tool\n{},\"{{",
            runs[0].expected.request_id
        )),
        "{csv}"
    );
    let bad = run_query(&d.data_dir, &["SELECT nope FROM requests"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("No field named nope"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let unknown = run_query(&d.data_dir, &["SELECT * FROM alarms_that_do_not_exist"]);
    assert_eq!(unknown.status.code(), Some(2));

    // 6. `trace` shows the tree of a request with a denied call, by request id and trace id.
    let run = runs
        .iter()
        .find(|r| r.expected.denials > 0)
        .expect("a request with a denial");
    let e = &run.expected;
    let trace = |id: &str, json: bool| {
        let mut cmd = toolwatch();
        cmd.arg("trace").arg("--data-dir").arg(&d.data_dir);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.arg(id).output().expect("run toolwatch trace");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let doc: Value = serde_json::from_str(&trace(&e.request_id, true)).expect("JSON");
    let by_trace: Value = serde_json::from_str(&trace(&e.trace_id, true)).expect("JSON");
    assert_eq!(doc, by_trace, "a trace id finds the same request");
    assert_eq!(doc["request_id"], e.request_id.as_str());
    assert_eq!(doc["trace_ids"], serde_json::json!([e.trace_id]));
    assert_eq!(doc["summary"]["span_count"], e.spans);
    assert_eq!(doc["summary"]["denials"], e.denials);
    let roots = doc["spans"].as_array().expect("roots");
    assert_eq!(roots.len(), 1, "one root: the agent span");
    assert_eq!(roots[0]["class"], "agent");
    assert_eq!(roots[0]["start_offset_ns"], 0);
    let children = roots[0]["children"].as_array().expect("children");
    assert_eq!(children.len() as u64, e.model_turns + e.tool_calls);
    // Children in start order, as generated: the executor's spans after the root.
    let generated: Vec<&Span> = spans_of(run)
        .into_iter()
        .filter(|s| !s.parent_span_id.is_empty() && attr_str(s, "gen_ai.operation.name").is_some())
        .collect();
    assert_eq!(generated.len(), children.len());
    for (node, span) in children.iter().zip(&generated) {
        assert_eq!(node["span_id"], hex::encode(&span.span_id));
        assert_eq!(
            node["start_offset_ns"].as_u64(),
            Some(span.start_time_unix_nano - e.start_ns)
        );
        match attr_str(span, "gen_ai.operation.name") {
            Some("chat") => {
                assert_eq!(node["class"], "model");
                assert_eq!(
                    node["input_tokens"].as_i64(),
                    attr_int(span, "gen_ai.usage.input_tokens")
                );
            }
            Some("execute_tool") => {
                assert_eq!(node["class"], "tool");
                assert_eq!(
                    node["tool_name"],
                    attr_str(span, "gen_ai.tool.name").unwrap_or("")
                );
                let decision = attr_str(span, "executor.policy_decision").unwrap_or("");
                assert_eq!(node["policy_decision"], decision);
                let downstream = node["children"].as_array().map_or(0, Vec::len);
                assert_eq!(downstream, usize::from(decision != "deny"), "{node}");
                let args = node["tool_arguments"].as_str().expect("args");
                assert!(args.chars().count() <= 160, "arguments are shortened");
            }
            other => panic!("unexpected child {other:?}"),
        }
    }
    let text = trace(&e.request_id, false);
    assert!(
        text.starts_with(&format!("request {}\n", e.request_id)),
        "{text}"
    );
    assert!(text.contains("[tool] execute_tool"), "{text}");
    assert!(text.contains("· deny"), "{text}");
    // No sender here sets a status: none is shown (issue 38).
    assert!(!text.contains("unset"), "{text}");
    let with_tenant = toolwatch()
        .args(["trace", "--json", "--tenant", &e.tenant, "--data-dir"])
        .arg(&d.data_dir)
        .arg(&e.request_id)
        .output()
        .expect("run");
    assert!(with_tenant.status.success());
    let with_tenant: Value = serde_json::from_slice(&with_tenant.stdout).expect("JSON");
    assert_eq!(with_tenant, doc);
    let other_tenant = toolwatch()
        .args(["trace", "--tenant", "tenant-nobody", "--data-dir"])
        .arg(&d.data_dir)
        .arg(&e.request_id)
        .output()
        .expect("run");
    assert_eq!(
        other_tenant.status.code(),
        Some(1),
        "another tenant's request is not shown"
    );
    let missing = toolwatch()
        .args(["trace", "--data-dir"])
        .arg(&d.data_dir)
        .arg("req-that-never-was")
        .output()
        .expect("run");
    assert_eq!(missing.status.code(), Some(1));
}

/// A responder scoped to one tenant reads that tenant's rows only: from files, from the rows a
/// running daemon buffers, by `trace`; and SQL cannot reach past the scope.
#[test]
fn a_reader_scoped_to_a_tenant_sees_nothing_of_another() {
    let mut d = Daemon::start();
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "20",
        "--tenants",
        "2",
        "--seed",
        "7",
    ]);
    assert_eq!(report["failed_batches"], 0);
    let total = report["spans"].as_u64().expect("spans");
    wait_for("every span acknowledged to be counted", || {
        (d.metric("toolwatch_received_items_total{signal=\"traces\"}")? as u64 == total)
            .then_some(())
    });
    // While it runs: the rows are still buffered, read as copies.
    let data_dir = d.data_dir.clone();
    let count = |extra: &[&str], sql: &str| -> Vec<Value> {
        let mut args = extra.to_vec();
        args.extend(["--format", "json", sql]);
        let out = run_query(&data_dir, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON rows")
    };
    let per_tenant = count(
        &[],
        "SELECT tenant, count(*) AS n FROM spans GROUP BY tenant ORDER BY tenant",
    );
    assert_eq!(per_tenant.len(), 2, "{per_tenant:?}");
    let n0 = per_tenant[0]["n"].as_u64().expect("n");
    assert_eq!(per_tenant[0]["tenant"], "tenant-0");
    assert_eq!(n0 + per_tenant[1]["n"].as_u64().expect("n"), total);
    let scoped = count(
        &["--tenant", "tenant-0"],
        "SELECT tenant, count(*) AS n FROM spans GROUP BY tenant",
    );
    assert_eq!(
        scoped,
        [serde_json::json!({"tenant": "tenant-0", "n": n0})],
        "buffered rows"
    );
    d.stop();
    let scoped = count(
        &["--tenant", "tenant-0", "--no-flush"],
        "SELECT tenant, count(*) AS n FROM spans GROUP BY tenant",
    );
    assert_eq!(
        scoped,
        [serde_json::json!({"tenant": "tenant-0", "n": n0})],
        "files"
    );
    let none = count(&["--tenant", "nobody"], "SELECT count(*) AS n FROM spans");
    assert_eq!(none, [serde_json::json!({"n": 0})]);
    // SQL that would name a file is refused, whatever the scope.
    let other = d.data_dir.join("spans").join("tenant=tenant-1");
    for sql in [
        format!(
            "CREATE EXTERNAL TABLE x STORED AS PARQUET LOCATION '{}/'",
            other.display()
        ),
        "SET datafusion.execution.batch_size = 10".to_string(),
    ] {
        let out = run_query(&d.data_dir, &["--tenant", "tenant-0", &sql]);
        assert!(!out.status.success(), "{sql}");
    }
    // trace: a request of tenant-1 is not found from tenant-0's scope.
    let req: Vec<Value> = count(
        &["--tenant", "tenant-1"],
        "SELECT request_id FROM spans WHERE request_id IS NOT NULL LIMIT 1",
    );
    let id = req[0]["request_id"]
        .as_str()
        .expect("request id")
        .to_string();
    let found = toolwatch()
        .args(["trace", "--tenant", "tenant-1", "--data-dir"])
        .arg(&d.data_dir)
        .arg(&id)
        .output()
        .expect("trace");
    assert!(
        found.status.success(),
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );
    let hidden = toolwatch()
        .args(["trace", "--tenant", "tenant-0", "--data-dir"])
        .arg(&d.data_dir)
        .arg(&id)
        .output()
        .expect("trace");
    assert!(!hidden.status.success());
    assert!(String::from_utf8_lossy(&hidden.stderr).contains("no request or trace"));
}
