//! `toolwatch loadgen` against the real daemon: the archive holds exactly what loadgen
//! reports as acknowledged, class by class, and no raw idempotency key.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::harness::{loadgen, read_table, Daemon};

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in report {v}"))
}

#[test]
fn archive_counts_equal_what_loadgen_sent() {
    let mut d = Daemon::start();
    let grpc = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "300",
        "--tenants",
        "3",
        "--seed",
        "7",
    ]);
    let http = loadgen(&[
        "--target",
        &d.http_url(),
        "--http",
        "--requests",
        "100",
        "--seed",
        "8",
    ]);
    for r in [&grpc, &http] {
        assert_eq!(n(r, "failed_batches"), 0);
        assert!(n(r, "planted_secrets") > 0);
    }
    assert_eq!(n(&grpc, "requests"), 300);
    assert_eq!(n(&http, "requests"), 100);
    let sum = |k: &str| n(&grpc, k) + n(&http, k);
    assert_eq!(
        d.metric("toolwatch_received_items_total{signal=\"traces\"}"),
        Some(sum("spans") as f64)
    );
    d.stop();

    let spans = read_table(&d.data_dir, "spans");
    assert_eq!(spans.len() as u64, sum("spans"));
    let class_count = |c: &str| spans.iter().filter(|r| r["span_class"] == c).count() as u64;
    assert_eq!(class_count("agent"), sum("agent_spans"));
    assert_eq!(class_count("model"), sum("model_spans"));
    assert_eq!(class_count("tool"), sum("tool_spans"));
    assert_eq!(class_count("downstream"), sum("downstream_spans"));
    let ids: BTreeSet<(&str, &str)> = spans
        .iter()
        .map(|r| {
            (
                r["trace_id"].as_str().unwrap_or(""),
                r["span_id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(ids.len(), spans.len(), "no duplicate spans");
    let traces: BTreeSet<&str> = spans
        .iter()
        .filter_map(|r| r["trace_id"].as_str())
        .collect();
    assert_eq!(traces.len() as u64, sum("requests"));
    let tenants: BTreeSet<&str> = spans.iter().filter_map(|r| r["tenant"].as_str()).collect();
    assert_eq!(
        tenants,
        BTreeSet::from(["tenant-0", "tenant-1", "tenant-2"])
    );
    let services: BTreeSet<&str> = spans
        .iter()
        .filter_map(|r| r["service_name"].as_str())
        .collect();
    assert_eq!(services, BTreeSet::from(["agent-executor", "orders-api"]));

    // Write tools carry idempotency keys: archived as keyed hashes, never raw.
    let hashed = spans
        .iter()
        .filter(|r| r["idempotency_key_hash"].is_string())
        .count();
    let writes = spans
        .iter()
        .filter(|r| r["span_class"] == "tool" && r["effect_class"] != "read")
        .count();
    assert_eq!(hashed, writes);
    assert!(hashed > 0);
    for r in &spans {
        let text = serde_json::to_string(r).expect("json");
        assert!(
            !text.contains("idem-"),
            "raw idempotency key archived: {text}"
        );
    }

    let logs = read_table(&d.data_dir, "logs");
    assert_eq!(logs.len() as u64, sum("log_records"));
    assert!(logs
        .iter()
        .all(|l| l["trace_id"].is_string() && l["policy_decision"].is_string()));
}
