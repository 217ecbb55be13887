//! Budgets end to end: loadgen's runaway profile breaks every per-request budget and a tenant
//! window; each alarm must appear exactly once in the archive, in `/metrics`, at a real
//! Alertmanager and at a webhook receiver, and a restart must not reset the daily window.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::harness::{loadgen, read_table, wait_for, Daemon, DaemonOptions};
use crate::monitoring::{write_file, Alertmanager, WebhookReceiver};
use crate::otlp_json::post_accepted;

/// A real Alertmanager, a webhook receiver, and a toolwatch configuration that sends to both.
struct Rig {
    alertmanager: Alertmanager,
    hook: WebhookReceiver,
    config: std::path::PathBuf,
    data_dir: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// `template` is the configuration, with `{am}` and `{hook}` for the two URLs; the receiver
    /// answers 503 to its first `refuse_first` posts.
    fn new(refuse_first: usize, template: &str) -> Rig {
        let alertmanager = Alertmanager::start();
        let hook = WebhookReceiver::start(refuse_first);
        let dir = tempfile::tempdir().expect("tempdir");
        let text = template
            .replace("{am}", &alertmanager.url())
            .replace("{hook}", &hook.url());
        Rig {
            config: write_file(dir.path(), "toolwatch.toml", &text),
            data_dir: dir.path().join("data"),
            alertmanager,
            hook,
            _dir: dir,
        }
    }

    /// Starts toolwatch on the rig's configuration and data directory.
    fn start(&self) -> Daemon {
        Daemon::start_with(DaemonOptions {
            data_dir: Some(self.data_dir.clone()),
            config: Some(self.config.clone()),
            ..Default::default()
        })
    }
}

/// (alarm id, level) of each alarm, sorted.
fn ids(alarms: &[Value]) -> Vec<(String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut v: Vec<(String, String)> = alarms
        .iter()
        .map(|a| (text(&a["alarm_id"]), text(&a["level"])))
        .collect();
    v.sort();
    v
}

/// Nanoseconds since the epoch.
fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Budgets that the runaway profile breaks, and the two delivery targets.
const RUNAWAY_CONFIG: &str = r#"
[budget]
request_idle = "1h"
save_interval = "1s"

[[budget.webhooks]]
name = "am"
url = "{am}"
format = "alertmanager"
resend_interval = "10m"

[[budget.webhooks]]
name = "hook"
url = "{hook}"
format = "json"
initial_backoff = "50ms"

[budget.request]
input_tokens = 100000
cost_usd = 0.3
result_bytes = 1000000

[budget.request.tool_calls_by_tool]
search_orders = 20

[budget.tenant]
tokens_per_day = 300000
"#;

/// (scope_id, budget, level): what identifies an alarm across destinations.
type AlarmKey = (String, String, String);

/// (scope_id, budget, level) → (observed, limit) expected for one runaway loadgen run of four
/// requests (one of each kind) with `budget_config`.
fn expected_request_alarms(seed: u64) -> BTreeMap<AlarmKey, (f64, f64)> {
    let req = |n: u64| format!("req-{seed}-{n:08}");
    let rows: &[(u64, &str, &str, f64, f64)] = &[
        // The turn loop: 30 model turns.
        (0, "model_turns", "warning", 20.0, 25.0),
        (0, "model_turns", "limit", 25.0, 25.0),
        // The tool loop: 60 identical calls (spelled two ways).
        (1, "repeated_calls", "warning", 4.0, 5.0),
        (1, "repeated_calls", "limit", 5.0, 5.0),
        (1, "tool_calls:search_orders", "warning", 16.0, 20.0),
        (1, "tool_calls:search_orders", "limit", 20.0, 20.0),
        (1, "tool_calls", "warning", 40.0, 50.0),
        (1, "tool_calls", "limit", 50.0, 50.0),
        // The slow run: 659.49 s from first to last span; warning and limit at once.
        (2, "wall_time", "warning", 659.49, 600.0),
        (2, "wall_time", "limit", 659.49, 600.0),
        // The token burn: 3 turns of 40,000 in / 4,000 out ($0.14 each), 5 MB of results.
        (3, "input_tokens", "warning", 80_000.0, 100_000.0),
        (3, "input_tokens", "limit", 120_000.0, 100_000.0),
        (3, "cost_usd", "warning", 0.28, 0.3),
        (3, "cost_usd", "limit", 0.42, 0.3),
        (3, "result_bytes", "warning", 5_000_000.0, 1_000_000.0),
        (3, "result_bytes", "limit", 5_000_000.0, 1_000_000.0),
    ];
    rows.iter()
        .map(|(n, b, l, o, lim)| ((req(*n), b.to_string(), l.to_string()), (*o, *lim)))
        .collect()
}

