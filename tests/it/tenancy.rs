//! One request, one tenant: the tenant named on the root span only, children and a second
//! service's spans exported first, by the official OpenTelemetry Python SDK.

use serde_json::Value;

use crate::harness::{assert_readers_agree, by_key, run_python, Daemon};

fn root_only_tenant(protocol: &str) {
    let mut d = Daemon::start();
    let endpoint = match protocol {
        "grpc" => d.grpc_url(),
        _ => d.http_url(),
    };
    let sent: Value = serde_json::from_str(&run_python(
        "send_root_tenant.py",
        &["--protocol", protocol, "--endpoint", &endpoint],
    ))
    .expect("sender output");
    // The simple processors exported each of the 7 spans and the log record on its own, and
    // the script returned only after every export was answered: 8 requests acknowledged.
    assert_eq!(
        d.metric("toolwatch_received_items_total{signal=\"traces\"}"),
        Some(7.0)
    );
    assert_eq!(
        d.metric("toolwatch_received_items_total{signal=\"logs\"}"),
        Some(1.0)
    );
    // Every consumer let go of the request's spans once the root came, and the stray span
    // (a root naming no tenant) settled its own trace at once: once each consumer has taken
    // all 8 records, nothing is held, and nothing went on unresolved.
    d.wait_until_consumers_hold_nothing(8);
    d.assert_nothing_unresolved();
    assert_eq!(d.metric("toolwatch_tenant_conflicts_total"), Some(1.0));
    d.stop();

    let spans = assert_readers_agree(&d.data_dir, "spans");
    assert_eq!(spans.len(), 7, "{protocol}");
    let spans = by_key(&spans, "span_id");
    let row = |name: &str| &spans[sent["spans"][name].as_str().expect("span id")];
    for name in ["root", "chat", "tool", "server", "db", "odd"] {
        assert_eq!(row(name)["tenant"], "acme", "{protocol}: {name}");
        assert_eq!(
            row(name)["trace_id"],
            sent["trace_id"],
            "{protocol}: {name}"
        );
    }
    assert_eq!(row("root")["claimed_tenant"], "acme");
    assert_eq!(row("odd")["claimed_tenant"], "globex", "the claim is kept");
    for name in ["chat", "tool", "server", "db"] {
        assert_eq!(
            row(name)["claimed_tenant"],
            Value::Null,
            "{name}: no claim invented"
        );
    }
    assert_eq!(row("server")["service_name"], "billing-api");
    assert_eq!(row("stray")["tenant"], "default");

    let logs = assert_readers_agree(&d.data_dir, "logs");
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0]["tenant"], "acme");
    assert_eq!(logs[0]["trace_id"], sent["trace_id"]);

    let requests = assert_readers_agree(&d.data_dir, "requests");
    let acme: Vec<_> = requests.iter().filter(|r| r["tenant"] == "acme").collect();
    assert_eq!(acme.len(), 1, "{protocol}: one summary: {requests:?}");
    let r = acme[0];
    assert_eq!(r["request_id"], "req-root-1");
    assert_eq!(r["completeness"], "complete");
    assert_eq!(r["span_count"], 6);
    assert_eq!(r["model_turns"], 1);
    assert_eq!(r["tool_calls"], 1);
    assert_eq!(r["input_tokens"], 900);
    let default: Vec<_> = requests
        .iter()
        .filter(|r| r["tenant"] == "default")
        .collect();
    assert_eq!(default.len(), 1, "{protocol}: only the stray trace");
    assert_eq!(default[0]["request_id"], sent["stray_trace_id"]);
    assert_eq!(default[0]["span_count"], 1);
}

#[test]
fn the_root_span_names_the_tenant_of_every_span_over_http() {
    root_only_tenant("http");
}

#[test]
fn the_root_span_names_the_tenant_of_every_span_over_grpc() {
    root_only_tenant("grpc");
}
