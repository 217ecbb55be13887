//! Findings from a real executor's telemetry: the official Python SDK sends, for every rule, a
//! run that skips the checklist step and its twin that does it; exactly one finding each, with
//! the exact evidence, and none for the twins.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::harness::{
    all_bytes, assert_readers_agree, contains, run_python, wait_for, Daemon, DaemonOptions,
};

const CANARY: &str = "tw-finding-canary-5b1d90e7";

/// Each rule's run and its twin: exactly the expected finding, with the exact evidence ids.
fn expected(sent: &Value) -> BTreeMap<String, Option<(&'static str, Vec<String>)>> {
    let id = |run: &str, what: &str| -> String {
        match what {
            "root" => sent[run]["root"].as_str().expect("root").to_string(),
            n => sent[run]["calls"][n.parse::<usize>().expect("index")]
                .as_str()
                .expect("call")
                .to_string(),
        }
    };
    let one = |run: &str, rule: &'static str, evidence: &[&str]| {
        (
            run.to_string(),
            Some((
                rule,
                evidence.iter().map(|w| id(run, w)).collect::<Vec<_>>(),
            )),
        )
    };
    let none = |run: &str| (run.to_string(), None);
    [
        one("write-no-allow", "write_without_allow", &["0"]),
        none("write-allowed"),
        one(
            "high-impact-unconfirmed",
            "high_impact_without_confirmation",
            &["0"],
        ),
        none("high-impact-confirmed"),
        one(
            "ambiguous-no-key",
            "ambiguous_write_retried_without_key",
            &["0", "1"],
        ),
        none("ambiguous-same-key"),
        one(
            "ambiguous-new-key",
            "ambiguous_write_retried_with_new_key",
            &["0", "1"],
        ),
        one("retry-after-deny", "retry_after_deny", &["0", "1"]),
        none("no-retry-after-deny"),
        one(
            "parallel-writes",
            "parallel_writes_same_resource",
            &["0", "1"],
        ),
        none("serial-writes"),
        one("no-stop-reason", "loop_without_stop_reason", &["root"]),
        one(
            "success-after-failure",
            "success_claimed_after_failure",
            &["root", "0"],
        ),
        none("success-after-success"),
        one("cost-disagrees", "cost_disagrees", &["root"]),
        none("cost-agrees"),
    ]
    .into_iter()
    .collect()
}

#[test]
fn each_rule_raises_exactly_its_finding_and_its_twin_none() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "1s".into())],
        ..Default::default()
    });
    let sent: Value = serde_json::from_str(&run_python(
        "send_findings.py",
        &["--endpoint", &d.grpc_url(), "--canary", CANARY],
    ))
    .expect("sender output");
    let want = expected(&sent);
    wait_for("every run to be summarized", || {
        (d.metric("toolwatch_request_summaries_total{completeness=\"complete\"}")?
            >= want.len() as f64)
            .then_some(())
    });
    assert_eq!(
        d.metric("toolwatch_findings_total{tenant=\"acme\",rule=\"write_without_allow\",severity=\"high\"}"),
        Some(1.0)
    );
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    let findings = assert_readers_agree(&d.data_dir, "findings");
    let mut got: BTreeMap<String, Vec<(String, Vec<String>)>> = BTreeMap::new();
    for f in &findings {
        assert_eq!(f["status"], "open");
        assert_eq!(f["tenant"], "acme");
        assert_eq!(f["summary_version"], 1);
        let spans: Vec<String> = f["span_ids"]
            .as_array()
            .expect("span ids")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        let run = f["request_id"].as_str().expect("request").to_string();
        let trace = sent[&run]["trace_id"].clone();
        assert!(
            f["trace_ids"]
                .as_array()
                .expect("traces")
                .iter()
                .all(|t| *t == trace),
            "{f:?}: evidence from its own trace"
        );
        got.entry(run)
            .or_default()
            .push((f["rule"].as_str().expect("rule").to_string(), spans));
    }
    for (run, expect) in &want {
        let found = got.remove(run).unwrap_or_default();
        match expect {
            Some((rule, spans)) => assert_eq!(
                found,
                [(rule.to_string(), spans.clone())],
                "{run}: exactly one finding"
            ),
            None => assert_eq!(found, [], "{run}: the twin raises none"),
        }
    }
    assert!(got.is_empty(), "findings of runs not sent: {got:?}");

    let requests = assert_readers_agree(&d.data_dir, "requests");
    for (run, expect) in &want {
        let row = requests
            .iter()
            .find(|r| r["request_id"] == run.as_str())
            .unwrap_or_else(|| panic!("{run} summarized"));
        assert_eq!(
            row["findings"],
            Value::from(u64::from(expect.is_some())),
            "{run}"
        );
    }

    // `trace` shows a finding and marks its span; a twin shows none.
    let trace = |id: &str, json: bool| {
        let mut cmd = crate::harness::toolwatch();
        cmd.args(["trace", "--data-dir"]).arg(&d.data_dir);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.arg(id).output().expect("trace");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let text = trace("write-no-allow", false);
    assert!(
        text.contains(&format!(
            "finding  high write_without_allow · effect=write decision=none · spans {}",
            sent["write-no-allow"]["calls"][0].as_str().expect("id")
        )),
        "{text}"
    );
    assert_eq!(text.matches("◀ write_without_allow").count(), 1, "{text}");
    let json: Value = serde_json::from_str(&trace("write-no-allow", true)).expect("json");
    assert_eq!(json["findings"].as_array().map(Vec::len), Some(1));
    let twin: Value = serde_json::from_str(&trace("write-allowed", true)).expect("json");
    assert_eq!(twin["findings"], serde_json::json!([]));

    // The canary is in every tool's arguments, never in a finding or a metric.
    assert!(!contains(&all_bytes(&d.data_dir.join("findings")), CANARY));
    assert!(!metrics.contains(CANARY));
}

#[test]
fn a_rule_switched_off_or_graded_in_the_configuration_is_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolwatch.toml");
    std::fs::write(
        &config,
        "[findings.rules]\nwrite_without_allow = \"off\"\n\n[findings.tenants.acme.rules]\ncost_disagrees = \"high\"\n",
    )
    .expect("config");
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "1s".into())],
        ..Default::default()
    });
    let sent: Value = serde_json::from_str(&run_python(
        "send_findings.py",
        &["--endpoint", &d.grpc_url(), "--canary", CANARY],
    ))
    .expect("sender output");
    let runs = sent.as_object().map_or(0, |o| o.len()) as f64;
    wait_for("every run to be summarized", || {
        (d.metric("toolwatch_request_summaries_total{completeness=\"complete\"}")? >= runs)
            .then_some(())
    });
    d.stop();
    let findings = crate::harness::read_table(&d.data_dir, "findings");
    let rule = |r: &str| {
        findings
            .iter()
            .filter(|f| f["rule"] == r)
            .collect::<Vec<_>>()
    };
    assert!(rule("write_without_allow").is_empty(), "switched off");
    let cost = rule("cost_disagrees");
    assert_eq!(cost.len(), 1);
    assert_eq!(cost[0]["severity"], "high", "graded for acme");
    assert_eq!(
        rule("retry_after_deny").len(),
        1,
        "the others run as before"
    );
}
