//! Starts the real `toolwatch` binary on free loopback ports and reads what it archived.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Map, Value};

/// How long a test waits for a condition before failing.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `check` until it returns `Some`, or panics after [`DEADLINE`] with `what`.
pub fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The built binary.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_toolwatch")
}

/// A command for the built binary, without any `TOOLWATCH_*` variable of the caller's
/// environment (they would override the configuration under test).
pub fn toolwatch() -> Command {
    let mut c = Command::new(binary());
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLWATCH_") {
            c.env_remove(k);
        }
    }
    c
}

/// Runs `toolwatch loadgen ARGS --json` and returns its report, panicking with its stderr
/// if it fails.
pub fn loadgen(args: &[&str]) -> Value {
    let out = toolwatch()
        .arg("loadgen")
        .args(args)
        .arg("--json")
        .output()
        .expect("run loadgen");
    assert!(
        out.status.success(),
        "loadgen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("loadgen JSON report")
}

/// Every line a child writes to its (piped) stderr, collected as it comes.
pub fn collect_stderr(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let stderr = child.stderr.take().expect("stderr piped");
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            sink.lock().expect("log lock").push(line);
        }
    });
    log
}

/// A running daemon.
pub struct Daemon {
    child: Option<Child>,
    /// Data directory (inside `_dir` unless given).
    pub data_dir: PathBuf,
    /// Bound OTLP/gRPC address.
    pub grpc: SocketAddr,
    /// Bound OTLP/HTTP address.
    pub http: SocketAddr,
    /// Bound admin address.
    pub admin: SocketAddr,
    /// Every line the daemon wrote to stderr so far.
    pub log: Arc<Mutex<Vec<String>>>,
    _dir: Option<tempfile::TempDir>,
}

/// Options for [`Daemon::start_with`].
#[derive(Default)]
pub struct DaemonOptions {
    /// Extra environment (e.g. `TOOLWATCH_LIMITS__MAX_REQUEST_BYTES`).
    pub env: Vec<(String, String)>,
    /// Use this data directory instead of a fresh one.
    pub data_dir: Option<PathBuf>,
    /// A configuration file (`--config`).
    pub config: Option<PathBuf>,
    /// Fixed OTLP/gRPC and OTLP/HTTP addresses (for a daemon restarted on the same ports).
    pub listen: Option<(SocketAddr, SocketAddr)>,
}

/// An address on a port free right now (for a daemon that must come back on the same port).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

impl Daemon {
    /// Starts a daemon with a fresh data directory.
    pub fn start() -> Daemon {
        Daemon::start_with(DaemonOptions::default())
    }

    /// Starts a daemon and waits until it logs that it is ready.
    pub fn start_with(opts: DaemonOptions) -> Daemon {
        let (dir, data_dir) = match opts.data_dir {
            Some(d) => (None, d),
            None => {
                let dir = tempfile::tempdir().expect("tempdir");
                let data = dir.path().join("data");
                (Some(dir), data)
            }
        };
        let (grpc, http) = opts
            .listen
            .map_or(("127.0.0.1:0".into(), "127.0.0.1:0".into()), |(g, h)| {
                (g.to_string(), h.to_string())
            });
        let mut cmd = toolwatch();
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&data_dir)
            .args([
                "--otlp-grpc",
                &grpc,
                "--otlp-http",
                &http,
                "--admin",
                "127.0.0.1:0",
            ])
            .env("TOOLWATCH_LOG__FORMAT", "json")
            .env("TOOLWATCH_LOG__LEVEL", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        if let Some(c) = &opts.config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd.spawn().expect("start toolwatch");
        let log = collect_stderr(&mut child);
        let ready = wait_for("toolwatch to log that it is ready", || {
            if let Ok(Some(status)) = child.try_wait() {
                // Give the reader thread a moment to collect the last lines, then explain.
                std::thread::sleep(Duration::from_millis(100));
                let lines = log.lock().expect("log lock").join("\n");
                panic!("toolwatch exited with {status} before it was ready:\n{lines}");
            }
            let lines = log.lock().expect("log lock");
            lines.iter().find_map(|l| {
                let v: Value = serde_json::from_str(l).ok()?;
                (v["message"] == "toolwatch ready").then_some(v)
            })
        });
        let addr = |k: &str| -> SocketAddr {
            ready[k]
                .as_str()
                .expect("address in ready line")
                .parse()
                .expect("socket address")
        };
        Daemon {
            grpc: addr("otlp_grpc"),
            http: addr("otlp_http"),
            admin: addr("admin"),
            child: Some(child),
            data_dir,
            log,
            _dir: dir,
        }
    }

