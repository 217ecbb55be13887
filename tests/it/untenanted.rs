//! A deployment that names no tenant anywhere pays nothing for tenancy: the official Python
//! SDK (batch processor) sends a complete agent run, then a looping agent whose root stays
//! open, to a daemon on its defaults. The complete run is readable and summarized under
//! `default`; the loop's budget alarms fire while its root is still open, and no consumer
//! holds anything back for a tenant that will never be named.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

use serde_json::Value;

use crate::harness::{
    by_key, collect_stderr, metric_sum, python, query_n, query_rows, read_table, trace_json,
    trace_nodes, wait_for, Daemon, DEADLINE, TENANT_CONSUMERS,
};

/// `send_untenanted.py`, driven line by line (see the script's notes).
struct Script {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Script {
    fn start(endpoint: &str) -> Script {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/send_untenanted.py");
        let mut child = Command::new(python())
            .arg(path)
            .args(["--endpoint", endpoint])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_RESOURCE_ATTRIBUTES")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start send_untenanted.py");
        let stderr = collect_stderr(&mut child);
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Script {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        }
    }

    /// The next line the script prints (its step's JSON), and when it arrived.
    fn next(&mut self, phase: &str) -> (Value, Instant) {
        match self.lines.recv_timeout(DEADLINE) {
            Ok(line) => {
                let at = Instant::now();
                let v: Value = serde_json::from_str(&line).expect("a JSON line");
                assert_eq!(v["phase"], phase, "{v}");
                (v, at)
            }
            Err(RecvTimeoutError::Timeout) => panic!("no {phase} line from the script in time"),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().expect("wait");
                // Let the reader thread collect the last lines of the traceback.
                std::thread::sleep(std::time::Duration::from_millis(100));
                panic!(
                    "send_untenanted.py exited ({status}) before {phase}:\n{}",
                    self.stderr.lock().expect("stderr").join("\n")
                );
            }
        }
    }

    fn say(&mut self, word: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{word}").expect("write to the script");
        stdin.flush().expect("flush");
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for the script");
        assert!(
            status.success(),
            "send_untenanted.py: {status}\n{}",
            self.stderr.lock().expect("stderr").join("\n")
        );
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `toolwatch trace --json <id>`'s view, once it succeeds.
fn trace_view(data: &Path, id: &str) -> Option<Value> {
    let out = trace_json(data, id);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("trace JSON"))
}

/// The per-request alarms the loop raises on the default budgets ([budget.request]:
/// model_turns 25, tool_calls 50, repeated_calls 5, warnings at 0.8): (budget, level,
/// observed, limit).
const LOOP_ALARMS: [(&str, &str, f64, f64); 6] = [
    ("model_turns", "limit", 25.0, 25.0),
    ("model_turns", "warning", 20.0, 25.0),
    ("repeated_calls", "limit", 5.0, 5.0),
    ("repeated_calls", "warning", 4.0, 5.0),
    ("tool_calls", "limit", 50.0, 50.0),
    ("tool_calls", "warning", 40.0, 50.0),
];