/// Tokens one runaway run of four requests spends: 30×1,100 + 1,100 + 2×1,100 + 3×44,000.
const RUN_TOKENS: f64 = 168_300.0;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// (scope_id, budget, level) → (observed, limit) of alarms given as JSON objects.
fn keyed(alarms: &[Value], limit_key: &str) -> BTreeMap<AlarmKey, Vec<(f64, f64)>> {
    let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for a in alarms {
        let key = (
            a["scope_id"].as_str().unwrap_or_default().to_string(),
            a["budget"].as_str().unwrap_or_default().to_string(),
            a["level"].as_str().unwrap_or_default().to_string(),
        );
        out.entry(key)
            .or_default()
            .push((f(&a["observed"]), f(&a[limit_key])));
    }
    out
}

fn assert_alarms_once(
    what: &str,
    got: &BTreeMap<AlarmKey, Vec<(f64, f64)>>,
    want: &BTreeMap<AlarmKey, (f64, f64)>,
) {
    let got_keys: Vec<_> = got.keys().collect();
    let want_keys: Vec<_> = want.keys().collect();
    assert_eq!(got_keys, want_keys, "{what}: which alarms");
    for (k, values) in got {
        assert_eq!(
            values.len(),
            1,
            "{what}: {k:?} arrived {} times",
            values.len()
        );
        let (o, l) = values[0];
        let (wo, wl) = want[k];
        assert!(
            close(o, wo) && close(l, wl),
            "{what}: {k:?} observed {o} limit {l}, expected {wo} and {wl}"
        );
    }
}

fn window_usage(d: &Daemon, tenant: &str) -> Option<f64> {
    let (code, body) = d.admin_get(&format!("/v1/budgets?tenant={tenant}"));
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("budgets JSON");
    v["tenants"][0]["usage"]
        .as_array()?
        .iter()
        .find(|u| u["scope"] == "tenant" && u["budget"] == "tokens_per_day")
        .map(|u| f(&u["usage"]))
}

