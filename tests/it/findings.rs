//! Findings from a real executor's telemetry: the official Python SDK sends, for every rule, a
//! run that skips the checklist step and its twin that does it; exactly one finding each, with
//! the exact evidence, and none for the twins.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::harness::{
    all_bytes, assert_readers_agree, contains, free_addr, read_table_python, run_python, wait_for,
    Daemon, DaemonOptions,
};
use crate::monitoring::{write_file, Alertmanager, WebhookReceiver};

/// The registry of the test's tools (`delete_order` is not in it; `create_order_note` takes
/// schema versions 1 and 2), and every alarm target: a JSON webhook, a real Alertmanager, and
/// a second toolwatch as the OTLP export's downstream.
fn targets_config(
    dir: &std::path::Path,
    hook: &str,
    am: &str,
    downstream: &str,
) -> std::path::PathBuf {
    write_file(
        dir,
        "findings.toml",
        &format!(
            r#"
[findings.registry.tools]
add_order_note = []
refund_order = []
export_customers = []
search_orders = []
read_config = []
http_post = []
create_order_note = ["1", "2"]

[[budget.webhooks]]
name = "hook"
url = "{hook}"

[[budget.webhooks]]
name = "am"
url = "{am}"
format = "alertmanager"

[[export.endpoints]]
name = "downstream"
url = "{downstream}"
protocol = "http"
initial_backoff = "100ms"
max_backoff = "500ms"
"#
        ),
    )
}

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
        one("digest-mismatch", "confirmation_digest_mismatch", &["0"]),
        none("digest-match"),
        one("cross-tenant", "cross_tenant_resource", &["0"]),
        none("same-tenant"),
        one("unknown-tool", "unknown_tool", &["0"]),
        none("known-tool-version"),
        one("unknown-tool-version", "unknown_tool_version", &["0"]),
        one("secret-outbound", "secret_in_outbound_call", &["0", "1"]),
        one("secret-in-url", "secret_in_outbound_call", &["0", "1"]),
        none("secret-own"),
        one("cost-disagrees", "cost_disagrees", &["root"]),
        none("cost-agrees"),
    ]
    .into_iter()
    .collect()
}

