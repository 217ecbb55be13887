//! A distributed engine reads the archive: Apache Spark (pyspark, local mode), DuckDB and
//! DataFusion (`toolwatch query`) give the same answers, row for row, to the incident
//! queries, over one archive written by the real daemon.

use std::path::Path;

use serde_json::{Map, Value};

use crate::harness::{loadgen, run_python, toolwatch, Daemon, DaemonOptions};

const SEED: u64 = 47;
const TENANTS: u32 = 3;
const REQUESTS: u64 = 30;

/// The incident queries, in SQL that Spark, DuckDB and DataFusion all take (timestamps as
/// BIGINT nanoseconds, partition columns as strings: see `engine_queries.py`).
fn queries(request_id: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "denied_per_tenant_hour",
            "SELECT tenant, date, hour, count(*) AS n FROM spans \
             WHERE span_class = 'tool' AND policy_decision = 'deny' \
             GROUP BY tenant, date, hour ORDER BY tenant, date, hour"
                .into(),
        ),
        (
            "most_expensive_requests",
            "SELECT request_id, tenant, cost_usd FROM requests \
             ORDER BY cost_usd DESC, request_id LIMIT 5"
                .into(),
        ),
        (
            "retries_per_tool",
            "SELECT tool_name, count(*) AS retries FROM spans WHERE retry_attempt > 0 \
             GROUP BY tool_name ORDER BY retries DESC, tool_name"
                .into(),
        ),
        (
            "tokens_per_model",
            "SELECT tenant, request_model, sum(input_tokens) AS input_tokens, \
             sum(output_tokens) AS output_tokens FROM spans WHERE span_class = 'model' \
             GROUP BY tenant, request_model ORDER BY tenant, request_model"
                .into(),
        ),
        (
            "one_request_in_time_order",
            format!(
                "SELECT span_id, parent_span_id, span_class, name, tool_name, \
                 CAST(start_time AS BIGINT) AS start_ns, duration_ns FROM spans \
                 WHERE request_id = '{request_id}' ORDER BY start_ns, span_id"
            ),
        ),
        (
            "logs_beside_their_spans",
            "SELECT l.request_id AS request_id, s.name AS span_name, count(*) AS n \
             FROM logs l JOIN spans s ON s.trace_id = l.trace_id AND s.span_id = l.span_id \
             GROUP BY l.request_id, s.name ORDER BY request_id, span_name"
                .into(),
        ),
        (
            "every_span",
            "SELECT trace_id, span_id, parent_span_id, tenant, date, hour, request_id, \
             span_class, span_kind, name, status_code, tool_name, request_model, \
             policy_decision, result_code, effect_class, retry_attempt, input_tokens, \
             output_tokens, CAST(start_time AS BIGINT) AS start_ns, \
             CAST(end_time AS BIGINT) AS end_ns, duration_ns, attributes, tool_arguments \
             FROM spans ORDER BY trace_id, span_id"
                .into(),
        ),
        (
            "every_request",
            "SELECT request_id, tenant, summary_version, completeness, span_count, \
             model_turns, tool_calls, input_tokens, output_tokens, cost_usd, \
             CAST(start_time AS BIGINT) AS start_ns, duration_ns \
             FROM requests ORDER BY request_id, summary_version"
                .into(),
        ),
    ]
}

/// DataFusion's answers, through `toolwatch query`.
fn datafusion(data: &Path, sql: &str) -> Vec<Map<String, Value>> {
    let out = toolwatch()
        .arg("query")
        .arg("--data-dir")
        .arg(data)
        .args(["--no-flush", "--format", "json", sql])
        .output()
        .expect("toolwatch query");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON rows")
}

/// Another engine's answers to every query, through `engine_queries.py` (Spark given the
/// table definitions in `ddl`, when there are some).
fn python_engine(
    engine: &str,
    data: &Path,
    queries: &[(&str, String)],
    ddl: Option<&Path>,
) -> Map<String, Value> {
    let file = data.parent().expect("parent").join("queries.json");
    let map: Map<String, Value> = queries
        .iter()
        .map(|(n, q)| (n.to_string(), Value::String(q.clone())))
        .collect();
    std::fs::write(&file, serde_json::to_vec(&map).expect("json")).expect("write queries");
    let mut args = vec![
        "--engine",
        engine,
        "--data-dir",
        data.to_str().expect("utf-8"),
        "--queries",
        file.to_str().expect("utf-8"),
    ];
    if let Some(d) = ddl {
        args.extend(["--ddl", d.to_str().expect("utf-8")]);
    }
    let out = run_python("engine_queries.py", &args);
    serde_json::from_str(&out).expect("engine JSON")
}

