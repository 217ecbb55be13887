//! The Grafana dashboards in `dashboards/`: a real Prometheus scrapes a toolwatch fed by
//! loadgen, and every PromQL expression of every panel (variables substituted) must parse and
//! return data. A panel that shows nothing fails the test.

use std::path::Path;

use serde_json::Value;

use crate::harness::{toolwatch, wait_for, Daemon, DaemonOptions};
use crate::monitoring::{write_file, Prometheus, WebhookReceiver};

/// What Grafana would substitute for the variables the dashboards may use.
const VARIABLES: &[(&str, &str)] = &[
    ("${tenant}", ".*"),
    ("$tenant", ".*"),
    ("$__rate_interval", "1m"),
    ("$__range", "1h"),
];

/// (dashboard file, panel title, expression) of every target.
fn expressions() -> Vec<(String, String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("dashboards/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "dashboards: {files:?}");
    let mut out = Vec::new();
    for file in files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("read"))
            .unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
        // Importable: a datasource variable that every panel uses.
        let vars = d["templating"]["list"].as_array().expect("templating.list");
        assert!(
            vars.iter().any(|v| v["type"] == "datasource"
                && v["name"] == "datasource"
                && v["query"] == "prometheus"),
            "{name}: no Prometheus datasource variable"
        );
        let panels = d["panels"].as_array().expect("panels");
        assert!(!panels.is_empty(), "{name}: no panels");
        for p in panels {
            if p["type"] == "row" {
                continue;
            }
            let title = p["title"].as_str().unwrap_or_default().to_string();
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{name}: {title}");
            let targets = p["targets"].as_array().cloned().unwrap_or_default();
            assert!(!targets.is_empty(), "{name}: {title} has no query");
            for t in targets {
                let mut expr = t["expr"].as_str().expect("expr").to_string();
                for (var, value) in VARIABLES {
                    expr = expr.replace(var, value);
                }
                assert!(
                    !expr.contains('$'),
                    "{name}: {title}: unknown variable in {expr}"
                );
                out.push((name.clone(), title.clone(), expr));
            }
        }
    }
    out
}

#[test]
fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    let exprs = expressions();
    let hook = WebhookReceiver::start(0);
    let dir = tempfile::tempdir().expect("tempdir");
    // Tenant windows on, so usage and limit series exist; an alarm target, so deliveries do;
    // an object store (a folder), so uploads do.
    let store = dir.path().join("store");
    let config = write_file(
        dir.path(),
        "toolwatch.toml",
        &format!(
            r#"
[storage]
url = "file://{}"
upload_every = "1s"

[archive]
max_file_age = "1s"

[assemble]
quiet_period = "1s"

[budget]
[[budget.webhooks]]
name = "hook"
url = "{}"

[budget.tenant]
tokens_per_hour = 10000000
cost_usd_per_day = 1000.0
tool_calls_per_minute = 100000
"#,
            store.display(),
            hook.url()
        ),
    );
    let d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let prometheus = Prometheus::start(d.admin);
    // Traffic for the whole test: normal runs at a steady rate, and runaway runs for alarms.
    let target = d.grpc_url();
    let mut traffic = toolwatch()
        .args([
            "loadgen",
            "--target",
            &target,
            "--rate",
            "20",
            "--requests",
            "1200",
            "--tenants",
            "3",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start loadgen");
    let out = toolwatch()
        .args([
            "loadgen",
            "--target",
            &target,
            "--profile",
            "runaway",
            "--requests",
            "4",
            "--seed",
            "9",
        ])
        .output()
        .expect("runaway loadgen");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for (file, title, expr) in &exprs {
        if let Err(e) = prometheus.query(expr) {
            panic!("{file}: panel {title:?}: Prometheus refuses {expr}: {e}");
        }
    }
    let mut empty = Vec::new();
    let all_have_data = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("every dashboard query to return data", || {
            empty = exprs
                .iter()
                .filter(|(_, _, e)| prometheus.query(e).map_or(true, |r| r.is_empty()))
                .cloned()
                .collect::<Vec<_>>();
            empty.is_empty().then_some(())
        })
    }));
    let _ = traffic.kill();
    let _ = traffic.wait();
    assert!(
        all_have_data.is_ok(),
        "panels that show nothing:\n{}",
        empty
            .iter()
            .map(|(f, t, e)| format!("  {f}: {t}: {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(exprs.len() >= 40, "{} expressions", exprs.len());
    // The emptiness check can fail: a metric toolwatch does not export shows nothing.
    assert_eq!(prometheus.query("toolwatch_no_such_metric"), Ok(vec![]));
}
