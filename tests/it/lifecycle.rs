//! Rolling by age and size while serving, readers never seeing partial files, SIGINT, and
//! the embedded defaults.

use std::process::Stdio;

use crate::harness::{parquet_files, read_table, toolwatch, wait_for, Daemon, DaemonOptions};

fn loadgen(target: &str, requests: &str, seed: &str) -> serde_json::Value {
    crate::harness::loadgen(&["--target", target, "--requests", requests, "--seed", seed])
}

#[test]
fn files_complete_by_age_and_are_readable_while_serving() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            ("TOOLWATCH_ARCHIVE__MAX_FILE_AGE".into(), "1s".into()),
            ("TOOLWATCH_ARCHIVE__BATCH_ROWS".into(), "64".into()),
        ],
        ..Default::default()
    });
    let first = loadgen(&d.grpc_url(), "40", "1");
    let expected = first["spans"].as_u64().expect("spans");
    // Wait for the age limit to complete the file; then read it while the daemon runs.
    let rows = wait_for("aged files to be completed", || {
        let rows = read_table(&d.data_dir, "spans");
        (rows.len() as u64 == expected).then_some(rows)
    });
    assert_eq!(rows.len() as u64, expected);
    // Every record each consumer took is counted once by where it came from, and the intake's
    // batches reach the consumers without a decode.
    let records = wait_for("every consumer to count every record", || {
        let records = d.metric("toolwatch_journal_records_total")?;
        let taken = |consumer: &str, source: &str| {
            d.metric(&format!(
                "toolwatch_journal_consumer_records_total{{consumer=\"{consumer}\",source=\"{source}\"}}"
            ))
            .unwrap_or(0.0)
        };
        ["archive", "assemble", "budgets"]
            .iter()
            .all(|c| {
                taken(c, "published") >= 1.0
                    && taken(c, "published") + taken(c, "shared") + taken(c, "decoded") == records
            })
            .then_some(records)
    });
    assert!(records >= 1.0);
    // Partial files exist only under the hidden in-progress name.
    let second = loadgen(&d.grpc_url(), "40", "2");
    for f in parquet_files(&d.data_dir, "spans") {
        let name = f.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(
            name.starts_with("part-") && name.ends_with(".parquet"),
            "{name}"
        );
    }
    d.stop();
    let total = read_table(&d.data_dir, "spans").len() as u64;
    assert_eq!(total, expected + second["spans"].as_u64().expect("spans"));
}

#[test]
fn files_roll_by_size() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![
            ("TOOLWATCH_ARCHIVE__MAX_FILE_BYTES".into(), "48KiB".into()),
            ("TOOLWATCH_ARCHIVE__BATCH_ROWS".into(), "32".into()),
        ],
        ..Default::default()
    });
    let report = loadgen(&d.grpc_url(), "150", "3");
    d.stop();
    let files = parquet_files(&d.data_dir, "spans");
    assert!(
        files.len() >= 3,
        "expected several files, got {}",
        files.len()
    );
    let rows = read_table(&d.data_dir, "spans");
    assert_eq!(
        rows.len() as u64,
        report["spans"].as_u64().expect("spans"),
        "{}",
        d.log_text()
            .lines()
            .filter(|l| !l.contains("\"DEBUG\""))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn sigint_flushes_everything_acknowledged() {
    let mut d = Daemon::start();
    let report = loadgen(&d.grpc_url(), "25", "4");
    let status = d.signal(libc::SIGINT);
    assert!(status.success(), "{status}");
    assert_eq!(
        read_table(&d.data_dir, "spans").len() as u64,
        report["spans"].as_u64().expect("spans")
    );
    assert_eq!(
        read_table(&d.data_dir, "logs").len() as u64,
        report["log_records"].as_u64().expect("logs")
    );
}

#[test]
fn readyz_and_healthz() {
    let mut d = Daemon::start();
    assert_eq!(d.admin_get("/healthz"), (200, "ok\n".to_string()));
    assert_eq!(d.admin_get("/readyz"), (200, "ready\n".to_string()));
    let (status, metrics) = d.admin_get("/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("toolwatch_build_info{version=\""),
        "{metrics}"
    );
    assert!(metrics.ends_with("# EOF\n"));
    d.stop();
}

/// With no config and no flags: the documented ports and ./toolwatch-data.
#[test]
fn serve_runs_on_embedded_defaults() {
    for port in [4317, 4318, 9464] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is busy; this test needs the default ports free"
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = toolwatch()
        .arg("serve")
        .current_dir(dir.path())
        .env("TOOLWATCH_LOG__FORMAT", "json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let ready = wait_for("the daemon on its default ports", || {
        crate::harness::try_get("http://127.0.0.1:9464/readyz").filter(|(s, _)| *s == 200)
    });
    assert_eq!(ready.1, "ready\n");
    let report = loadgen("http://127.0.0.1:4317", "5", "5");
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = wait_for("exit", || child.try_wait().expect("wait"));
    assert!(status.success());
    let rows = read_table(&dir.path().join("toolwatch-data"), "spans");
    assert_eq!(rows.len() as u64, report["spans"].as_u64().expect("spans"));
    assert!(dir.path().join("toolwatch-data/state/hash.key").exists());
}