#[test]
fn each_rule_raises_exactly_its_finding_and_its_twin_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = WebhookReceiver::start(0);
    let alertmanager = Alertmanager::start();
    let down_listen = (free_addr(), free_addr());
    let mut down = Daemon::start_with(DaemonOptions {
        data_dir: Some(dir.path().join("down")),
        listen: Some(down_listen),
        ..Default::default()
    });
    let config = targets_config(
        dir.path(),
        &hook.url(),
        &alertmanager.url(),
        &format!("http://{}", down_listen.1),
    );
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
    let raised = want.values().filter(|w| w.is_some()).count();
    let webhook_findings = wait_for("every finding at the webhook", || {
        let f: Vec<Value> = hook
            .alarms()
            .into_iter()
            .filter(|a| !a["finding"].is_null())
            .collect();
        (f.len() >= raised).then_some(f)
    });
    let alerts = wait_for("every finding at alertmanager", || {
        let a: Vec<Value> = alertmanager
            .alerts()
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == "ToolwatchFinding")
            .collect();
        (a.len() >= raised).then_some(a)
    });
    wait_for("the export to catch up", || {
        d.metric(r#"toolwatch_export_lag_records{endpoint="downstream"}"#)
            .filter(|&n| n == 0.0)
    });
    let (_, metrics) = d.admin_get("/metrics");
    d.stop();
    down.stop();

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

    // The same findings at every alarm target, by finding id, with rule and evidence.
    let table: BTreeMap<String, (String, Vec<Value>)> = findings
        .iter()
        .map(|f| {
            (
                f["finding_id"].as_str().expect("id").to_string(),
                (
                    f["rule"].as_str().expect("rule").to_string(),
                    f["span_ids"].as_array().expect("spans").clone(),
                ),
            )
        })
        .collect();
    let at_hook: BTreeMap<String, (String, Vec<Value>)> = webhook_findings
        .iter()
        .map(|a| {
            assert_eq!(a["level"], "limit");
            assert_eq!(a["finding"]["status"], "open");
            assert_eq!(
                a["budget"],
                format!("finding:{}", a["finding"]["rule"].as_str().unwrap_or(""))
            );
            (
                a["alarm_id"].as_str().expect("alarm id").to_string(),
                (
                    a["finding"]["rule"].as_str().expect("rule").to_string(),
                    a["finding"]["span_ids"].as_array().expect("spans").clone(),
                ),
            )
        })
        .collect();
    assert_eq!(at_hook, table, "the webhook got each finding once");
    assert_eq!(webhook_findings.len(), table.len(), "no finding sent twice");
    let at_am: BTreeMap<String, String> = alerts
        .iter()
        .map(|a| {
            (
                a["labels"]["finding_id"].as_str().expect("id").to_string(),
                a["labels"]["rule"].as_str().expect("rule").to_string(),
            )
        })
        .collect();
    let rules_by_id: BTreeMap<String, String> = table
        .iter()
        .map(|(id, (rule, _))| (id.clone(), rule.clone()))
        .collect();
    assert_eq!(at_am, rules_by_id, "one alert per finding at alertmanager");
    let down_logs = read_table_python("duckdb", &dir.path().join("down"), "logs");
    let finding_records: Vec<_> = down_logs
        .iter()
        .filter(|r| r["event_name"] == "toolwatch.finding")
        .collect();
    let downstream: BTreeMap<String, String> = finding_records
        .iter()
        .map(|r| {
            let attrs: Value =
                serde_json::from_str(r["attributes"].as_str().unwrap_or("{}")).expect("attributes");
            (
                attrs["toolwatch.finding.id"]
                    .as_str()
                    .expect("id")
                    .to_string(),
                attrs["toolwatch.finding.rule"]
                    .as_str()
                    .expect("rule")
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        downstream, rules_by_id,
        "each finding as an OTLP log record downstream"
    );
    // The canary is in every tool's arguments: never in what the targets received.
    for (what, text) in [
        (
            "webhook",
            serde_json::to_string(&*hook.received.lock().expect("received")).expect("json"),
        ),
        (
            "alertmanager",
            serde_json::to_string(&alerts).expect("json"),
        ),
        ("downstream finding records", format!("{finding_records:?}")),
    ] {
        assert!(!text.contains(CANARY), "the canary reached the {what}");
    }

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

    // What tools returned under credential keys is gone everywhere, also where it was sent out.
    for leaked in [
        "Qm7vX2pL9rT4kW8zHn",
        "Vb3nR8tY6uJ2kM5pQx",
        "Lz4cT9wE1sD7fG3hKa",
    ] {
        assert!(
            !contains(&all_bytes(&d.data_dir), leaked),
            "{leaked} archived"
        );
        assert!(
            !contains(&all_bytes(&dir.path().join("down")), leaked),
            "{leaked} exported"
        );
    }
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

/// Two tenants send the same runs under the same request ids: each tenant's findings are its
/// own, with evidence spans of its own tenant only, and each gets the same set of rules.
#[test]
fn findings_of_one_tenant_never_carry_another_tenants_ids() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "1s".into())],
        ..Default::default()
    });
    let mut sent = BTreeMap::new();
    for tenant in ["acme", "globex"] {
        let out: Value = serde_json::from_str(&run_python(
            "send_findings.py",
            &[
                "--endpoint",
                &d.grpc_url(),
                "--canary",
                CANARY,
                "--tenant",
                tenant,
            ],
        ))
        .expect("sender output");
        sent.insert(tenant, out);
    }
    let runs = sent
        .values()
        .map(|s| s.as_object().map_or(0, |o| o.len()))
        .sum::<usize>();
    wait_for("every run of both tenants to be summarized", || {
        (d.metric("toolwatch_request_summaries_total{completeness=\"complete\"}")? >= runs as f64)
            .then_some(())
    });
    d.stop();
    let spans = assert_readers_agree(&d.data_dir, "spans");
    let tenant_of: BTreeMap<String, String> = spans
        .iter()
        .map(|s| {
            (
                s["span_id"].as_str().expect("span id").to_string(),
                s["tenant"].as_str().expect("tenant").to_string(),
            )
        })
        .collect();
    let findings = assert_readers_agree(&d.data_dir, "findings");
    let mut rules: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for f in &findings {
        let tenant = f["tenant"].as_str().expect("tenant").to_string();
        let run = f["request_id"].as_str().expect("request").to_string();
        let trace = &sent[tenant.as_str()][&run]["trace_id"];
        for s in f["span_ids"].as_array().expect("spans") {
            let s = s.as_str().expect("span id");
            assert_eq!(
                tenant_of.get(s),
                Some(&tenant),
                "{f:?}: evidence of its own tenant"
            );
        }
        for t in f["trace_ids"].as_array().expect("traces") {
            assert_eq!(t, trace, "{f:?}: its own tenant's trace");
        }
        rules
            .entry(tenant)
            .or_default()
            .push((run, f["rule"].as_str().expect("rule").to_string()));
    }
    for v in rules.values_mut() {
        v.sort();
    }
    assert_eq!(rules.len(), 2, "{rules:?}");
    assert_eq!(
        rules["acme"], rules["globex"],
        "the same findings for the same runs"
    );
    // Every rule but the registry's two (no registry here) and one run each.
    assert_eq!(rules["acme"].len(), 13, "{:?}", rules["acme"]);
}

/// The example executor (`examples/order-note-executor/`) against the daemon with its own
/// configuration: each faulty scenario raises exactly the finding it is named after, the
/// correct ones none; its README's promise.
#[test]
fn the_example_executor_earns_exactly_the_findings_its_readme_shows() {
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/order-note-executor/toolwatch.toml");
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "1s".into())],
        ..Default::default()
    });
    let out = run_python(
        "../../examples/order-note-executor/executor.py",
        &["--endpoint", &d.grpc_url(), "--tenant", "acme"],
    );
    // "scenario request_id trace_id expected", one line per scenario after the header.
    let want: BTreeMap<String, Option<String>> = out
        .lines()
        .skip_while(|l| !l.starts_with("scenario"))
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4).then(|| (f[1].to_string(), (f[3] != "none").then(|| f[3].to_string())))
        })
        .collect();
    assert_eq!(want.len(), 15, "{out}");
    wait_for("every scenario to be summarized", || {
        (d.metric("toolwatch_request_summaries_total{completeness=\"complete\"}")?
            >= want.len() as f64)
            .then_some(())
    });
    d.stop();
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in crate::harness::read_table(&d.data_dir, "findings") {
        got.entry(f["request_id"].as_str().expect("request").to_string())
            .or_default()
            .push(f["rule"].as_str().expect("rule").to_string());
    }
    for (request, rule) in &want {
        let found = got.remove(request).unwrap_or_default();
        assert_eq!(found, rule.iter().cloned().collect::<Vec<_>>(), "{request}");
    }
    assert!(got.is_empty(), "{got:?}");
}