    /// `http://host:port` of the gRPC listener.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// `http://host:port` of the OTLP/HTTP listener.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// GETs an admin path; returns status and body.
    pub fn admin_get(&self, path: &str) -> (u16, String) {
        blocking_get(&format!("http://{}{}", self.admin, path))
    }

    /// The value of one sample in `/metrics`, e.g. `toolwatch_archive_rows_total{table="spans"}`.
    pub fn metric(&self, sample: &str) -> Option<f64> {
        metric_at(self.admin, sample)
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends a signal and waits for exit.
    pub fn signal(&mut self, sig: i32) -> ExitStatus {
        let mut child = self.child.take().expect("daemon running");
        let pid = child.id() as libc::pid_t;
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(pid, sig);
        }
        wait_for("toolwatch to exit", || child.try_wait().expect("wait"))
    }

    /// SIGTERM, then asserts a clean exit.
    pub fn stop(&mut self) {
        let status = self.signal(libc::SIGTERM);
        assert!(
            status.success(),
            "toolwatch exited with {status}; log:\n{}",
            self.log_text()
        );
    }

    /// The whole stderr log so far.
    pub fn log_text(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A blocking GET; panics if the server cannot be reached.
/// The value of one sample in the `/metrics` of the admin listener at `admin`.
pub fn metric_at(admin: std::net::SocketAddr, sample: &str) -> Option<f64> {
    let (_, text) = blocking_get(&format!("http://{admin}/metrics"));
    metric_text(&text, sample)
}

/// The value of one sample (`name{labels}`) in a `/metrics` text.
pub fn metric_text(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == sample).then(|| value.parse().ok()).flatten()
    })
}

pub fn blocking_get(url: &str) -> (u16, String) {
    try_get(url).unwrap_or_else(|| panic!("GET {url} failed"))
}

/// A blocking GET on its own thread and runtime (callers may be inside a runtime);
/// `None` if the server cannot be reached.
pub fn try_get(url: &str) -> Option<(u16, String)> {
    try_request(reqwest::Method::GET, url, Vec::new())
}

/// A blocking request with `body`, on its own thread and runtime; `None` if the server
/// cannot be reached.
pub fn try_request(method: reqwest::Method, url: &str, body: Vec<u8>) -> Option<(u16, String)> {
    let url = url.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let resp = reqwest::Client::new()
                .request(method, &url)
                .body(body)
                .send()
                .await
                .ok()?;
            let status = resp.status().as_u16();
            Some((status, resp.text().await.ok()?))
        })
    })
    .join()
    .ok()
    .flatten()
}