/// (budget, level, observed, limit) of alarm rows, sorted.
fn alarm_facts(rows: &[Value]) -> Vec<(String, String, f64, f64)> {
    let mut v: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r["budget"].as_str().unwrap_or_default().to_string(),
                r["level"].as_str().unwrap_or_default().to_string(),
                r["observed"].as_f64().unwrap_or(f64::NAN),
                r["limit_value"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect();
    v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    v
}

fn expected_alarms() -> Vec<(String, String, f64, f64)> {
    LOOP_ALARMS
        .iter()
        .map(|(b, l, o, lim)| (b.to_string(), l.to_string(), *o, *lim))
        .collect()
}

#[test]
fn a_deployment_naming_no_tenant_holds_nothing_and_alarms_while_the_loop_runs() {
    let started = Instant::now();
    let mut d = Daemon::start();
    let data = d.data_dir.clone();
    let mut script = Script::start(&d.http_url());

    // (a) One complete agent run: readable at once, then summarized, under `default`.
    let (complete, acked_a) = script.next("complete");
    assert_eq!(complete["acked"], 4, "{complete}");
    let request_a = complete["request_id"].as_str().expect("request id");
    let trace_a = complete["trace_id"].as_str().expect("trace id");
    let view = wait_for("the complete run in `toolwatch trace`", || {
        trace_view(&data, request_a).filter(|v| trace_nodes(&v["spans"]) == 4)
    });
    let visible_a = acked_a.elapsed();
    assert_eq!(view["request_id"], request_a);
    assert_eq!(view["trace_ids"], serde_json::json!([trace_a]));
    let by_tenant = format!(
        "SELECT count(*) AS n FROM spans WHERE trace_id = '{trace_a}' AND tenant = 'default'"
    );
    assert_eq!(
        query_n(&data, &[], &by_tenant),
        4,
        "the run's spans, under default"
    );
    let summary = wait_for("the complete run's summary", || {
        let rows = query_rows(
            &data,
            &format!(
                "SELECT tenant, completeness, span_count, model_turns, tool_calls, \
                 input_tokens, output_tokens, stop_reason FROM requests \
                 WHERE request_id = '{request_a}'"
            ),
        );
        (!rows.is_empty()).then_some(rows)
    });
    let summarized_a = acked_a.elapsed();
    assert_eq!(summary.len(), 1, "{summary:?}");
    let s = &summary[0];
    assert_eq!(s["tenant"], "default");
    assert_eq!(s["completeness"], "complete");
    assert_eq!(s["span_count"], 4);
    assert_eq!(s["model_turns"], 2);
    assert_eq!(s["tool_calls"], 1);
    assert_eq!(s["input_tokens"], 300);
    assert_eq!(s["output_tokens"], 40);
    assert_eq!(s["stop_reason"], "completed");

    // (b) The looping agent: 60 model turns and 60 identical tool calls under a root that
    // stays open until the alarms are seen.
    let requests_before = metric_sum(
        &d.admin_get("/metrics").1,
        "toolwatch_otlp_requests_total",
        "",
    );
    script.say("loop");
    let (looping, acked_b) = script.next("looping");
    assert_eq!(looping["acked"], 124, "{looping}");
    let request_b = looping["request_id"].as_str().expect("request id");
    let root_b = looping["root_span_id"].as_str().expect("root span id");
    let alarm = |budget: &str, level: &str| {
        d.metric(&format!(
            "toolwatch_budget_alarms_total{{tenant=\"default\",scope=\"request\",budget=\"{budget}\",level=\"{level}\"}}"
        ))
    };
    wait_for("the loop's repeated_calls alarm", || {
        (alarm("repeated_calls", "limit") == Some(1.0)).then_some(())
    });
    let alarmed_b = acked_b.elapsed();
    for (budget, level, _, _) in LOOP_ALARMS {
        assert_eq!(alarm(budget, level), Some(1.0), "{budget} {level}");
    }
    // Nothing is held, nothing went on unresolved: the sender's first root named no tenant.
    d.wait_until_consumers_hold_nothing(requests_before as u64 + 1);
    d.assert_nothing_unresolved();
    for consumer in TENANT_CONSUMERS {
        assert_eq!(
            d.metric(&format!(
                "toolwatch_tenant_held_items{{consumer=\"{consumer}\"}}"
            )),
            Some(0.0),
            "{consumer}"
        );
    }
    // While the root is open: the alarm rows are readable, the loop's spans are archived
    // under `default`, and its root is not (it has not ended, so it was never exported).
    let rows = wait_for("the loop's alarm rows while its root is open", || {
        let rows = query_rows(
            &data,
            &format!(
                "SELECT budget, level, observed, limit_value, tenant, scope FROM alarms \
                 WHERE scope_id = '{request_b}' AND level <> 'resolved'"
            ),
        );
        (rows.len() >= LOOP_ALARMS.len()).then_some(rows)
    });
    assert_eq!(alarm_facts(&rows), expected_alarms());
    assert!(rows
        .iter()
        .all(|r| r["tenant"] == "default" && r["scope"] == "request"));
    let loop_spans = format!(
        "SELECT count(*) AS n FROM spans WHERE request_id = '{request_b}' AND tenant = 'default'"
    );
    assert_eq!(query_n(&data, &[], &loop_spans), 120);
    let root_rows = format!("SELECT count(*) AS n FROM spans WHERE span_id = '{root_b}'");
    assert_eq!(query_n(&data, &[], &root_rows), 0, "the root is still open");

    // Now the root ends; it arrives after every alarm of its loop.
    script.say("end");
    let (ended, _) = script.next("ended");
    assert_eq!(ended["acked"], 125, "{ended}");
    let root_end_ns = ended["root_end_ns"].as_i64().expect("end time");
    script.finish();
    wait_for("the loop's root in the archive", || {
        (query_n(&data, &[], &root_rows) == 1).then_some(())
    });
    wait_for("the loop's summary", || {
        let sql = format!("SELECT count(*) AS n FROM requests WHERE request_id = '{request_b}'");
        (query_n(&data, &[], &sql) == 1).then_some(())
    });
    d.wait_until_consumers_hold_nothing(requests_before as u64 + 2);
    d.assert_nothing_unresolved();
    d.stop();

    let spans = by_key(&read_table(&data, "spans"), "span_id");
    assert_eq!(spans.len(), 4 + 121, "every span archived once");
    assert!(spans.values().all(|r| r["tenant"] == "default"));
    assert_eq!(spans[root_b]["end_time"].as_i64(), Some(root_end_ns));
    let alarms: Vec<Value> = read_table(&data, "alarms")
        .into_iter()
        .map(Value::Object)
        .filter(|a| a["scope_id"] == request_b)
        .collect();
    let firing: Vec<Value> = alarms
        .iter()
        .filter(|a| a["level"] != "resolved")
        .cloned()
        .collect();
    assert_eq!(alarm_facts(&firing), expected_alarms());
    for a in &firing {
        let raised = a["time"].as_i64().expect("alarm time");
        assert!(
            raised < root_end_ns,
            "{} {} raised at {raised}, after the root ended at {root_end_ns}",
            a["budget"],
            a["level"]
        );
    }
    let requests = read_table(&data, "requests");
    let loop_summary: Vec<_> = requests
        .iter()
        .filter(|r| r["request_id"] == request_b)
        .collect();
    assert_eq!(loop_summary.len(), 1, "{requests:?}");
    assert_eq!(loop_summary[0]["tenant"], "default");
    assert_eq!(loop_summary[0]["span_count"], 121);
    assert_eq!(loop_summary[0]["model_turns"], 60);
    assert_eq!(loop_summary[0]["tool_calls"], 60);
    assert_eq!(loop_summary[0]["stop_reason"], "repeated_call");

    println!(
        "untenanted: ack -> visible in `toolwatch trace` {:.0} ms; ack -> summary {:.0} ms; \
         ack -> repeated_calls alarm in /metrics {:.0} ms; test {:.1} s",
        visible_a.as_secs_f64() * 1e3,
        summarized_a.as_secs_f64() * 1e3,
        alarmed_b.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64()
    );
}
