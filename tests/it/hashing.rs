//! Idempotency-key hashes are stable across restarts under the same key, differ under
//! another key, match `toolwatch hash-key`, and the raw key appears nowhere.

use serde_json::json;

use crate::harness::{read_table, toolwatch, Daemon, DaemonOptions};
use crate::otlp_json::post;

const RAW: &str = "idem-stable-7f3a9c";

fn span(span_id: &str) -> Vec<u8> {
    json!({ "resourceSpans": [{ "scopeSpans": [{ "spans": [{
        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": span_id,
        "name": "execute_tool refund_order", "startTimeUnixNano": "1767225600000000000",
        "endTimeUnixNano": "1767225600100000000",
        "attributes": [
            { "key": "gen_ai.operation.name", "value": { "stringValue": "execute_tool" } },
            { "key": "executor.idempotency_key", "value": { "stringValue": RAW } },
        ]
    }]}]}]})
    .to_string()
    .into_bytes()
}

async fn send_one(opts: DaemonOptions, span_id: &str) -> Daemon {
    let mut d = Daemon::start_with(opts);
    let (status, body) = post(
        &format!("{}/v1/traces", d.http_url()),
        "application/json",
        None,
        span(span_id),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    d.stop();
    d
}

fn hashes(d: &Daemon) -> Vec<String> {
    let rows = read_table(&d.data_dir, "spans");
    for r in &rows {
        assert!(
            !serde_json::to_string(r).expect("json").contains(RAW),
            "raw key archived"
        );
    }
    rows.iter()
        .map(|r| {
            r["idempotency_key_hash"]
                .as_str()
                .expect("hash")
                .to_string()
        })
        .collect()
}

fn hash_key(args: &[&str]) -> String {
    let out = toolwatch()
        .arg("hash-key")
        .args(args)
        .output()
        .expect("hash-key");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashes_are_stable_across_restarts_and_differ_by_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let first = send_one(
        DaemonOptions {
            data_dir: Some(data.clone()),
            ..Default::default()
        },
        "00f067aa0ba902b7",
    )
    .await;
    let second = send_one(
        DaemonOptions {
            data_dir: Some(data.clone()),
            ..Default::default()
        },
        "00f067aa0ba902b8",
    )
    .await;
    let same = hashes(&second);
    assert_eq!(same.len(), 2);
    assert_eq!(
        same[0], same[1],
        "same key after a restart gives the same hash"
    );
    assert!(!first.log_text().contains(RAW) && !second.log_text().contains(RAW));

    // What a responder runs to find the rows.
    let printed = hash_key(&["--data-dir", data.to_str().expect("utf-8"), RAW]);
    assert_eq!(printed, format!("{}\tcurrent\n", same[0]));

    // Another data directory means another key, and another hash.
    let other = send_one(DaemonOptions::default(), "00f067aa0ba902b9").await;
    let different = hashes(&other);
    assert_eq!(different.len(), 1);
    assert_ne!(different[0], same[0]);

    // A key from an environment variable named in the config.
    let key = "11".repeat(32);
    let from_env = send_one(
        DaemonOptions {
            env: vec![
                (
                    "TOOLWATCH_HASHING__KEY_ENV".into(),
                    "TW_TEST_HASH_KEY".into(),
                ),
                ("TW_TEST_HASH_KEY".into(), key.clone()),
            ],
            ..Default::default()
        },
        "00f067aa0ba902ba",
    )
    .await;
    let expected = toolwatch::protect::KeyedHasher::from_hex(&key, "test")
        .expect("key")
        .hash(RAW);
    assert_eq!(hashes(&from_env), vec![expected.clone()]);
    assert!(
        !from_env.data_dir.join("state/hash.key").exists(),
        "no key file when the key is given"
    );

    // After a rotation, hash-key prints the hash under the old key too.
    let old = dir.path().join("old.key");
    std::fs::write(&old, "22".repeat(32)).expect("write old key");
    let out = toolwatch()
        .args(["hash-key", "--data-dir", data.to_str().expect("utf-8"), RAW])
        .env(
            "TOOLWATCH_HASHING__PREVIOUS_KEY_FILES",
            format!("[\"{}\"]", old.display()),
        )
        .output()
        .expect("hash-key");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let old_hash = toolwatch::protect::KeyedHasher::from_hex(&"22".repeat(32), "old")
        .expect("key")
        .hash(RAW);
    assert_eq!(
        text,
        format!(
            "{}\tcurrent\n{old_hash}\tprevious ({})\n",
            same[0],
            old.display()
        )
    );
}