/// Every completed Parquet file of a table.
pub fn parquet_files(data_dir: &Path, table: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![data_dir.join(table)];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Hive partition values from a file's path.
fn partition_values(path: &Path) -> Vec<(String, String)> {
    path.ancestors()
        .filter_map(|a| a.file_name()?.to_str())
        .filter_map(|n| n.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Reads a table with the Rust parquet reader: one JSON object per row, timestamps as
/// integer nanoseconds, maps as objects, partition columns from the path.
pub fn read_table(data_dir: &Path, table: &str) -> Vec<Map<String, Value>> {
    let mut rows = Vec::new();
    for file in parquet_files(data_dir, table) {
        let f = std::fs::File::open(&file).expect("open parquet");
        let reader = ParquetRecordBatchReaderBuilder::try_new(f)
            .expect("parquet metadata")
            .build()
            .expect("reader");
        let parts = partition_values(&file);
        for batch in reader {
            let batch = batch.expect("batch");
            for mut row in batch_rows(&batch) {
                for (k, v) in &parts {
                    row.insert(k.clone(), Value::String(v.clone()));
                }
                rows.push(row);
            }
        }
    }
    rows.sort_by_key(|r| serde_json::to_string(r).unwrap_or_default());
    rows
}

fn batch_rows(batch: &RecordBatch) -> Vec<Map<String, Value>> {
    let schema = batch.schema();
    let mut rows = vec![Map::new(); batch.num_rows()];
    for (i, field) in schema.fields().iter().enumerate() {
        let col = batch.column(i);
        for (r, row) in rows.iter_mut().enumerate() {
            row.insert(field.name().clone(), cell(col.as_ref(), r));
        }
    }
    rows
}

fn cell(col: &dyn Array, r: usize) -> Value {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float64Type, Int32Type, Int64Type, TimestampNanosecondType};
    if col.is_null(r) {
        return Value::Null;
    }
    match col.data_type() {
        DataType::Utf8 => Value::from(col.as_string::<i32>().value(r)),
        DataType::Int32 => Value::from(col.as_primitive::<Int32Type>().value(r)),
        DataType::Int64 => Value::from(col.as_primitive::<Int64Type>().value(r)),
        DataType::Float64 => Value::from(col.as_primitive::<Float64Type>().value(r)),
        DataType::Boolean => Value::from(col.as_boolean().value(r)),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            Value::from(col.as_primitive::<TimestampNanosecondType>().value(r))
        }
        DataType::Map(_, _) => {
            let m = col.as_map();
            let entries = m.value(r);
            let keys = entries.column(0).as_string::<i32>();
            let values = entries.column(1).as_primitive::<Int64Type>();
            let mut out = Map::new();
            for j in 0..entries.len() {
                out.insert(keys.value(j).to_string(), Value::from(values.value(j)));
            }
            Value::Object(out)
        }
        DataType::List(_) => {
            let items = col.as_list::<i32>().value(r);
            let strings = items.as_string::<i32>();
            Value::Array(
                (0..strings.len())
                    .map(|j| Value::from(strings.value(j)))
                    .collect(),
            )
        }
        other => panic!("unexpected column type {other}"),
    }
}

/// Rows keyed by a column (e.g. `span_id`), asserting it is unique.
pub fn by_key(rows: &[Map<String, Value>], key: &str) -> BTreeMap<String, Map<String, Value>> {
    let mut out = BTreeMap::new();
    for r in rows {
        let k = r[key].as_str().expect("key column is text").to_string();
        assert!(
            out.insert(k.clone(), r.clone()).is_none(),
            "duplicate {key} {k}"
        );
    }
    out
}

/// The Python of the test venv (made by `scripts/test`).
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("TEST_VENV_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        venv.exists(),
        "the Python test clients need the venv: run scripts/test (or set TEST_VENV_PYTHON)"
    );
    venv
}

/// The second venv's interpreter (`.venv-mcp1`: libraries that need `mcp` 1.x, pinned by
/// `tests/python/requirements-mcp1.txt`).
pub fn python_mcp1() -> PathBuf {
    if let Ok(p) = std::env::var("TEST_VENV_MCP1_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-mcp1/bin/python");
    assert!(
        venv.exists(),
        "the mcp 1.x test clients need their venv: run scripts/test (or set TEST_VENV_MCP1_PYTHON)"
    );
    venv
}

/// Runs a script from `tests/python`; returns stdout, panicking with stderr on failure.
pub fn run_python(script: &str, args: &[&str]) -> String {
    run_python_env(script, args, &[])
}

/// [`run_python`] with extra environment variables.
pub fn run_python_env(script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    run_python_in(&python(), script, args, env)
}

