//! The `findings` table's rows: one row when a finding is first raised (`open`), and one when a
//! later version of its request no longer shows it (`withdrawn`). Columns are a contract
//! documented in `schemas/archive.md`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Int32Builder, ListBuilder, StringBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use sha2::{Digest, Sha256};

use super::Finding;
use crate::archive::table::rows::{ArchiveRow, TableRows};
use crate::archive::table::schema::{ts, utf8, Small, SCHEMA_VERSION, UTC};
use crate::archive::table::Table;

/// Whether a row raises a finding or takes it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingStatus {
    /// Raised by this version of the request.
    Open,
    /// Raised by an earlier version; this one no longer shows it (a late span changed it).
    Withdrawn,
}

impl FindingStatus {
    /// The name stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingStatus::Open => "open",
            FindingStatus::Withdrawn => "withdrawn",
        }
    }
}

/// One row of the `findings` table.
#[derive(Debug, Clone, PartialEq)]
pub struct FindingRow {
    /// The finding.
    pub finding: Finding,
    /// Stable across versions of the request: rule, tenant, request and evidence.
    pub finding_id: String,
    /// Raised or taken back.
    pub status: FindingStatus,
    /// The end of its request as this version knows it (ns); its partition hour.
    pub time_ns: i64,
    /// The summary version of the request that raised or withdrew it.
    pub summary_version: u32,
    /// The first journal record of the request version (0: none).
    pub first_record: u64,
}

/// The id of a finding: 16 hex digits of a SHA-256 over its rule, tenant, request and
/// evidence span ids, so the same finding keeps its id in every version of its request.
pub fn finding_id(f: &Finding) -> String {
    let mut h = Sha256::new();
    for part in [f.rule.id(), &f.tenant, &f.request_id]
        .into_iter()
        .chain(f.span_ids.iter().map(String::as_str))
    {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// Schema of the `findings` table.
pub fn findings_schema() -> SchemaRef {
    let list = |n: &str| {
        Field::new(
            n,
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            false,
        )
    };
    Arc::new(Schema::new(vec![
        Field::new("schema_version", DataType::Int32, false),
        Field::new("time", ts(), false),
        utf8("finding_id", false),
        utf8("rule", false),
        utf8("severity", false),
        utf8("status", false),
        utf8("request_id", false),
        list("trace_ids"),
        list("span_ids"),
        utf8("reason", false),
        Field::new("summary_version", DataType::Int32, false),
    ]))
}

/// Rows of the `findings` table being collected for one record batch.
pub struct FindingRows {
    schema: SchemaRef,
    len: usize,
    schema_version: Int32Builder,
    time: TimestampNanosecondBuilder,
    /// finding_id, rule, severity, status, request_id.
    text: [StringBuilder; 5],
    trace_ids: ListBuilder<StringBuilder>,
    span_ids: ListBuilder<StringBuilder>,
    reason: StringBuilder,
    summary_version: Int32Builder,
}

impl Default for FindingRows {
    fn default() -> Self {
        FindingRows {
            schema: findings_schema(),
            len: 0,
            schema_version: Int32Builder::small(),
            time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            text: Small::small(),
            trace_ids: ListBuilder::new(StringBuilder::new()),
            span_ids: ListBuilder::new(StringBuilder::new()),
            reason: StringBuilder::small(),
            summary_version: Int32Builder::small(),
        }
    }
}

impl TableRows for FindingRows {
    fn len(&self) -> usize {
        self.len
    }

    fn approx_bytes(&self) -> usize {
        self.len * 256
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish()),
            Arc::new(self.time.finish()),
        ];
        cols.extend(
            self.text
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        cols.push(Arc::new(self.trace_ids.finish()));
        cols.push(Arc::new(self.span_ids.finish()));
        cols.push(Arc::new(self.reason.finish()));
        cols.push(Arc::new(self.summary_version.finish()));
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    // The columns of `finish`, in its order, copied.
    fn snapshot(&self) -> Result<RecordBatch, ArrowError> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish_cloned()),
            Arc::new(self.time.finish_cloned()),
        ];
        cols.extend(
            self.text
                .iter()
                .map(|b| Arc::new(b.finish_cloned()) as ArrayRef),
        );
        cols.push(Arc::new(self.trace_ids.finish_cloned()));
        cols.push(Arc::new(self.span_ids.finish_cloned()));
        cols.push(Arc::new(self.reason.finish_cloned()));
        cols.push(Arc::new(self.summary_version.finish_cloned()));
        RecordBatch::try_new(Arc::clone(&self.schema), cols)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl ArchiveRow for FindingRow {
    type Rows = FindingRows;
    const TABLE: Table = Table::Findings;

    fn tenant(&self) -> &str {
        &self.finding.tenant
    }

    fn time_ns(&self) -> i64 {
        self.time_ns
    }

    fn record(&self) -> Option<u64> {
        (self.first_record > 0).then_some(self.first_record)
    }

    fn append_to(&self, rows: &mut FindingRows) -> Result<(), ArrowError> {
        let f = &self.finding;
        rows.schema_version.append_value(SCHEMA_VERSION);
        rows.time.append_value(self.time_ns);
        let values = [
            self.finding_id.as_str(),
            f.rule.id(),
            f.severity.as_str(),
            self.status.as_str(),
            f.request_id.as_str(),
        ];
        for (b, v) in rows.text.iter_mut().zip(values) {
            b.append_value(v);
        }
        for t in &f.trace_ids {
            rows.trace_ids.values().append_value(t);
        }
        rows.trace_ids.append(true);
        for s in &f.span_ids {
            rows.span_ids.values().append_value(s);
        }
        rows.span_ids.append(true);
        rows.reason.append_value(&f.reason);
        rows.summary_version
            .append_value(i32::try_from(self.summary_version).unwrap_or(i32::MAX));
        rows.len += 1;
        Ok(())
    }
}