/// `toolwatch ddl --engine spark` for the tables the queries read, in a file.
fn spark_ddl(data: &Path) -> std::path::PathBuf {
    let mut text = String::new();
    for table in ["spans", "logs", "requests"] {
        let out = toolwatch()
            .args(["ddl", "--engine", "spark", "--table", table, "--data-dir"])
            .arg(data)
            .output()
            .expect("toolwatch ddl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    let file = data.parent().expect("parent").join("spark.sql");
    std::fs::write(&file, text).expect("write ddl");
    file
}

/// Rows as comparable values: NULL columns left out, and numbers that are whole compare as
/// integers (DuckDB sums are HUGEINT, Spark's BIGINT, DataFusion's Int64).
fn normalized(rows: &[Value]) -> Vec<Value> {
    rows.iter()
        .map(|r| match r {
            Value::Object(m) => Value::Object(
                m.iter()
                    // `toolwatch query --format json` leaves NULL columns out.
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| {
                        let v = match v.as_f64() {
                            Some(f)
                                if !v.is_i64()
                                    && !v.is_u64()
                                    && f.fract() == 0.0
                                    && f.abs() < 9e15 =>
                            {
                                Value::from(f as i64)
                            }
                            _ => v.clone(),
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        })
        .collect()
}

#[test]
fn spark_duckdb_and_datafusion_agree_row_for_row_on_the_incident_queries() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TOOLWATCH_ASSEMBLE__QUIET_PERIOD".into(), "300ms".into())],
        ..Default::default()
    });
    let report = loadgen(&[
        "--target",
        &d.grpc_url(),
        "--requests",
        &REQUESTS.to_string(),
        "--tenants",
        &TENANTS.to_string(),
        "--seed",
        &SEED.to_string(),
    ]);
    let spans = report["spans"].as_u64().expect("spans");
    d.wait_for_complete_summaries(REQUESTS);
    d.stop();
    let data = d.data_dir.clone();

    let busiest = datafusion(
        &data,
        "SELECT request_id, count(*) AS n FROM spans WHERE request_id IS NOT NULL \
         GROUP BY request_id ORDER BY n DESC, request_id LIMIT 1",
    );
    let request_id = busiest[0]["request_id"]
        .as_str()
        .expect("a request")
        .to_string();
    let queries = queries(&request_id);
    // Spark twice: over tables `toolwatch ddl` defined (typed columns, partitions
    // registered by MSCK REPAIR), and over the folders as discovered.
    let spark = python_engine("spark", &data, &queries, Some(&spark_ddl(&data)));
    let discovered = python_engine("spark", &data, &queries, None);
    let duckdb = python_engine("duckdb", &data, &queries, None);
    for (name, sql) in &queries {
        let df: Vec<Value> = datafusion(&data, sql)
            .into_iter()
            .map(Value::Object)
            .collect();
        let df = normalized(&df);
        assert!(!df.is_empty(), "{name}: no rows");
        for (engine, answers) in [
            ("spark", &spark),
            ("spark without definitions", &discovered),
            ("duckdb", &duckdb),
        ] {
            let rows = answers[*name].as_array().expect("rows");
            let rows = normalized(rows);
            assert_eq!(rows.len(), df.len(), "{engine} row count for {name}");
            for (i, (a, b)) in df.iter().zip(&rows).enumerate() {
                assert_eq!(
                    a, b,
                    "{engine} disagrees with DataFusion on {name}, row {i}"
                );
            }
        }
    }
    // And the answers are the archive's, not three empty agreements.
    assert_eq!(
        spark["every_span"].as_array().map(Vec::len),
        Some(spans as usize)
    );
    let requests: std::collections::BTreeSet<&str> = spark["every_request"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["request_id"].as_str())
        .collect();
    assert_eq!(requests.len() as u64, REQUESTS);
}