/// [`run_python_env`] with another interpreter.
pub fn run_python_in(python: &Path, script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new(python)
        .arg(&path)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{script} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A table read by pyarrow or DuckDB, rows as JSON objects.
pub fn read_table_python(engine: &str, data_dir: &Path, table: &str) -> Vec<Map<String, Value>> {
    let out = run_python(
        "read_archive.py",
        &[
            "--engine",
            engine,
            "--data-dir",
            data_dir.to_str().expect("utf-8 path"),
            "--table",
            table,
        ],
    );
    let mut rows: Vec<Map<String, Value>> = serde_json::from_str(&out).expect("rows JSON");
    rows.sort_by_key(|r| serde_json::to_string(r).unwrap_or_default());
    rows
}

/// Asserts that three readers see the same rows (same columns and values).
pub fn assert_readers_agree(data_dir: &Path, table: &str) -> Vec<Map<String, Value>> {
    let rust = read_table(data_dir, table);
    let sort = |mut rows: Vec<Map<String, Value>>| {
        rows.sort_by_key(|r| serde_json::to_string(r).unwrap_or_default());
        rows
    };
    let rust = sort(rust);
    for engine in ["pyarrow", "duckdb"] {
        let other = sort(read_table_python(engine, data_dir, table));
        assert_eq!(other.len(), rust.len(), "{engine} row count for {table}");
        for (a, b) in rust.iter().zip(&other) {
            assert_eq!(a, b, "{engine} disagrees with the Rust reader on {table}");
        }
    }
    rust
}

impl Daemon {
    /// Waits until `/metrics` counts `n` requests summarized as `complete`.
    pub fn wait_for_complete_summaries(&self, n: u64) {
        wait_for(&format!("{n} complete summaries in /metrics"), || {
            let got =
                self.metric("toolwatch_request_summaries_total{completeness=\"complete\"}")?;
            (got as u64 == n).then_some(())
        });
    }
}

/// The runs a loadgen invocation sent, rebuilt from its JSON report (its start time) and the
/// seed, tenants and request count it was given.
pub fn loadgen_runs(
    report: &Value,
    seed: u64,
    tenants: u32,
    requests: u64,
) -> Vec<toolwatch_cli::loadgen::AgentRun> {
    let base = report["base_time_ns"]
        .as_u64()
        .expect("base_time_ns in the report");
    toolwatch_cli::loadgen::generate(seed, tenants, base, requests)
}

/// What a loadgen run costs at the sample price of gpt-4o (the model loadgen sends),
/// computed here from the run's own token counts rather than by toolwatch.
pub fn loadgen_cost(e: &toolwatch_cli::loadgen::ExpectedSummary) -> f64 {
    let prices = toolwatch::assemble::AssembleConfig::default()
        .prices()
        .expect("sample prices");
    let p = prices
        .lookup("openai", "gpt-4o-2024-08-06")
        .expect("gpt-4o price");
    ((e.input_tokens - e.cache_read_tokens) as f64 * p.input_per_million
        + e.cache_read_tokens as f64 * p.cached_input_per_million.unwrap_or(0.0)
        + e.output_tokens as f64 * p.output_per_million)
        / 1e6
}

/// Every byte of every file under `dir` (archive, journal, state), concatenated.
pub fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).expect("read dir").flatten() {
                stack.push(e.path());
            }
        } else if let Ok(b) = std::fs::read(&p) {
            out.extend(b);
        }
    }
    out
}

/// True when `needle` occurs in `hay`.
pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// (trace id, span id), lowercase hex.
pub type SpanKey = (String, String);

/// Reads a span-id file (`<trace_id_hex> <span_id_hex>` a line, as loadgen's `--acked-file`
/// writes it) as a list, in file order.
pub fn read_ids(path: &Path) -> Vec<SpanKey> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (t, s) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?} in {}", path.display()));
            (t.to_string(), s.to_string())
        })
        .collect()
}

/// The (trace id, span id) of each row of a `spans` table read by [`read_table`].
pub fn span_keys<'a>(rows: impl IntoIterator<Item = &'a Map<String, Value>>) -> Vec<SpanKey> {
    rows.into_iter()
        .map(|r| {
            let id = |k: &str| r[k].as_str().unwrap_or("").to_string();
            (id("trace_id"), id("span_id"))
        })
        .collect()
}

/// What a `toolwatch verify` run printed.
pub struct VerifyRun {
    /// Its problem lines (stdout).
    pub problems: Vec<String>,
    /// Its summary and notes (stderr).
    pub summary: String,
    /// Its exit code.
    pub code: i32,
}

/// `toolwatch verify [extra] --data-dir <data_dir>`.
pub fn run_verify(data_dir: &Path, extra: &[&str]) -> VerifyRun {
    let out = toolwatch()
        .arg("verify")
        .args(extra)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("verify");
    VerifyRun {
        problems: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        summary: String::from_utf8_lossy(&out.stderr).to_string(),
        code: out.status.code().unwrap_or(-1),
    }
}