/// The files carry what readers rely on for pruning: zstd, statistics, page indexes, bloom
/// filters on the id columns that actually answer lookups, and the schema version.
#[test]
fn archive_files_have_statistics_page_indexes_and_bloom_filters() {
    use parquet::basic::Compression;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::serialized_reader::ReadOptionsBuilder;

    let mut d = Daemon::start();
    loadgen(&d.grpc_url(), "30", "6");
    d.stop();
    let rows = read_table(&d.data_dir, "spans");
    let files = parquet_files(&d.data_dir, "spans");
    // One file per partition hour: two when the load straddles an hour's end.
    assert!(matches!(files.len(), 1 | 2), "{files:?}");
    // A row of the first file's partition (its path names the date and hour).
    let path = files[0].to_string_lossy().to_string();
    let row = rows
        .iter()
        .find(|r| {
            let part = |k: &str| format!("{k}={}", r[k].as_str().unwrap_or_default());
            path.contains(&part("date")) && path.contains(&part("hour"))
        })
        .expect("a row of the first file");
    let known_trace = row["trace_id"].as_str().expect("trace id").to_string();
    let known_request = row["request_id"].as_str().expect("request id").to_string();
    let options = ReadOptionsBuilder::new().with_reader_properties(
        parquet::file::properties::ReaderProperties::builder()
            .set_read_bloom_filter(true)
            .build(),
    );
    let reader = SerializedFileReader::new_with_options(
        std::fs::File::open(&files[0]).expect("open"),
        options.build(),
    )
    .expect("reader");
    let meta = reader.metadata();
    let kv = meta
        .file_metadata()
        .key_value_metadata()
        .expect("key-value metadata");
    assert!(kv
        .iter()
        .any(|e| e.key == "toolwatch.schema_version" && e.value.as_deref() == Some("1")));
    let rg = meta.row_group(0);
    for (i, col) in rg.columns().iter().enumerate() {
        let name = col.column_path().string();
        if toolwatch::archive::table::encoding::SMALL_COLUMNS.contains(&name.as_str()) {
            assert_eq!(col.compression(), Compression::UNCOMPRESSED, "{name}");
        } else {
            assert!(matches!(col.compression(), Compression::ZSTD(_)), "{name}");
        }
        assert!(col.statistics().is_some(), "{name} has statistics");
        assert!(
            col.column_index_offset().is_some(),
            "{name} has a column index"
        );
        assert!(
            col.offset_index_offset().is_some(),
            "{name} has an offset index"
        );
        let bloom = reader
            .get_row_group(0)
            .expect("row group")
            .get_column_bloom_filter(i)
            .cloned();
        match name.as_str() {
            "trace_id" => {
                let b = bloom.expect("trace_id bloom filter");
                assert!(b.check(&known_trace.as_str()));
                assert!(!b.check(&"ffffffffffffffffffffffffffffffff"));
            }
            "request_id" => {
                let b = bloom.expect("request_id bloom filter");
                assert!(b.check(&known_request.as_str()));
                assert!(!b.check(&"req-none-00000000"));
            }
            _ => assert!(bloom.is_none(), "{name} has no bloom filter"),
        }
    }
}