#[test]
fn runaway_alarms_reach_every_destination_once_and_a_restart_keeps_the_daily_window() {
    // The first post is refused: the webhook target must retry it.
    let rig = Rig::new(1, RUNAWAY_CONFIG);
    let (alertmanager, hook, data_dir) = (&rig.alertmanager, &rig.hook, &rig.data_dir);
    let start = || rig.start();

    // Run 1: every per-request budget breaks once; the tenant spends 168,300 of 300,000 tokens.
    let mut d = start();
    let run = |d: &Daemon, seed: &str| {
        loadgen(&[
            "--target",
            &d.grpc_url(),
            "--profile",
            "runaway",
            "--requests",
            "4",
            "--concurrency",
            "1",
            "--seed",
            seed,
        ])
    };
    let report = run(&d, "1");
    assert_eq!(report["requests"], 4);
    let first = expected_request_alarms(1);
    wait_for("run 1's alarms at the webhook", || {
        (hook.alarms().len() >= first.len()).then_some(())
    });
    wait_for("run 1's tokens in the tenant window", || {
        (window_usage(&d, "tenant-0") == Some(RUN_TOKENS)).then_some(())
    });
    // Metrics: alarms by budget and level, the usage gauge, the retried delivery.
    let alarms_metric = |d: &Daemon, budget: &str, level: &str| {
        d.metric(&format!(
            "toolwatch_budget_alarms_total{{tenant=\"tenant-0\",scope=\"request\",budget=\"{budget}\",level=\"{level}\"}}"
        ))
    };
    for (_, budget, level) in first.keys() {
        assert_eq!(
            alarms_metric(&d, budget, level),
            Some(1.0),
            "{budget} {level}"
        );
    }
    wait_for("the usage gauge", || {
        let usage = d.metric(
            "toolwatch_budget_usage{tenant=\"tenant-0\",scope=\"tenant\",budget=\"tokens_per_day\"}",
        );
        (usage == Some(RUN_TOKENS)).then_some(())
    });
    assert_eq!(
        d.metric("toolwatch_budget_limit{tenant=\"tenant-0\",scope=\"tenant\",budget=\"tokens_per_day\"}"),
        Some(300_000.0)
    );
    assert_eq!(
        d.metric("toolwatch_alarm_deliveries_total{target=\"hook\",outcome=\"retried\"}"),
        Some(1.0)
    );
    assert_eq!(hook.refused.load(std::sync::atomic::Ordering::SeqCst), 1);
    d.stop();

    // Restart: the daily window comes back with its spend.
    let mut d = start();
    assert_eq!(window_usage(&d, "tenant-0"), Some(RUN_TOKENS));
    // Run 2 brings the tenant to 336,600 tokens: the window warns at 248,600 and fires at
    // 336,600, which only happens if run 1's spend survived the restart.
    run(&d, "2");
    let mut want = first.clone();
    want.extend(expected_request_alarms(2));
    want.insert(
        ("tenant-0".into(), "tokens_per_day".into(), "warning".into()),
        (248_600.0, 300_000.0),
    );
    want.insert(
        ("tenant-0".into(), "tokens_per_day".into(), "limit".into()),
        (336_600.0, 300_000.0),
    );
    wait_for("run 2's alarms at the webhook", || {
        (hook.alarms().len() >= want.len()).then_some(())
    });
    for level in ["warning", "limit"] {
        assert_eq!(
            d.metric(&format!(
                "toolwatch_budget_alarms_total{{tenant=\"tenant-0\",scope=\"tenant\",budget=\"tokens_per_day\",level=\"{level}\"}}"
            )),
            Some(1.0)
        );
    }
    // Alertmanager: one active alert per (episode, level), with the ids that lead back. Run
    // 1's request episodes were resolved when the first daemon stopped (request usage does
    // not survive a restart), so only run 2's and the tenant window's are active.
    let active: BTreeMap<AlarmKey, (f64, f64)> = want
        .iter()
        .filter(|((id, _, _), _)| !id.starts_with("req-1-"))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let alerts = wait_for("every active alarm at alertmanager", || {
        let a = alertmanager.alerts();
        (a.len() >= active.len()).then_some(a)
    });
    d.stop();

    // Each request episode resolves once, at shutdown, with its episode's id; the tenant
    // window's episode is saved with the window instead.
    let check_resolutions = |what: &str, alarms: &[Value]| {
        let mut episodes: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for a in alarms {
            let key = (
                a["scope_id"].as_str().unwrap_or_default().to_string(),
                a["budget"].as_str().unwrap_or_default().to_string(),
            );
            episodes.entry(key).or_default().push(format!(
                "{}:{}",
                a["level"].as_str().unwrap_or_default(),
                a["alarm_id"].as_str().unwrap_or_default()
            ));
        }
        for ((id, budget), events) in episodes {
            let alarm_id = events[0].split(':').nth(1).unwrap_or_default().to_string();
            assert!(
                events.iter().all(|e| e.ends_with(&format!(":{alarm_id}"))),
                "{what}: {id} {budget}: {events:?}"
            );
            let resolved = events.iter().filter(|e| e.starts_with("resolved:")).count();
            let expected = usize::from(id != "tenant-0");
            assert_eq!(resolved, expected, "{what}: {id} {budget}: {events:?}");
        }
    };
    let firing = |alarms: &[Value]| -> Vec<Value> {
        alarms
            .iter()
            .filter(|a| a["level"] != "resolved")
            .cloned()
            .collect()
    };

    let webhook = hook.alarms();
    assert_alarms_once("webhook", &keyed(&firing(&webhook), "limit"), &want);
    check_resolutions("webhook", &webhook);

    let rows: Vec<Value> = read_table(data_dir, "alarms")
        .into_iter()
        .map(Value::Object)
        .collect();
    assert_alarms_once("alarms table", &keyed(&firing(&rows), "limit_value"), &want);
    check_resolutions("alarms table", &rows);
    for r in &rows {
        assert_eq!(r["tenant"], "tenant-0");
        let request = r["request_id"].as_str().expect("request id");
        if r["scope"] == "request" {
            assert_eq!(r["scope_id"].as_str(), Some(request));
        }
        assert_eq!(r["trace_id"].as_str().map(str::len), Some(32));
        let reason = r["reason"].as_str().unwrap_or_default();
        let budget = r["budget"].as_str().unwrap_or_default();
        let expected_reason = match (r["level"].as_str(), budget) {
            (Some("warning"), b) => format!("warning:{b}"),
            (Some("resolved"), b) => format!("resolved:{b}"),
            (_, "repeated_calls") => "repeated_call".into(),
            (_, "wall_time") => "wall_time_exceeded".into(),
            (_, b) => format!("budget_exhausted:{b}"),
        };
        assert_eq!(reason, expected_reason);
    }
    // The same alarm ids everywhere.
    assert_eq!(ids(&webhook), ids(&rows));

    let am: Vec<Value> = alerts
        .iter()
        .map(|a| {
            let l = &a["labels"];
            assert_eq!(l["alertname"], "ToolwatchBudget");
            assert_eq!(a["status"]["state"], "active");
            let level = if l["severity"] == "critical" {
                "limit"
            } else {
                "warning"
            };
            serde_json::json!({
                "scope_id": l["scope_id"],
                "budget": l["budget"],
                "level": level,
                "alarm_id": l["alarm_id"],
                "observed": a["annotations"]["observed"].as_str().and_then(|s| s.parse::<f64>().ok()),
                "limit": a["annotations"]["limit"].as_str().and_then(|s| s.parse::<f64>().ok()),
            })
        })
        .collect();
    assert_alarms_once("alertmanager", &keyed(&am, "limit"), &active);
    let active_rows: Vec<Value> = firing(&rows)
        .into_iter()
        .filter(|r| {
            !r["scope_id"]
                .as_str()
                .unwrap_or_default()
                .starts_with("req-1-")
        })
        .collect();
    assert_eq!(ids(&am), ids(&active_rows));
}