/// `toolwatch verify --data-dir <data_dir>`: its problem lines and exit code.
pub fn verify_archive(data_dir: &Path) -> (Vec<String>, i32) {
    let run = run_verify(data_dir, &[]);
    (run.problems, run.code)
}

/// `toolwatch compact --older-than 0s [extra] --data-dir <data_dir>`, which must succeed.
pub fn compact_now(data_dir: &Path, extra: &[&str]) {
    let out = toolwatch()
        .args(["compact", "--older-than", "0s"])
        .args(extra)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("compact");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `n` column of the first row of `toolwatch query [extra] --format json <sql>`.
pub fn query_n(data_dir: &Path, extra: &[&str], sql: &str) -> u64 {
    query_rows_with(data_dir, extra, sql)[0]["n"]
        .as_u64()
        .expect("count")
}

/// The sum of every sample of `family` (e.g. `toolwatch_otlp_requests_total`) whose labels
/// contain `label` (e.g. `consumer="archive"`; empty: every sample) in a `/metrics` text.
pub fn metric_sum(text: &str, family: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The journal consumers that hold items back for their trace's tenant.
pub const TENANT_CONSUMERS: [&str; 3] = ["archive", "assemble", "budgets"];

impl Daemon {
    /// Waits until each journal consumer took a record for every OTLP request the daemon
    /// accepted (at least `accepted`, so the wait cannot end before the data came), and then
    /// holds nothing back for its trace's tenant (`toolwatch_tenant_held_items` 0).
    pub fn wait_until_consumers_hold_nothing(&self, accepted: u64) {
        for consumer in TENANT_CONSUMERS {
            let label = format!("consumer=\"{consumer}\"");
            let held = format!("toolwatch_tenant_held_items{{{label}}}");
            wait_for(
                &format!("{consumer} to take every accepted request and hold nothing"),
                || {
                    let (_, text) = self.admin_get("/metrics");
                    let requests = metric_sum(&text, "toolwatch_otlp_requests_total", "");
                    let taken =
                        metric_sum(&text, "toolwatch_journal_consumer_records_total", &label);
                    let ready = requests >= accepted as f64
                        && taken >= requests
                        && metric_text(&text, &held) == Some(0.0);
                    ready.then_some(())
                },
            );
        }
    }

    /// Asserts that no consumer let an item go on without its trace's tenant
    /// (`toolwatch_tenant_unresolved_items_total` absent or 0 for every consumer and reason).
    pub fn assert_nothing_unresolved(&self) {
        let (_, text) = self.admin_get("/metrics");
        let unresolved = metric_sum(&text, "toolwatch_tenant_unresolved_items_total", "");
        assert_eq!(
            unresolved,
            0.0,
            "items went on unresolved: {:?}",
            text.lines()
                .filter(|l| l.starts_with("toolwatch_tenant_unresolved_items_total"))
                .collect::<Vec<_>>()
        );
    }
}

/// The rows of `toolwatch query --data-dir <data_dir> --format json <sql>` (which reads the
/// running daemon's buffers too), panicking with its stderr if it fails.
pub fn query_rows(data_dir: &Path, sql: &str) -> Vec<Value> {
    query_rows_with(data_dir, &[], sql)
}

/// As [`query_rows`], with `extra` arguments before the SQL.
fn query_rows_with(data_dir: &Path, extra: &[&str], sql: &str) -> Vec<Value> {
    let out = toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .args(["--format", "json", sql])
        .output()
        .expect("query");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("rows")
}

/// `toolwatch trace --data-dir <data_dir> --json <id>`, run to its end.
pub fn trace_json(data_dir: &Path, id: &str) -> std::process::Output {
    toolwatch()
        .arg("trace")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--json", id])
        .output()
        .expect("run toolwatch trace")
}

/// The spans in a `toolwatch trace --json` tree (`spans`, each with its `children`).
pub fn trace_nodes(tree: &Value) -> u64 {
    tree.as_array().map_or(0, |a| {
        a.iter().map(|n| 1 + trace_nodes(&n["children"])).sum()
    })
}
