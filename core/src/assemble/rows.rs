//! The `requests` table's rows: assembly owns them and hands them to the archive through
//! [`ArchiveRow`] (one row per version of a request's summary). Column names are a contract
//! documented in `schemas/archive.md`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, ListBuilder,
    StringBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::summary::RequestSummary;
use crate::archive::table::rows::{ArchiveRow, TableRows};
use crate::archive::table::schema::{
    counts_map_field, ts, utf8, CountsColumn, Small, SCHEMA_VERSION, UTC,
};
use crate::archive::table::Table;

/// Schema of the `requests` table: one row per version of a request's summary.
pub fn requests_schema() -> SchemaRef {
    let int = |n: &str| Field::new(n, DataType::Int64, false);
    Arc::new(Schema::new(vec![
        Field::new("schema_version", DataType::Int32, false),
        utf8("request_id", false),
        Field::new(
            "trace_ids",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            false,
        ),
        utf8("principal_id", true),
        Field::new("start_time", ts(), false),
        Field::new("end_time", ts(), false),
        int("duration_ns"),
        utf8("completeness", false),
        Field::new("summary_version", DataType::Int32, false),
        int("span_count"),
        int("orphan_count"),
        int("model_turns"),
        int("tool_calls"),
        counts_map_field("tool_calls_by_tool"),
        int("downstream_calls"),
        int("input_tokens"),
        int("output_tokens"),
        int("cache_read_tokens"),
        int("cache_creation_tokens"),
        Field::new("cost_usd", DataType::Float64, false),
        int("unpriced_model_turns"),
        Field::new("claimed_cost_usd", DataType::Float64, true),
        Field::new("cost_disagrees", DataType::Boolean, false),
        int("denials"),
        int("confirmations_requested"),
        int("confirmations_approved"),
        int("retries"),
        int("timeouts"),
        int("errors"),
        utf8("stop_reason", true),
        utf8("outcome", false),
        Field::new("findings", DataType::Int64, false),
    ]))
}

/// Rows of the `requests` table being collected for one record batch.
pub struct RequestRows {
    schema: SchemaRef,
    len: usize,
    schema_version: Int32Builder,
    request_id: StringBuilder,
    trace_ids: ListBuilder<StringBuilder>,
    principal_id: StringBuilder,
    start_time: TimestampNanosecondBuilder,
    end_time: TimestampNanosecondBuilder,
    duration_ns: Int64Builder,
    completeness: StringBuilder,
    summary_version: Int32Builder,
    /// span_count … tool_calls, in schema order.
    counts_before_tools: [Int64Builder; 4],
    tool_calls_by_tool: CountsColumn,
    /// downstream_calls … cache_creation_tokens.
    counts_after_tools: [Int64Builder; 5],
    cost_usd: Float64Builder,
    unpriced_model_turns: Int64Builder,
    claimed_cost_usd: Float64Builder,
    cost_disagrees: BooleanBuilder,
    /// denials … errors.
    decisions: [Int64Builder; 6],
    stop_reason: StringBuilder,
    outcome: StringBuilder,
    findings: Int64Builder,
}

