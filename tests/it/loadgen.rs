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
    // Every (trace, span) once, one trace per request.
    assert_eq!(spans_by_trace(&spans).len() as u64, sum("requests"));
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

/// `loadgen --blast` for a fixed number of batches: exactly what it reports acknowledged is
/// archived, each span once; the spans of a request share its trace id.
fn blast(d: &Daemon, tenant_on: &str, batches: u64, per_batch: u64) -> Value {
    let report = loadgen(&[
        "--blast",
        "--target",
        &d.http_url(),
        "--batches",
        &batches.to_string(),
        "--requests-per-batch",
        &per_batch.to_string(),
        "--connections",
        "2",
        "--tenants",
        "3",
        "--tenant-on",
        tenant_on,
    ]);
    assert_eq!(report["mode"], "blast");
    assert_eq!(n(&report, "failed_batches"), 0);
    assert_eq!(n(&report, "rejected_spans"), 0);
    assert_eq!(n(&report, "batches"), batches);
    assert_eq!(n(&report, "requests"), batches * per_batch);
    assert_eq!(n(&report, "spans"), batches * per_batch * 10);
    assert_eq!(n(&report, "tool_spans"), batches * per_batch * 3);
    assert!(n(&report, "planted_secrets") > 0);
    report
}

/// Spans by trace id, asserting every (trace_id, span_id) is archived once.
fn spans_by_trace(
    spans: &[serde_json::Map<String, Value>],
) -> std::collections::BTreeMap<&str, Vec<&serde_json::Map<String, Value>>> {
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
    let mut by_trace = std::collections::BTreeMap::<&str, Vec<_>>::new();
    for r in spans {
        by_trace
            .entry(r["trace_id"].as_str().unwrap_or(""))
            .or_default()
            .push(r);
    }
    by_trace
}

#[test]
fn blast_with_the_tenant_on_the_root_is_archived_exactly() {
    let mut d = Daemon::start();
    // 6 batches of 5 requests: templates 0..5, requests spread evenly over 3 tenants.
    let report = blast(&d, "root", 6, 5);
    assert_eq!(
        d.metric("toolwatch_received_items_total{signal=\"traces\"}"),
        Some(300.0)
    );
    d.stop();

    let spans = read_table(&d.data_dir, "spans");
    assert_eq!(spans.len() as u64, n(&report, "spans"));
    let by_trace = spans_by_trace(&spans);
    assert_eq!(by_trace.len(), 30);
    let mut roots_by_tenant = std::collections::BTreeMap::<&str, u64>::new();
    let mut request_ids = BTreeSet::new();
    let mut root_tenant = std::collections::BTreeMap::<&str, &str>::new();
    for spans in by_trace.values() {
        assert_eq!(spans.len(), 10);
        let roots: Vec<_> = spans
            .iter()
            .filter(|r| r["span_class"] == "agent")
            .collect();
        assert_eq!(roots.len(), 1);
        let root = roots[0];
        // The root names its tenant, and every span of its request is filed under it.
        let tenant = root["tenant"].as_str().expect("tenant");
        *roots_by_tenant.entry(tenant).or_default() += 1;
        for s in spans {
            assert_eq!(s["tenant"], tenant, "{} of a {tenant} request", s["name"]);
        }
        let request_id = root["request_id"].as_str().expect("request id");
        assert!(request_ids.insert(request_id));
        root_tenant.insert(request_id, tenant);
        let classes: BTreeSet<&str> = spans
            .iter()
            .filter_map(|r| r["span_class"].as_str())
            .collect();
        assert_eq!(
            classes,
            BTreeSet::from(["agent", "downstream", "model", "tool"])
        );
    }
    assert_eq!(
        roots_by_tenant,
        [("tenant-0", 10), ("tenant-1", 10), ("tenant-2", 10)].into()
    );
    let services: BTreeSet<&str> = spans
        .iter()
        .filter_map(|r| r["service_name"].as_str())
        .collect();
    assert_eq!(services, BTreeSet::from(["agent-executor", "orders-api"]));
    // One summary per request, whole, under the root's tenant.
    let requests = read_table(&d.data_dir, "requests");
    assert_eq!(requests.len(), 30);
    for r in &requests {
        let id = r["request_id"].as_str().expect("request id");
        assert_eq!(r["tenant"].as_str(), root_tenant.get(id).copied(), "{id}");
        assert_eq!(r["span_count"], 10, "{id}");
    }
    for r in &spans {
        let text = serde_json::to_string(r).expect("json");
        assert!(
            !text.contains(toolwatch_cli::loadgen::BLAST_PLANTED_KEY),
            "{text}"
        );
        assert!(
            !text.contains(toolwatch_cli::loadgen::BLAST_PLANTED_EMAIL),
            "{text}"
        );
    }
}

#[test]
fn blast_with_the_tenant_on_every_span_files_each_request_under_it() {
    let mut d = Daemon::start();
    let report = blast(&d, "every", 4, 3);
    d.stop();

    let spans = read_table(&d.data_dir, "spans");
    assert_eq!(spans.len() as u64, n(&report, "spans"));
    let by_trace = spans_by_trace(&spans);
    assert_eq!(by_trace.len(), 12);
    for spans in by_trace.values() {
        assert_eq!(spans.len(), 10);
        let tenants: BTreeSet<&str> = spans.iter().filter_map(|r| r["tenant"].as_str()).collect();
        let requests: BTreeSet<&str> = spans
            .iter()
            .filter_map(|r| r["request_id"].as_str())
            .collect();
        assert_eq!((tenants.len(), requests.len()), (1, 1), "{spans:?}");
    }
}

/// `--profile faults`: realistic runs, every fourth with one checklist fault in turn. Each
/// faulty run raises exactly the finding of its fault; the others raise none.
#[test]
fn the_faults_profile_raises_each_injected_finding_and_nothing_else() {
    const REQUESTS: u64 = 72;
    let mut d = crate::harness::Daemon::start_with(crate::harness::DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "1s".into())],
        ..Default::default()
    });
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--profile",
        "faults",
        "--requests",
        &REQUESTS.to_string(),
        "--tenants",
        "3",
        "--seed",
        "21",
    ]);
    assert_eq!(n(&report, "failed_batches"), 0);
    assert_eq!(n(&report, "faulty_requests"), REQUESTS / 4);
    crate::harness::wait_for("every run to be summarized", || {
        (d.metric("toolwatch_request_summaries_total{completeness=\"complete\"}")?
            >= REQUESTS as f64)
            .then_some(())
    });
    d.stop();
    let mut got: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for f in read_table(&d.data_dir, "findings") {
        assert_eq!(f["status"], "open", "{f:?}");
        got.entry(f["request_id"].as_str().expect("request").to_string())
            .or_default()
            .push(f["rule"].as_str().expect("rule").to_string());
    }
    let want: std::collections::BTreeMap<String, Vec<String>> = (0..REQUESTS)
        .filter_map(|i| {
            toolwatch_cli::loadgen::fault_of(i)
                .map(|rule| (format!("req-21-{i:08}"), vec![rule.to_string()]))
        })
        .collect();
    assert_eq!(want.len() as u64, REQUESTS / 4);
    assert_eq!(got, want);
}
