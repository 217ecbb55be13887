//! Request assembly end to end: loadgen's agent runs go in, and the `requests` table holds
//! one `complete` row per run whose counts equal what loadgen generated, read alike by the
//! Rust reader, pyarrow and DuckDB.

use serde_json::Value;

use crate::harness::{
    assert_readers_agree, loadgen, loadgen_cost, loadgen_runs, Daemon, DaemonOptions,
};

const SEED: u64 = 41;
const TENANTS: u32 = 2;
const REQUESTS: u64 = 30;

#[test]
fn every_loadgen_request_is_summarized_once_with_its_counts() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "300ms".into())],
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
        "3",
    ]);
    assert_eq!(report["requests"], REQUESTS);
    // Summaries are written while serving, once each request has been quiet.
    d.wait_for_complete_summaries(REQUESTS);
    d.stop();

    let rows = assert_readers_agree(&d.data_dir, "requests");
    assert_eq!(rows.len() as u64, REQUESTS, "one row per request");
    let runs = loadgen_runs(&report, SEED, TENANTS, REQUESTS);
    for run in &runs {
        let e = &run.expected;
        let row = rows
            .iter()
            .find(|r| r["request_id"] == e.request_id.as_str())
            .unwrap_or_else(|| panic!("no summary for {}", e.request_id));
        let int = |k: &str| row[k].as_i64().unwrap_or(-1);
        assert_eq!(row["tenant"], e.tenant.as_str());
        assert_eq!(row["principal_id"], e.principal_id.as_str());
        assert_eq!(row["trace_ids"], serde_json::json!([e.trace_id]));
        assert_eq!(row["completeness"], "complete");
        assert_eq!(int("summary_version"), 1);
        assert_eq!(int("span_count") as u64, e.spans, "{}", e.request_id);
        assert_eq!(int("orphan_count"), 0);
        assert_eq!(int("model_turns") as u64, e.model_turns);
        assert_eq!(int("tool_calls") as u64, e.tool_calls);
        let by_tool: serde_json::Map<String, Value> = e
            .tool_calls_by_tool
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(*v)))
            .collect();
        assert_eq!(row["tool_calls_by_tool"], Value::Object(by_tool));
        assert_eq!(int("downstream_calls") as u64, e.downstream_calls);
        assert_eq!(int("input_tokens"), e.input_tokens);
        assert_eq!(int("output_tokens"), e.output_tokens);
        assert_eq!(int("cache_read_tokens"), e.cache_read_tokens);
        assert_eq!(int("denials") as u64, e.denials, "{}", e.request_id);
        assert_eq!(
            int("confirmations_requested") as u64,
            e.confirmations_requested
        );
        assert_eq!(int("retries") as u64, e.retries);
        assert_eq!(int("start_time") as u64, e.start_ns);
        assert_eq!(int("end_time") as u64, e.end_ns);
        assert_eq!(int("duration_ns") as u64, e.end_ns - e.start_ns);
        assert_eq!(row["stop_reason"], "completed");
        assert_eq!(int("unpriced_model_turns"), 0);
        let cost = loadgen_cost(e);
        let got = row["cost_usd"].as_f64().expect("cost");
        assert!(
            (got - cost).abs() < 1e-9,
            "{}: {got} != {cost}",
            e.request_id
        );
    }
    let denials: u64 = runs.iter().map(|r| r.expected.denials).sum();
    assert!(denials > 0, "the traffic should include denied calls");
}
