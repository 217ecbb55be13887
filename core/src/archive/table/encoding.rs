//! The Parquet encoding of the tables' files: zstd, page statistics and bloom filters on the id
//! columns ([`writer_properties`]); columns of mostly unique values without a dictionary, and
//! those of few distinct values uncompressed.

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::Table;
use crate::archive::error::ArchiveError;
use crate::event::SCHEMA_VERSION;

/// Writer settings shared by every file of a table.
#[derive(Debug, Clone)]
pub struct FileSettings {
    /// Complete a file at about this size.
    pub max_bytes: u64,
    /// Complete a file after it has been open this long.
    pub max_age: std::time::Duration,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// Encoded bytes per row group.
    pub row_group_bytes: usize,
    /// zstd level.
    pub zstd_level: i32,
}

/// Parquet writer settings for a table: zstd, page statistics, bloom filters on the id columns.
pub fn writer_properties(
    settings: &FileSettings,
    table: Table,
) -> Result<WriterProperties, ArchiveError> {
    let level = ZstdLevel::try_new(settings.zstd_level).map_err(ArchiveError::Parquet)?;
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(settings.row_group_rows))
        .set_max_row_group_bytes(Some(settings.row_group_bytes))
        .set_created_by(format!("toolwatch {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "toolwatch.schema_version".to_string(),
            SCHEMA_VERSION.to_string(),
        )]));
    for col in JSON_COLUMNS.iter().chain(UNIQUE_COLUMNS) {
        b = b.set_column_dictionary_enabled(column_path(col), false);
    }
    let small: &[&str] = match table {
        Table::Spans | Table::Logs => SMALL_COLUMNS,
        Table::Requests => REQUEST_SMALL_COLUMNS,
        Table::Alarms | Table::Findings => &[],
    };
    for col in small {
        b = b.set_column_compression(column_path(col), Compression::UNCOMPRESSED);
    }
    let bloom_columns: &[&str] = match table {
        Table::Spans => &["trace_id", "request_id"],
        Table::Logs => &["trace_id", "request_id"],
        Table::Requests => &["request_id"],
        Table::Alarms => &["request_id", "alarm_id"],
        Table::Findings => &["request_id", "finding_id"],
    };
    for col in bloom_columns {
        let path = ColumnPath::from(*col);
        b = b
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(path, bloom_ndv(settings.row_group_rows));
    }
    Ok(b.build())
}

/// The path of a column named with dots between nesting levels (`redactions.entries.keys`).
fn column_path(name: &str) -> ColumnPath {
    ColumnPath::new(name.split('.').map(str::to_string).collect())
}

/// Distinct values a row group's bloom filter is sized for: a quarter of its rows (agent
/// traces and requests have several spans each). The filter is allocated at that size while
/// its row group is built, for every buffered partition, so sizing it for all rows would
/// cost 128 KiB a column a partition; more distinct values than this only raise its
/// false-positive rate (the writer folds it down to 1% where it can), never hide a row.
pub fn bloom_ndv(row_group_rows: usize) -> u64 {
    (row_group_rows as u64 / 4).max(1024)
}

/// Columns written as JSON text: large, mostly unique values where a dictionary only costs.
pub const JSON_COLUMNS: &[&str] = &[
    "tool_arguments",
    "tool_result",
    "resource_attributes",
    "attributes",
    "events",
    "links",
    "body",
];

/// Columns of mostly unique values (span and call ids, key hashes): a dictionary only costs.
pub const UNIQUE_COLUMNS: &[&str] = &[
    "span_id",
    "parent_span_id",
    "tool_call_id",
    "idempotency_key_hash",
];

/// Columns of few distinct or mostly absent values (enums, names, versions, small counts,
/// flags), written uncompressed. After dictionary and run-length encoding they are a few bytes
/// a page, which zstd does not shrink (on loadgen's traffic their ratios were 0.7 to 1.3,
/// against 2 to 100 for ids, times, token counts and JSON), while every compressed column
/// chunk costs a zstd compressor and decompressor to set up: for the small files of a flush or
/// of many tenants, most of a file's cost. Names not in a table are ignored.
pub const SMALL_COLUMNS: &[&str] = &[
    "schema_version",
    "span_class",
    "span_kind",
    "operation",
    "provider",
    "request_model",
    "response_model",
    "finish_reasons",
    "agent_id",
    "agent_name",
    "tool_name",
    "tool_type",
    "tool_version",
    "tool_schema_version",
    "prompt_version",
    "scope_name",
    "scope_version",
    "service_name",
    "trace_state",
    "status_code",
    "severity_number",
    "severity_text",
    "effect_class",
    "policy_decision",
    "policy_reason",
    "result_code",
    "retry_attempt",
    "timeout_ms",
    "confirmation_status",
    "stop_reason",
    "cancelled",
    "claimed_tenant",
    "sender",
    "claimed_cost_usd",
    "mcp_method",
    "mcp_session_id",
    "resource_version",
    "dropped_attributes_count",
    "dropped_events_count",
    "dropped_links_count",
    "redactions.entries.keys",
    "redactions.entries.values",
];

/// The request summaries' columns of few distinct values (outcomes, versions, flags and the
/// per-request counters, mostly 0 or small), written uncompressed for the reasons of
/// [`SMALL_COLUMNS`]: on the blast load their zstd ratios were 0.67 to 0.95 (larger than
/// uncompressed). Ids, times, durations, tokens, costs and the per-tool map stay compressed.
pub const REQUEST_SMALL_COLUMNS: &[&str] = &[
    "schema_version",
    "summary_version",
    "outcome",
    "completeness",
    "stop_reason",
    "principal_id",
    "cost_disagrees",
    "claimed_cost_usd",
    "span_count",
    "orphan_count",
    "model_turns",
    "tool_calls",
    "downstream_calls",
    "unpriced_model_turns",
    "denials",
    "confirmations_requested",
    "confirmations_approved",
    "retries",
    "timeouts",
    "errors",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_columns_go_uncompressed_and_ids_without_a_dictionary() {
        use crate::archive::table::rows::TableRows;
        use crate::archive::table::schema::SpanRows;
        use parquet::basic::Encoding;
        use parquet::file::reader::{FileReader, SerializedFileReader};

        let mut rows = SpanRows::default();
        let mut span = crate::event::fixtures::span();
        span.redactions.insert("email".into(), 1);
        rows.append(&span).expect("append");
        let batch = rows.finish().expect("batch");
        let settings = crate::archive::config::file_settings(
            &crate::archive::config::ArchiveConfig::default(),
        );
        let props = writer_properties(&settings, Table::Spans).expect("properties");
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props))
            .expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        let reader = SerializedFileReader::new(bytes::Bytes::from(buf)).expect("parquet");
        let group = reader.metadata().row_group(0);
        let column = |name: &str| {
            group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == name)
                .unwrap_or_else(|| panic!("no column {name}"))
        };
        for small in [
            "span_kind",
            "tool_name",
            "redactions.entries.keys",
            "cancelled",
        ] {
            assert_eq!(
                column(small).compression(),
                Compression::UNCOMPRESSED,
                "{small}"
            );
        }
        for large in [
            "tool_arguments",
            "attributes",
            "span_id",
            "start_time",
            "trace_id",
        ] {
            assert!(
                matches!(column(large).compression(), Compression::ZSTD(_)),
                "{large}"
            );
        }
        let dictionary = |name: &str| {
            column(name)
                .encodings()
                .any(|e| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY))
        };
        assert!(!dictionary("span_id") && !dictionary("tool_arguments"));
        assert!(dictionary("trace_id") && dictionary("span_kind"));
    }
}