impl Default for RequestRows {
    fn default() -> Self {
        RequestRows {
            schema: requests_schema(),
            len: 0,
            schema_version: Int32Builder::small(),
            request_id: StringBuilder::small(),
            trace_ids: ListBuilder::new(StringBuilder::small()),
            principal_id: StringBuilder::small(),
            start_time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            end_time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            duration_ns: Int64Builder::small(),
            completeness: StringBuilder::small(),
            summary_version: Int32Builder::small(),
            counts_before_tools: Small::small(),
            tool_calls_by_tool: CountsColumn::default(),
            counts_after_tools: Small::small(),
            cost_usd: Float64Builder::small(),
            unpriced_model_turns: Int64Builder::small(),
            claimed_cost_usd: Float64Builder::small(),
            cost_disagrees: BooleanBuilder::small(),
            decisions: Small::small(),
            stop_reason: StringBuilder::small(),
            outcome: StringBuilder::small(),
            findings: Int64Builder::small(),
        }
    }
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl TableRows for RequestRows {
    fn len(&self) -> usize {
        self.len
    }

    /// A fixed share a row: a summary's text is a few ids and names.
    fn approx_bytes(&self) -> usize {
        self.len * 768
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish()),
            Arc::new(self.request_id.finish()),
            Arc::new(self.trace_ids.finish()),
            Arc::new(self.principal_id.finish()),
            Arc::new(self.start_time.finish()),
            Arc::new(self.end_time.finish()),
            Arc::new(self.duration_ns.finish()),
            Arc::new(self.completeness.finish()),
            Arc::new(self.summary_version.finish()),
        ];
        cols.extend(
            self.counts_before_tools
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(self.tool_calls_by_tool.finish());
        cols.extend(
            self.counts_after_tools
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.cost_usd.finish()));
        cols.push(Arc::new(self.unpriced_model_turns.finish()));
        cols.push(Arc::new(self.claimed_cost_usd.finish()));
        cols.push(Arc::new(self.cost_disagrees.finish()));
        cols.extend(
            self.decisions
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.stop_reason.finish()));
        cols.push(Arc::new(self.outcome.finish()));
        cols.push(Arc::new(self.findings.finish()));
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    // The columns of `finish`, in its order, copied. A `&self` walk cannot share finish's
    // `&mut` one; the tests hold the two to the same batch.
    fn snapshot(&self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish_cloned()),
            Arc::new(self.request_id.finish_cloned()),
            Arc::new(self.trace_ids.finish_cloned()),
            Arc::new(self.principal_id.finish_cloned()),
            Arc::new(self.start_time.finish_cloned()),
            Arc::new(self.end_time.finish_cloned()),
            Arc::new(self.duration_ns.finish_cloned()),
            Arc::new(self.completeness.finish_cloned()),
            Arc::new(self.summary_version.finish_cloned()),
        ];
        cols.extend(
            self.counts_before_tools
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(self.tool_calls_by_tool.finish_cloned());
        cols.extend(
            self.counts_after_tools
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(Arc::new(self.cost_usd.finish_cloned()));
        cols.push(Arc::new(self.unpriced_model_turns.finish_cloned()));
        cols.push(Arc::new(self.claimed_cost_usd.finish_cloned()));
        cols.push(Arc::new(self.cost_disagrees.finish_cloned()));
        cols.extend(
            self.decisions
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(Arc::new(self.stop_reason.finish_cloned()));
        cols.push(Arc::new(self.outcome.finish_cloned()));
        cols.push(Arc::new(self.findings.finish_cloned()));
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl ArchiveRow for RequestSummary {
    type Rows = RequestRows;
    const TABLE: Table = Table::Requests;

    fn tenant(&self) -> &str {
        &self.tenant
    }

    /// A summary is filed under the hour its request started.
    fn time_ns(&self) -> i64 {
        self.start_ns
    }

    fn record(&self) -> Option<u64> {
        // 0: the summary came from no journal record (tests, tools).
        (self.first_record > 0).then_some(self.first_record)
    }

    /// Adds one summary.
    fn append_to(&self, rows: &mut RequestRows) -> Result<(), ArrowError> {
        rows.schema_version.append_value(SCHEMA_VERSION);
        rows.request_id.append_value(&self.request_id);
        for t in &self.trace_ids {
            rows.trace_ids.values().append_value(t);
        }
        rows.trace_ids.append(true);
        rows.principal_id
            .append_option(self.principal_id.as_deref());
        rows.start_time.append_value(self.start_ns);
        rows.end_time.append_value(self.end_ns);
        rows.duration_ns.append_value(self.duration_ns());
        rows.completeness.append_value(self.completeness.as_str());
        rows.summary_version
            .append_value(i32::try_from(self.summary_version).unwrap_or(i32::MAX));
        let [spans, orphans, turns, tools] = &mut rows.counts_before_tools;
        spans.append_value(count(self.span_count));
        orphans.append_value(count(self.orphan_count));
        turns.append_value(count(self.model_turns));
        tools.append_value(count(self.tool_calls));
        rows.tool_calls_by_tool.append(
            self.tool_calls_by_tool
                .iter()
                .map(|(tool, n)| (tool.as_str(), count(*n))),
        )?;
        let [downstream, input, output, cache_read, cache_creation] = &mut rows.counts_after_tools;
        downstream.append_value(count(self.downstream_calls));
        input.append_value(self.input_tokens);
        output.append_value(self.output_tokens);
        cache_read.append_value(self.cache_read_tokens);
        cache_creation.append_value(self.cache_creation_tokens);
        rows.cost_usd.append_value(self.cost_usd);
        rows.unpriced_model_turns
            .append_value(count(self.unpriced_model_turns));
        rows.claimed_cost_usd.append_option(self.claimed_cost_usd);
        rows.cost_disagrees.append_value(self.cost_disagrees);
        let values = [
            self.denials,
            self.confirmations_requested,
            self.confirmations_approved,
            self.retries,
            self.timeouts,
            self.errors,
        ];
        for (b, v) in rows.decisions.iter_mut().zip(values) {
            b.append_value(count(v));
        }
        rows.stop_reason.append_option(self.stop_reason.as_deref());
        rows.outcome.append_value(self.outcome);
        rows.findings.append_value(count(self.findings));
        rows.len += 1;
        Ok(())
    }
}
