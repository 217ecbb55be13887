//! The archive in object storage: a real S3-compatible server on this machine (moto's server
//! mode, from PyPI, in the test venv), the daemon uploading to it through a proxy that can cut
//! uploads short, and readers of the store (`query --url`, `trace --url`, `verify --url`,
//! pyarrow's S3 filesystem) reading it back.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::harness::{
    compact_now, free_addr, loadgen, parquet_files, python, query_n, toolwatch, try_request,
    wait_for, Daemon, DaemonOptions,
};

/// A secret access key no output may ever show.
const CANARY_SECRET: &str = "tWcanarySecretAccessKey0000000000000000000";
const BUCKET: &str = "toolwatch-archive";

/// moto's S3 server on a free loopback port, stopped when dropped.
struct S3Server {
    child: Child,
    addr: SocketAddr,
}

impl S3Server {
    fn start() -> S3Server {
        let addr = free_addr();
        let moto = python().with_file_name("moto_server");
        let child = Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &addr.port().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {} (scripts/test installs it): {e}", moto.display()));
        let server = S3Server { child, addr };
        wait_for("the S3 server to answer", || {
            try_request(reqwest::Method::GET, &server.url("/"), Vec::new())
                .filter(|(s, _)| *s == 200)
        });
        let (status, body) = try_request(
            reqwest::Method::PUT,
            &server.url(&format!("/{BUCKET}")),
            Vec::new(),
        )
        .expect("create the bucket");
        assert_eq!(status, 200, "{body}");
        server
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every key under `prefix` in the bucket, asked directly (not through the proxy).
    fn keys(&self, prefix: &str) -> Vec<String> {
        let (status, body) = try_request(
            reqwest::Method::GET,
            &self.url(&format!(
                "/{BUCKET}?list-type=2&max-keys=1000&prefix={prefix}"
            )),
            Vec::new(),
        )
        .expect("list");
        assert_eq!(status, 200, "{body}");
        assert!(!body.contains("<IsTruncated>true"), "more than 1000 keys");
        body.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_string()))
            .collect()
    }

    /// Multipart uploads begun and neither completed nor aborted.
    fn pending_multipart_uploads(&self) -> usize {
        let (status, body) = try_request(
            reqwest::Method::GET,
            &self.url(&format!("/{BUCKET}?uploads")),
            Vec::new(),
        )
        .expect("list uploads");
        assert_eq!(status, 200, "{body}");
        body.matches("<Upload>").count()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP proxy in front of the S3 server that, while `cut` is set, forwards only the first
/// `CUT_AFTER` bytes a client sends on each connection and then drops it: every request
/// with a body larger than that (each archive file) fails mid-upload, as on a lossy network.
struct CuttingProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    cut_connections: Arc<AtomicU64>,
}

const CUT_AFTER: u64 = 3000;

impl CuttingProxy {
    fn start(upstream: SocketAddr, cut: bool) -> CuttingProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let flag = Arc::new(AtomicBool::new(cut));
        let cut_connections = Arc::new(AtomicU64::new(0));
        let (f, n) = (Arc::clone(&flag), Arc::clone(&cut_connections));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = std::net::TcpStream::connect(upstream) else {
                    continue;
                };
                let cut = f.load(Ordering::SeqCst);
                let n = Arc::clone(&n);
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                std::thread::spawn(move || pipe(c2, s2, cut.then_some(CUT_AFTER), n));
                let never = Arc::new(AtomicU64::new(0));
                std::thread::spawn(move || pipe(server, client, None, never));
            }
        });
        CuttingProxy {
            addr,
            cut: flag,
            cut_connections,
        }
    }
}