/// Three identical tool calls whose request id, principal, tool name and arguments carry
/// canaries, for a tenant whose budgets all fire on them.
fn canary_spans(trace: &str) -> Value {
    use crate::protect_e2e::{kv, s, CANARIES};
    let c = CANARIES;
    let args = serde_json::json!({ "card": c[5], "email": c[4], "page": 1 }).to_string();
    // Now: the per-day windows only count spans of the last day.
    let now = now_ns();
    let spans: Vec<Value> = (1..=3u128)
        .map(|i| {
            serde_json::json!({
                "traceId": trace, "spanId": format!("00000000000000a{i}"),
                "name": "execute_tool lookup",
                "startTimeUnixNano": (now - 10_000_000_000 + i * 1_000_000).to_string(),
                "endTimeUnixNano": (now - 9_000_000_000 + i * 1_000_000).to_string(),
                "attributes": [
                    kv("gen_ai.operation.name", s("execute_tool")),
                    kv("gen_ai.tool.name", s(&format!("lookup {}", c[0]))),
                    kv("gen_ai.tool.call.arguments", s(&args)),
                    kv("executor.request_id", s(&format!("req {}", c[1]))),
                    kv("executor.principal_id", s(c[4])),
                ],
            })
        })
        .collect();
    serde_json::json!({ "resourceSpans": [{
        "resource": { "attributes": [
            kv("executor.tenant_id", s(&format!("canary-budget {}", c[2]))),
        ] },
        "scopeSpans": [{ "spans": spans }],
    }]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_planted_secret_reaches_an_alarm() {
    use crate::protect_e2e::assert_clean;
    let rig = Rig::new(
        0,
        r#"
[budget]
[[budget.webhooks]]
name = "am"
url = "{am}"
format = "alertmanager"
[[budget.webhooks]]
name = "hook"
url = "{hook}"
[budget.request]
tool_calls = 2
repeated_calls = 2
[budget.tenant]
tool_calls_per_day = 2
[budget.principal]
tool_calls_per_day = 2
"#,
    );
    let (alertmanager, hook) = (&rig.alertmanager, &rig.hook);
    let mut d = rig.start();
    post_accepted(
        &d,
        "/v1/traces",
        &canary_spans("5af7651916cd43dd8448eb211c80319c"),
    )
    .await;
    // Request (tool_calls, repeated_calls), tenant and principal windows: warning + limit each.
    let webhook = wait_for("the canary request's alarms", || {
        let a = hook.alarms();
        (a.len() >= 8).then_some(a)
    });
    let scopes: std::collections::BTreeSet<String> = webhook
        .iter()
        .map(|a| a["scope"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(scopes.len(), 3, "{webhook:?}");
    let alerts = wait_for("the alerts at alertmanager", || {
        let a = alertmanager.alerts();
        (a.len() >= 8).then_some(a)
    });
    let budgets = d.admin_get("/v1/budgets").1;
    assert!(budgets.contains("canary-budget"), "{budgets}");
    // Spend counters are refreshed every second.
    let metrics = wait_for("the tool-call counter", || {
        let m = d.admin_get("/metrics").1;
        m.contains("toolwatch_tool_calls_total{tenant=\"canary-budget ")
            .then_some(m)
    });
    d.stop();
    let rows = crate::harness::read_table_python("duckdb", &d.data_dir, "alarms");
    // 8 fired, and the two request episodes resolved at shutdown.
    assert_eq!(rows.len(), 10);
    let state =
        std::fs::read_to_string(d.data_dir.join("state/budget-windows.json")).expect("state file");
    assert!(state.contains("canary-budget"), "{state}");
    for (text, what) in [
        (
            serde_json::to_string(&webhook).expect("json"),
            "the webhook",
        ),
        (
            serde_json::to_string(&alerts).expect("json"),
            "alertmanager",
        ),
        (budgets, "/v1/budgets"),
        (metrics, "/metrics"),
        (
            serde_json::to_string(&rows).expect("json"),
            "the alarms table",
        ),
        (state, "the budget state file"),
        (d.log_text(), "the daemon's log"),
    ] {
        assert_clean(&text, what);
    }
}

/// One span of request `req-live` of tenant `live` as an OTLP JSON export.
fn live_span(span_id: &str, parent: &str, attrs: Vec<Value>) -> Value {
    use crate::protect_e2e::{kv, s};
    let now = now_ns();
    let mut attributes = vec![kv("executor.request_id", s("req-live"))];
    attributes.extend(attrs);
    serde_json::json!({ "resourceSpans": [{
        "resource": { "attributes": [ kv("executor.tenant_id", s("live")) ] },
        "scopeSpans": [{ "spans": [{
            "traceId": "7af7651916cd43dd8448eb211c80319c", "spanId": span_id,
            "parentSpanId": parent, "name": "span",
            "startTimeUnixNano": (now - 1_000_000_000).to_string(),
            "endTimeUnixNano": now.to_string(),
            "attributes": attributes,
        }]}],
    }]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_fires_while_the_request_runs_and_resolves_once_it_is_over() {
    use crate::protect_e2e::{kv, s};
    let rig = Rig::new(
        0,
        r#"
[budget]
request_idle = "5s"
[[budget.webhooks]]
name = "am"
url = "{am}"
format = "alertmanager"
resend_interval = "1s"
findings = false
[[budget.webhooks]]
name = "hook"
url = "{hook}"
findings = false
[budget.request]
tool_calls = 10
"#,
    );
    let (alertmanager, hook) = (&rig.alertmanager, &rig.hook);
    let mut d = rig.start();
    let root = "00000000000000ff";
    let levels = || {
        hook.alarms()
            .iter()
            .map(|a| a["level"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    // Ten tool calls, one export each; the root span has not been sent: the request runs.
    for i in 1..=10u32 {
        post_accepted(
            &d,
            "/v1/traces",
            &live_span(
                &format!("{i:016x}"),
                root,
                vec![
                    kv("gen_ai.operation.name", s("execute_tool")),
                    kv("gen_ai.tool.name", s("search_orders")),
                    kv(
                        "gen_ai.tool.call.arguments",
                        s(&format!("{{\"page\":{i}}}")),
                    ),
                ],
            ),
        )
        .await;
        match i {
            // Nothing before the warning threshold (8 of 10), once the 7th call is counted.
            7 => {
                wait_for("the 7th call to be counted", || {
                    let (_, body) = d.admin_get("/v1/budgets?tenant=live");
                    let v: Value = serde_json::from_str(&body).ok()?;
                    let calls = v["tenants"][0]["usage"]
                        .as_array()?
                        .iter()
                        .find(|u| u["budget"] == "tool_calls")
                        .map(|u| u["usage"].clone())?;
                    (calls == 7.0).then_some(())
                });
                assert!(levels().is_empty(), "{:?}", hook.alarms());
            }
            8 => {
                wait_for("the warning", || (levels() == ["warning"]).then_some(()));
            }
            10 => {
                wait_for("the limit", || {
                    (levels() == ["warning", "limit"]).then_some(())
                });
            }
            _ => {}
        }
    }
    // The request is still open: no summary yet, and /v1/budgets shows it at its limit.
    assert!(crate::harness::parquet_files(&d.data_dir, "requests").is_empty());
    let (_, body) = d.admin_get("/v1/budgets?tenant=live");
    let v: Value = serde_json::from_str(&body).expect("budgets JSON");
    let usage = v["tenants"][0]["usage"]
        .as_array()
        .and_then(|u| u.iter().find(|u| u["budget"] == "tool_calls").cloned())
        .expect("tool_calls usage");
    assert_eq!(
        (
            &usage["scope"],
            &usage["id"],
            &usage["usage"],
            &usage["limit"],
            &usage["level"]
        ),
        (
            &Value::from("request"),
            &Value::from("req-live"),
            &Value::from(10.0),
            &Value::from(10.0),
            &Value::from("limit")
        )
    );
    // Alertmanager holds one alert per level, however often toolwatch re-sends them.
    wait_for("two re-sends to alertmanager", || {
        let sent =
            d.metric("toolwatch_alarm_deliveries_total{target=\"am\",outcome=\"delivered\"}");
        (sent >= Some(4.0)).then_some(())
    });
    let alerts = alertmanager.alerts();
    let mut severities: Vec<&str> = alerts
        .iter()
        .filter_map(|a| a["labels"]["severity"].as_str())
        .collect();
    severities.sort_unstable();
    assert_eq!(severities, ["critical", "warning"]);

    // The root ends the request; five seconds idle later its alarms resolve, once.
    post_accepted(
        &d,
        "/v1/traces",
        &live_span(
            root,
            "",
            vec![kv("gen_ai.operation.name", s("invoke_agent"))],
        ),
    )
    .await;
    wait_for("the resolution", || {
        (levels() == ["warning", "limit", "resolved"]).then_some(())
    });
    wait_for("alertmanager to see both alerts resolved", || {
        alertmanager.alerts().is_empty().then_some(())
    });
    let alarms = hook.alarms();
    assert!(alarms
        .iter()
        .all(|a| a["alarm_id"] == alarms[0]["alarm_id"]));
    assert_eq!(alarms[2]["reason"], "resolved:tool_calls");
    assert_eq!(alarms[2]["observed"], 10.0);
    d.stop();
    let rows: Vec<Value> = read_table(&d.data_dir, "alarms")
        .into_iter()
        .map(Value::Object)
        .collect();
    let id = alarms[0]["alarm_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let level = |l: &str| (id.clone(), l.to_string());
    assert_eq!(
        ids(&rows),
        [level("limit"), level("resolved"), level("warning")]
    );
    // The request raised a finding (its root has no stop reason), which these targets, set to
    // `findings = false`, were not sent.
    let findings = read_table(&d.data_dir, "findings");
    assert_eq!(findings.len(), 1);
    assert_eq!(findings[0]["rule"], "loop_without_stop_reason");
    assert!(hook.alarms().iter().all(|a| a["finding"].is_null()));
}

#[test]
fn a_dead_webhook_target_costs_alarms_for_it_but_never_ingestion() {
    // A port nothing listens on: every attempt is refused at once.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_file(
        dir.path(),
        "toolwatch.toml",
        &format!(
            r#"
[budget]
[[budget.webhooks]]
name = "dead"
url = "http://{dead}/hook"
queue_alarms = 2
max_attempts = 3
initial_backoff = "1s"
max_backoff = "1s"
"#
        ),
    );
    let mut d = Daemon::start_with(DaemonOptions {
        config: Some(config),
        ..Default::default()
    });
    let runaway = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--profile",
        "runaway",
        "--requests",
        "4",
        "--concurrency",
        "1",
    ]);
    let normal = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "200",
        "--batch",
        "10",
    ]);
    assert_eq!(runaway["failed_batches"], 0);
    assert_eq!(normal["failed_batches"], 0);
    // 8 alarms (the default budgets: warning and limit of model_turns, repeated_calls,
    // tool_calls and wall_time) into a queue of 2 behind a sender that is retrying.
    wait_for("alarms dropped for the dead target", || {
        let dropped =
            d.metric("toolwatch_alarm_deliveries_total{target=\"dead\",outcome=\"dropped\"}");
        (dropped > Some(0.0)).then_some(())
    });
    wait_for("a retry against the dead target", || {
        let retried =
            d.metric("toolwatch_alarm_deliveries_total{target=\"dead\",outcome=\"retried\"}");
        (retried > Some(0.0)).then_some(())
    });
    d.stop();
    // Everything acknowledged is archived, and every alarm is in the archive.
    let spans = read_table(&d.data_dir, "spans").len() as u64;
    let sent = runaway["spans"].as_u64().unwrap_or(0) + normal["spans"].as_u64().unwrap_or(0);
    assert_eq!(spans, sent);
    let alarms = read_table(&d.data_dir, "alarms");
    let fired = alarms.iter().filter(|a| a["level"] != "resolved").count();
    assert_eq!(fired, 8, "warning and limit of four default budgets");
    assert!(d.log_text().contains("alarm delivery queue full"));
    // The stop line counts the files of every table.
    let on_disk: usize = ["spans", "logs", "requests", "alarms", "findings"]
        .iter()
        .map(|t| crate::harness::parquet_files(&d.data_dir, t).len())
        .sum();
    let stopped = d
        .log_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["message"] == "toolwatch stopped")
        .expect("stop line");
    assert_eq!(stopped["files"].as_u64(), Some(on_disk as u64));
}
