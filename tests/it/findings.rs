//! Findings from a real executor's telemetry: the official Python SDK sends a write without an
//! allow decision and its twin that asks first; exactly one finding, with the exact evidence.

use serde_json::Value;

use crate::harness::{
    all_bytes, assert_readers_agree, contains, run_python, wait_for, Daemon, DaemonOptions,
};

const CANARY: &str = "tw-finding-canary-5b1d90e7";

#[test]
fn a_write_without_allow_raises_one_finding_and_its_twin_none() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "1s".into())],
        ..Default::default()
    });
    let sent: Value = serde_json::from_str(&run_python(
        "send_findings.py",
        &["--endpoint", &d.grpc_url(), "--canary", CANARY],
    ))
    .expect("sender output");
    wait_for("both requests to be summarized", || {
        (d.metric("toolwatch_request_summaries_total{completeness=\"complete\"}")? >= 2.0)
            .then_some(())
    });
    assert_eq!(
        d.metric("toolwatch_findings_total{tenant=\"acme\",rule=\"write_without_allow\",severity=\"high\"}"),
        Some(1.0)
    );
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();

    let findings = assert_readers_agree(&d.data_dir, "findings");
    assert_eq!(findings.len(), 1, "{findings:?}");
    let f = &findings[0];
    let bad = &sent["bad"];
    assert_eq!(f["rule"], "write_without_allow");
    assert_eq!(f["severity"], "high");
    assert_eq!(f["status"], "open");
    assert_eq!(f["tenant"], "acme");
    assert_eq!(f["request_id"], "req-no-allow");
    assert_eq!(f["span_ids"], serde_json::json!([bad["tool"]]));
    assert_eq!(f["trace_ids"], serde_json::json!([bad["trace_id"]]));
    assert_eq!(f["reason"], "effect=write decision=none");
    assert_eq!(f["summary_version"], 1);

    let requests = assert_readers_agree(&d.data_dir, "requests");
    let count = |id: &str| {
        requests
            .iter()
            .find(|r| r["request_id"] == id)
            .map(|r| r["findings"].clone())
    };
    assert_eq!(count("req-no-allow"), Some(Value::from(1)));
    assert_eq!(count("req-allowed"), Some(Value::from(0)));
    // `trace` shows the finding and marks its span; the twin shows none.
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
    let text = trace("req-no-allow", false);
    assert!(
        text.contains(&format!(
            "finding  high write_without_allow · effect=write decision=none · spans {}",
            bad["tool"].as_str().expect("id")
        )),
        "{text}"
    );
    assert_eq!(text.matches("◀ write_without_allow").count(), 1, "{text}");
    let json: Value = serde_json::from_str(&trace("req-no-allow", true)).expect("json");
    assert_eq!(json["findings"].as_array().map(Vec::len), Some(1));
    let twin: Value = serde_json::from_str(&trace("req-allowed", true)).expect("json");
    assert_eq!(twin["findings"], serde_json::json!([]));
    // The canary is in the archived (redacted or not) tool arguments, never in a finding.
    let findings_dir = d.data_dir.join("findings");
    assert!(!contains(&all_bytes(&findings_dir), CANARY));
    assert!(!metrics.contains(CANARY));
}
