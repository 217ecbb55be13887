//! Table definitions for engines other than toolwatch's own: Apache Spark SQL and Trino
//! (Hive connector), generated from the schemas the stages write, so they cannot drift.
//!
//! Both declare the Hive partition columns `tenant`, `date` and `hour` as strings (the folder
//! values; Spark must not infer a date and an integer from them). Timestamps are Parquet
//! `INT64 TIMESTAMP(NANOS, UTC)`: Spark reads them only as their nanoseconds
//! (`spark.sql.legacy.parquet.nanosAsLong = true`), so they are `BIGINT` there; Trino reads
//! them as `TIMESTAMP` at the catalog's `hive.timestamp-precision` (set `NANOSECONDS`).

use datafusion::arrow::datatypes::{DataType, Field};

use crate::archive::table::Table;

/// An engine to define the tables for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// Apache Spark SQL (`CREATE TABLE … USING parquet`).
    Spark,
    /// Trino's Hive connector (`CREATE TABLE … WITH (external_location = …)`).
    Trino,
}

/// A column type an engine cannot declare.
#[derive(Debug, thiserror::Error)]
#[error("column {column}: no {engine:?} type for {data_type}")]
pub struct UnsupportedType {
    column: String,
    engine: Engine,
    data_type: DataType,
}

/// The statements that define `table` over the folder at `location` (the table's folder:
/// `<data_dir>/<table>` or `s3://bucket/prefix/<table>`) and register its partitions.
pub fn definition(engine: Engine, table: Table, location: &str) -> Result<String, UnsupportedType> {
    let schema = super::table_schema(table);
    let mut columns = Vec::with_capacity(schema.fields().len() + 3);
    for f in schema.fields() {
        columns.push(format!(
            "  {} {}",
            quoted(engine, f.name()),
            type_of(engine, f)?
        ));
    }
    let name = table.as_str();
    let location = location.replace('\'', "''");
    Ok(match engine {
        Engine::Spark => {
            columns.extend(["tenant", "date", "hour"].map(|c| format!("  {c} STRING")));
            format!(
                "CREATE TABLE {name} (\n{}\n) USING parquet\nPARTITIONED BY (tenant, date, hour)\nLOCATION '{location}';\nMSCK REPAIR TABLE {name};\n",
                columns.join(",\n")
            )
        }
        Engine::Trino => {
            columns.extend(["tenant", "date", "hour"].map(|c| format!("  \"{c}\" VARCHAR")));
            format!(
                "CREATE TABLE {name} (\n{}\n) WITH (\n  format = 'PARQUET',\n  external_location = '{location}',\n  partitioned_by = ARRAY['tenant', 'date', 'hour']\n);\nCALL system.sync_partition_metadata(CURRENT_SCHEMA, '{name}', 'ADD');\n",
                columns.join(",\n")
            )
        }
    })
}

fn quoted(engine: Engine, name: &str) -> String {
    match engine {
        Engine::Spark => format!("`{name}`"),
        Engine::Trino => format!("\"{name}\""),
    }
}

fn type_of(engine: Engine, f: &Field) -> Result<String, UnsupportedType> {
    let spark = engine == Engine::Spark;
    let t = match f.data_type() {
        DataType::Boolean => "BOOLEAN".to_string(),
        DataType::Int32 => if spark { "INT" } else { "INTEGER" }.to_string(),
        DataType::Int64 => "BIGINT".to_string(),
        DataType::Float64 => "DOUBLE".to_string(),
        DataType::Utf8 => if spark { "STRING" } else { "VARCHAR" }.to_string(),
        DataType::Timestamp(_, _) => if spark { "BIGINT" } else { "TIMESTAMP" }.to_string(),
        DataType::List(item) => {
            let inner = type_of(engine, item)?;
            if spark {
                format!("ARRAY<{inner}>")
            } else {
                format!("ARRAY({inner})")
            }
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(unsupported(engine, f));
            };
            let (Some(k), Some(v)) = (kv.first(), kv.get(1)) else {
                return Err(unsupported(engine, f));
            };
            let (k, v) = (type_of(engine, k)?, type_of(engine, v)?);
            if spark {
                format!("MAP<{k}, {v}>")
            } else {
                format!("MAP({k}, {v})")
            }
        }
        _ => return Err(unsupported(engine, f)),
    };
    Ok(t)
}

fn unsupported(engine: Engine, f: &Field) -> UnsupportedType {
    UnsupportedType {
        column: f.name().clone(),
        engine,
        data_type: f.data_type().clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_a_definition_for_every_engine() {
        for table in Table::ALL {
            for engine in [Engine::Spark, Engine::Trino] {
                let ddl = definition(engine, table, "/data/x").expect("definition");
                assert!(ddl.starts_with(&format!("CREATE TABLE {} (", table.as_str())));
            }
        }
        let spark = definition(Engine::Spark, Table::Spans, "/d/spans").expect("spark");
        assert!(spark.contains("  `start_time` BIGINT,\n"));
        assert!(spark.contains("  `redactions` MAP<STRING, BIGINT>,\n"));
        assert!(spark.ends_with("LOCATION '/d/spans';\nMSCK REPAIR TABLE spans;\n"));
        let trino = definition(Engine::Trino, Table::Requests, "s3://b/p/requests").expect("trino");
        assert!(trino.contains("  \"trace_ids\" ARRAY(VARCHAR),\n"));
        assert!(trino.contains("  \"start_time\" TIMESTAMP,\n"));
        assert!(trino.contains("external_location = 's3://b/p/requests'"));
    }
}