/// Copies `from` to `to`, up to `limit` bytes if given (then both are shut down).
fn pipe(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    limit: Option<u64>,
    cuts: Arc<AtomicU64>,
) {
    use std::io::{Read, Write};
    let mut sent = 0u64;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let allowed = match limit {
            Some(l) => (l.saturating_sub(sent) as usize).min(n),
            None => n,
        };
        if to.write_all(&buf[..allowed]).is_err() {
            break;
        }
        sent += allowed as u64;
        if allowed < n {
            cuts.fetch_add(1, Ordering::SeqCst);
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// The environment of a daemon (or command) using the S3 server behind `endpoint`.
fn s3_env(endpoint: SocketAddr) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", format!("http://{endpoint}")),
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", CANARY_SECRET.to_string()),
        ("AWS_REGION", "us-east-1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn store_url() -> String {
    format!("s3://{BUCKET}/audit")
}

/// `toolwatch ARGS` with the S3 environment; (exit code, stdout, stderr).
fn run(endpoint: SocketAddr, args: &[&str]) -> (i32, String, String) {
    let out = toolwatch()
        .args(args)
        .envs(s3_env(endpoint))
        .output()
        .expect("run toolwatch");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// `SELECT count(*) AS n FROM table` over the store.
fn store_count(endpoint: SocketAddr, table: &str) -> u64 {
    store_count_sql(endpoint, &format!("SELECT count(*) AS n FROM {table}"))
}

/// The keys a table's local files have in the store, sorted.
fn local_keys(data: &Path, table: &str) -> Vec<String> {
    let mut keys: Vec<String> = parquet_files(data, table)
        .iter()
        .map(|p| format!("audit/{}", p.strip_prefix(data).unwrap().display()))
        .collect();
    keys.sort();
    keys
}

fn daemon(endpoint: SocketAddr, data_dir: Option<&Path>, extra: &[(&str, &str)]) -> Daemon {
    let mut env = s3_env(endpoint);
    env.extend(
        [
            ("TOOLWATCH_STORAGE__URL", store_url().as_str()),
            ("TOOLWATCH_STORAGE__UPLOAD_EVERY", "200ms"),
            ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE", "1s"),
            ("TOOLWATCH_ARCHIVE__COMPACT_EVERY", "0s"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    Daemon::start_with(DaemonOptions {
        env,
        data_dir: data_dir.map(Path::to_path_buf),
        ..Default::default()
    })
}

/// The archive files (not manifest segments) in the store.
fn stored_files(s3: &S3Server, table: &str) -> Vec<String> {
    s3.keys(&format!("audit/{table}/"))
        .into_iter()
        .filter(|k| k.ends_with(".parquet"))
        .collect()
}

#[test]
fn the_daemon_uploads_the_archive_and_every_reader_of_the_store_agrees_with_the_local_one() {
    let s3 = S3Server::start();
    let proxy = CuttingProxy::start(s3.addr, false);
    let mut d = daemon(
        proxy.addr,
        None,
        &[("TOOLWATCH_STORAGE__DELETE_DELAY", "0s")],
    );
    let data = d.data_dir.clone();
    // Two rounds, each written out before the next: partitions get two files each, for the
    // compaction below to merge.
    let mut local = 0;
    for seed in ["7", "8"] {
        loadgen(&[
            "--target",
            &d.grpc_url(),
            "--requests",
            "20",
            "--seed",
            seed,
        ]);
        local = wait_for("the archive to be written locally", || {
            let n = query_n(&data, &["--no-flush"], "SELECT count(*) AS n FROM spans");
            (n > local && n == query_n(&data, &[], "SELECT count(*) AS n FROM spans")).then_some(n)
        });
    }
    // Everything the daemon wrote locally reaches the store.
    wait_for("the store to hold every span", || {
        (store_count(proxy.addr, "spans") == local).then_some(())
    });
    let metrics = d.admin_get("/metrics").1;
    d.stop();
    let local = query_n(&data, &["--no-flush"], "SELECT count(*) AS n FROM spans");
    wait_for("the last upload at shutdown", || {
        (store_count(proxy.addr, "spans") == local).then_some(())
    });
    let local_requests = query_n(&data, &["--no-flush"], "SELECT count(*) AS n FROM requests");
    assert_eq!(local_requests, 40);
    assert_eq!(store_count(proxy.addr, "requests"), 40);
    // The files in the store are the local ones, path for path.
    let local_files = local_keys(&data, "spans");
    assert_eq!(stored_files(&s3, "spans"), local_files);
    assert_eq!(s3.pending_multipart_uploads(), 0);

    // pyarrow's own S3 filesystem reads the same rows where `toolwatch ddl` says they are.
    let script = r#"
import sys, pyarrow.dataset as ds, pyarrow.fs as fs
s3 = fs.S3FileSystem(endpoint_override=sys.argv[1], scheme="http", access_key="testing",
                     secret_key=sys.argv[2], region="us-east-1")
t = ds.dataset(sys.argv[3], filesystem=s3, format="parquet", partitioning="hive").to_table()
print(t.num_rows, len(set(t.column("tenant").to_pylist())))
"#;
    let out = Command::new(python())
        .args([
            "-c",
            script,
            &s3.addr.to_string(),
            CANARY_SECRET,
            &format!("{BUCKET}/audit/spans"),
        ])
        .output()
        .expect("pyarrow");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tenants = query_n(
        &data,
        &["--no-flush"],
        "SELECT count(DISTINCT tenant) AS n FROM spans",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{local} {tenants}")
    );

    // `trace --url` finds a request in the store as `trace` finds it locally.
    let (code, id, err) = run(
        proxy.addr,
        &[
            "query",
            "--data-dir",
            data.to_str().unwrap(),
            "--no-flush",
            "--format",
            "csv",
            "SELECT request_id FROM requests ORDER BY request_id LIMIT 1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let id = id.lines().nth(1).expect("a request id").to_string();
    let (code, local_tree, err) = run(
        proxy.addr,
        &[
            "trace",
            "--data-dir",
            data.to_str().unwrap(),
            "--no-flush",
            "--json",
            &id,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, store_tree, err) = run(proxy.addr, &["trace", "--url", &store_url(), "--json", &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(store_tree, local_tree);

    // The store verifies.
    store_verifies(proxy.addr);

    // A compaction on the local archive reaches the store: merged objects go (no delay
    // here), the merged file comes, readers count every span once.
    let before = stored_files(&s3, "spans").len();
    compact_now(&data, &["--min-files", "2"]);
    // No daemon serves the archive now: the command uploads the compaction's manifest.
    let dir = data.to_str().unwrap();
    upload_ok(proxy.addr, dir, &[]);
    // Merged-away objects stay for storage.delete_delay (15 minutes by default), so readers
    // that listed them still find them; the manifests already say they are gone.
    assert!(stored_files(&s3, "spans").len() > parquet_files(&data, "spans").len());
    assert_eq!(store_count(proxy.addr, "spans"), local);
    store_verifies(proxy.addr);
    upload_ok(proxy.addr, dir, &["--delete-now"]);
    let local_files = local_keys(&data, "spans");
    assert!(local_files.len() < before, "compaction merged files");
    assert_eq!(stored_files(&s3, "spans"), local_files);
    assert_eq!(store_count(proxy.addr, "spans"), local);
    store_verifies(proxy.addr);

    // Tampering in the store is named, object by object.
    let modified = local_files[0].clone();
    let missing = stored_files(&s3, "requests")[0].clone();
    let extra = "audit/spans/tenant=x/date=2026-01-01/hour=00/part-slipped-in.parquet";
    // Signed requests, as whoever holds the bucket's credentials would send them (moto
    // refuses an unsigned overwrite).
    let tamper = r#"
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="testing",
                  aws_secret_access_key=sys.argv[2], region_name="us-east-1")
bucket, modified, missing, extra = sys.argv[3:7]
s3.put_object(Bucket=bucket, Key=modified, Body=b"PAR1 not the file")
s3.delete_object(Bucket=bucket, Key=missing)
s3.put_object(Bucket=bucket, Key=extra, Body=b"PAR1")
"#;
    let out = Command::new(python())
        .args([
            "-c",
            tamper,
            &s3.url(""),
            CANARY_SECRET,
            BUCKET,
            &modified,
            &missing,
            extra,
        ])
        .output()
        .expect("boto3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, problems, _) = run(proxy.addr, &["verify", "--url", &store_url()]);
    let strip = |k: &str| k.strip_prefix("audit/").unwrap().to_string();
    let mut expected = vec![
        format!("extra {}", strip(extra)),
        format!("missing {}", strip(&missing)),
        format!("modified {}", strip(&modified)),
    ];
    expected.sort();
    let mut got: Vec<String> = problems.lines().map(str::to_string).collect();
    got.sort();
    assert_eq!((code, got), (1, expected));

    // A reader of the store answers without the missing file, and says so.
    let (code, out, err) = run(
        proxy.addr,
        &[
            "query",
            "--url",
            &store_url(),
            "--format",
            "json",
            "SELECT count(*) AS n FROM requests",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: 1 files the store's manifests record are not in it")
            && err.contains(strip(&missing).as_str()),
        "{err}"
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("rows");
    assert!(rows[0]["n"].as_u64().expect("count") < 40);

    // The bucket emptied (restored from nothing, or another store under the URL): the
    // upload stops and says what to do; a resync puts everything again, tampering undone.
    let empty = r#"
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="testing",
                  aws_secret_access_key=sys.argv[2], region_name="us-east-1")
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[3], Prefix="audit/"):
    for o in page.get("Contents", []):
        s3.delete_object(Bucket=sys.argv[3], Key=o["Key"])
"#;
    let out = Command::new(python())
        .args(["-c", empty, &s3.url(""), CANARY_SECRET, BUCKET])
        .output()
        .expect("boto3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s3.keys("audit/"), Vec::<String>::new());
    let upload = ["upload", "--data-dir", dir, "--url", &store_url()];
    let (code, _, err) = run(proxy.addr, &upload);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the object store lacks lines of this manifest that were uploaded")
            && err.contains("upload --resync"),
        "{err}"
    );
    assert!(!err.contains(CANARY_SECRET));
    assert_eq!(store_count(proxy.addr, "spans"), 0);
    upload_ok(proxy.addr, dir, &["--resync"]);
    assert_eq!(stored_files(&s3, "spans"), local_files);
    assert_eq!(store_count(proxy.addr, "spans"), local);
    store_verifies(proxy.addr);
    upload_ok(proxy.addr, dir, &[]);

    // The secret access key reached no log line, metric or message.
    let log = d.log_text();
    assert!(!log.contains(CANARY_SECRET));
    assert!(!metrics.contains(CANARY_SECRET));
    // Counted as they went up (a file is uploaded once; the rest are skipped gone or merged).
    let uploaded = crate::harness::metric_text(&metrics, "toolwatch_archive_uploaded_files_total");
    assert!(uploaded.is_some_and(|n| n >= 2.0), "{metrics}");
}

#[test]
fn an_upload_cut_short_shows_nothing_loses_nothing_and_is_retried() {
    let s3 = S3Server::start();
    // Every connection is cut after a few KiB from the start: no archive file gets through.
    let proxy = CuttingProxy::start(s3.addr, true);
    let mut d = daemon(
        proxy.addr,
        None,
        // Every file in parts, so the failed parts' uploads must be aborted.
        &[("TOOLWATCH_STORAGE__MULTIPART_BYTES", "1")],
    );
    loadgen(&["--target", &d.grpc_url(), "--requests", "30", "--seed", "9"]);
    let data = d.data_dir.clone();
    wait_for("files written locally", || {
        (!parquet_files(&data, "spans").is_empty()).then_some(())
    });
    wait_for("failed uploads", || {
        d.metric("toolwatch_archive_upload_failures_total{reason=\"store\"}")
            .filter(|n| *n >= 2.0)
    });
    assert!(proxy.cut_connections.load(Ordering::SeqCst) > 0);
    // Nothing is visible: no manifest segment names a file, so no reader of the manifests
    // sees one; and no archive object was completed.
    assert_eq!(s3.keys("audit/_manifest/"), Vec::<String>::new());
    assert_eq!(stored_files(&s3, "spans"), Vec::<String>::new());
    assert_eq!(store_count(s3.addr, "spans"), 0);
    store_verifies(s3.addr);

    // The network heals: everything goes up, once, and no part is left behind.
    proxy.cut.store(false, Ordering::SeqCst);
    let local = query_n(&data, &[], "SELECT count(*) AS n FROM spans");
    assert!(local > 0);
    wait_for("the retried uploads", || {
        (store_count(s3.addr, "spans")
            == query_n(&data, &["--no-flush"], "SELECT count(*) AS n FROM spans")
            && d.metric("toolwatch_archive_upload_pending_bytes") == Some(0.0))
        .then_some(())
    });
    d.stop();
    let (code, _, err) = run(
        s3.addr,
        &[
            "upload",
            "--data-dir",
            data.to_str().unwrap(),
            "--url",
            &store_url(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let local = query_n(&data, &["--no-flush"], "SELECT count(*) AS n FROM spans");
    assert_eq!(store_count(s3.addr, "spans"), local);
    assert_eq!(store_count(s3.addr, "requests"), 30, "every request once");
    let local_files = local_keys(&data, "spans");
    assert_eq!(stored_files(&s3, "spans"), local_files);
    assert_eq!(s3.pending_multipart_uploads(), 0);
    store_verifies(s3.addr);
    let log = d.log_text();
    assert!(
        log.contains("archive upload failed; nothing is lost"),
        "{log}"
    );
    assert!(!log.contains(CANARY_SECRET));
}

/// `toolwatch ARGS` with the S3 environment and `stdin` on its standard input.
fn run_with_stdin(endpoint: SocketAddr, args: &[&str], stdin: &str) -> (i32, String, String) {
    use std::io::Write;
    let mut child = toolwatch()
        .args(args)
        .envs(s3_env(endpoint))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start toolwatch");
    let mut pipe = child.stdin.take().expect("stdin");
    writeln!(pipe, "{stdin}").expect("write stdin");
    drop(pipe);
    let out = child.wait_with_output().expect("toolwatch");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The dates of a table's partitions (of tenant `acme`) in the store, and locally (a local
/// partition folder holding only its offload marker counts as not local).
fn dates(s3: &S3Server, data: &Path, table: &str) -> (Vec<String>, Vec<String>) {
    let date_of = |p: &str| {
        p.split('/')
            .find_map(|c| c.strip_prefix("date="))
            .unwrap_or("")
            .to_string()
    };
    let mut stored: Vec<String> = stored_files(s3, table).iter().map(|k| date_of(k)).collect();
    stored.dedup();
    let mut local: Vec<String> = parquet_files(data, table)
        .iter()
        .map(|p| date_of(&p.to_string_lossy()))
        .collect();
    local.sort();
    local.dedup();
    (stored, local)
}

/// A tenant whose folder name holds escapes (`tenant=acme%40corp%2Feu`): object keys keep
/// them as they are.
const TENANT: &str = "acme@corp/eu";

/// A leaked value planted five days ago, in a partition offloaded since.
const PLANTED: &str = "Tr0ub4dor-in-the-offloaded-hour";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offloaded_hours_live_in_the_store_alone_and_retention_and_scrub_reach_them_there() {
    use crate::protect_e2e::{kv, s};
    const DAY: i64 = 86_400;
    let s3 = S3Server::start();
    let now_s = chrono::Utc::now().timestamp();
    let today = now_s - now_s.rem_euclid(DAY);
    let mut d = daemon(s3.addr, None, &[]);
    // One span at 01:00 UTC on each of the last ten days (today's only if 01:00 has passed).
    let spans: Vec<serde_json::Value> = (0..10i64)
        .map(|day| (day, (today - day * DAY + 3600) * 1_000_000_000))
        .filter(|(_, start)| *start < now_s * 1_000_000_000 - 1_000_000)
        .map(|(day, start)| {
            let mut attrs = vec![kv("gen_ai.operation.name", s("execute_tool"))];
            if day == 5 {
                attrs.push(kv("tool.note", s(PLANTED)));
            }
            serde_json::json!({
                "traceId": format!("{:032x}", day + 1),
                "spanId": format!("{:016x}", day + 1),
                "name": "execute_tool",
                "startTimeUnixNano": start.to_string(),
                "endTimeUnixNano": (start + 1_000_000).to_string(),
                "attributes": attrs,
            })
        })
        .collect();
    let sent = spans.len() as u64;
    let body = serde_json::json!({ "resourceSpans": [{
        "resource": { "attributes": [ kv("executor.tenant_id", s(TENANT)) ] },
        "scopeSpans": [{ "spans": spans }],
    }]});
    crate::otlp_json::post_accepted(&d, "/v1/traces", &body).await;
    let data = d.data_dir.clone();
    wait_for("the store to hold every span", || {
        (store_count(s3.addr, "spans") == sent).then_some(())
    });
    d.stop();

    // Local copies of hours that ended more than two days ago go.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("toolwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\nurl = \"{}\"\nlocal_keep = \"2d\"\ndelete_delay = \"0s\"\n[archive.retention]\nspans = \"7d\"\n",
            store_url()
        ),
    )
    .expect("config");
    let (cfg, dir_arg) = (config.to_str().unwrap(), data.to_str().unwrap());
    let (code, _, err) = run(s3.addr, &["upload", "--config", cfg, "--data-dir", dir_arg]);
    assert_eq!(code, 0, "{err}");
    let day = |n: i64| {
        chrono::DateTime::from_timestamp(today - n * DAY, 0)
            .unwrap()
            .format("%Y-%m-%d")
            .to_string()
    };
    let days = |range: std::ops::Range<i64>| -> Vec<String> {
        let mut v: Vec<String> = range
            .map(day)
            .filter(|d| spans_sent_on(d, today, now_s))
            .collect();
        v.sort();
        v
    };
    let (stored, local) = dates(&s3, &data, "spans");
    assert_eq!(stored, days(0..10));
    // Day n's span is in its 01:00 hour, which ends at 02:00: the days whose hour ended less
    // than `d` days ago (0..d, and day d too before 02:00 UTC).
    let within = |d: i64| {
        (0..10)
            .take_while(|n| today - n * DAY + 7200 > now_s - d * DAY)
            .count() as i64
    };
    let local_days = within(2);
    assert_eq!(
        local,
        days(0..local_days),
        "hours that ended less than 2 days ago stay"
    );
    assert!(err.contains("offloaded "), "{err}");
    assert_eq!(store_count(s3.addr, "spans"), sent);
    let local_n = query_n(&data, &["--no-flush"], "SELECT count(*) AS n FROM spans");
    assert_eq!(local_n, days(0..local_days).len() as u64);
    // Both views verify: locally the offloads are removals by policy, in the store the
    // objects are still live.
    assert_eq!(crate::harness::verify_archive(&data), (vec![], 0));
    store_verifies(s3.addr);

    // Retention reaches offloaded hours: their objects go from the store.
    let (code, _, err) = run(
        s3.addr,
        &["retention", "--config", cfg, "--data-dir", dir_arg],
    );
    assert_eq!(code, 0, "{err}");
    upload_deleting_now(s3.addr, cfg, dir_arg);
    let (stored, _) = dates(&s3, &data, "spans");
    assert_eq!(stored, days(0..within(7)));
    let kept = days(0..within(7)).len() as u64;
    assert_eq!(store_count(s3.addr, "spans"), kept);
    let of_tenant = format!("SELECT count(*) AS n FROM spans WHERE tenant = '{TENANT}'");
    assert_eq!(store_count_sql(s3.addr, &of_tenant), kept);
    assert_eq!(
        query_n(&data, &["--no-flush"], &of_tenant),
        days(0..local_days).len() as u64
    );
    assert_eq!(crate::harness::verify_archive(&data), (vec![], 0));
    store_verifies(s3.addr);

    // Scrub reaches them too: the planted value goes from the offloaded hour's object.
    let holding = format!("SELECT count(*) AS n FROM spans WHERE attributes LIKE '%{PLANTED}%'");
    assert_eq!(
        store_count_sql(s3.addr, &holding),
        1,
        "planted before the scrub"
    );
    let (code, out, err) = run_with_stdin(
        s3.addr,
        &[
            "scrub",
            "--config",
            cfg,
            "--data-dir",
            dir_arg,
            "--value-from-stdin",
        ],
        PLANTED,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("removed 1 values from 1 files"), "{out}");
    upload_deleting_now(s3.addr, cfg, dir_arg);
    assert_eq!(store_count_sql(s3.addr, &holding), 0);
    assert_eq!(store_count(s3.addr, "spans"), kept);
    let (stored, local) = dates(&s3, &data, "spans");
    assert_eq!(stored, days(0..within(7)));
    assert_eq!(
        local,
        days(0..local_days),
        "the scrubbed file is offloaded again"
    );
    assert_eq!(crate::harness::verify_archive(&data), (vec![], 0));
    store_verifies(s3.addr);
}

/// `toolwatch upload --config CFG --data-dir DIR --delete-now`, which must succeed.
/// `toolwatch verify --url` of the store, which must find nothing wrong.
fn store_verifies(endpoint: SocketAddr) {
    let (code, problems, summary) = run(endpoint, &["verify", "--url", &store_url()]);
    assert_eq!((code, problems.as_str()), (0, ""), "{summary}");
}

/// `toolwatch upload --data-dir DIR --url STORE` with `extra`, which must succeed.
fn upload_ok(endpoint: SocketAddr, dir: &str, extra: &[&str]) {
    let mut args = vec!["upload", "--data-dir", dir, "--url"];
    let url = store_url();
    args.push(&url);
    args.extend_from_slice(extra);
    let (code, _, err) = run(endpoint, &args);
    assert_eq!(code, 0, "{err}");
}

fn upload_deleting_now(endpoint: SocketAddr, cfg: &str, dir: &str) {
    let args = ["upload", "--config", cfg, "--data-dir", dir, "--delete-now"];
    let (code, _, err) = run(endpoint, &args);
    assert_eq!(code, 0, "{err}");
}

/// Whether the test sent a span on date `date` (today's 01:00 span only once it has passed).
fn spans_sent_on(date: &str, today: i64, now_s: i64) -> bool {
    let today_date = chrono::DateTime::from_timestamp(today, 0)
        .unwrap()
        .format("%Y-%m-%d")
        .to_string();
    date != today_date || today + 3600 < now_s
}

/// The `n` of `sql` over the store.
fn store_count_sql(endpoint: SocketAddr, sql: &str) -> u64 {
    let (code, out, err) = run(
        endpoint,
        &["query", "--url", &store_url(), "--format", "json", sql],
    );
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).expect("rows");
    rows[0]["n"].as_u64().expect("count")
}

/// The console over the archive in S3 (`toolwatch console --url s3://…`), as `query --url`
/// reads it: the uploaded requests, a finding marked on its evidence span, and the store's
/// secret key on no page and in no line the console prints.
#[test]
fn the_console_reads_the_archive_in_s3() {
    let s3 = S3Server::start();
    let mut d = crate::console::quick_daemon();
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        "4",
        "--seed",
        "71",
        "--profile",
        "faults",
    ]);
    assert_eq!(report["failed_batches"], 0);
    d.wait_for_complete_summaries(4);
    d.stop();
    let data = d.data_dir.to_str().expect("utf-8").to_string();
    let (code, _, err) = run(
        s3.addr,
        &["upload", "--data-dir", &data, "--url", &store_url()],
    );
    assert_eq!(code, 0, "{err}");

    let (mut child, base) =
        crate::console::console_with_env(&["--url", &store_url()], &s3_env(s3.addr), |line| {
            assert!(!line.contains(CANARY_SECRET), "{line}")
        });
    let get = |path: &str| {
        try_request(reqwest::Method::GET, &format!("{base}{path}"), Vec::new())
            .unwrap_or_else(|| panic!("GET {path}"))
    };
    let (status, page) = get("/ui/");
    assert_eq!(status, 200, "{page}");
    let links: Vec<&str> = page
        .match_indices("href=\"/ui/requests/")
        .map(|(at, _)| {
            let rest = &page[at + "href=\"".len()..];
            &rest[..rest.find('"').unwrap_or(rest.len())]
        })
        .collect();
    assert_eq!(
        links,
        [
            "/ui/requests/tenant-0/req-71-00000003",
            "/ui/requests/tenant-0/req-71-00000002",
            "/ui/requests/tenant-0/req-71-00000001",
            "/ui/requests/tenant-0/req-71-00000000",
        ]
    );
    let (status, request) = get("/ui/requests/tenant-0/req-71-00000000");
    assert_eq!(status, 200);
    assert!(
        request.contains("<span class=\"warn\">finding: write_without_allow</span>"),
        "{request}"
    );
    for (path, body) in [("/ui/", &page), ("request", &request)] {
        assert!(!body.contains(CANARY_SECRET), "{path}");
        assert!(!body.contains("role=\"status\""), "nothing missing: {path}");
    }
    child.kill().ok();
    child.wait().ok();
}
