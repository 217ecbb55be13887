//! The `alarms` table's rows: the budget stage owns them and hands them to the archive
//! through [`ArchiveRow`] (one row per alarm and resolution). Column names are a contract
//! documented in `schemas/archive.md`.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float64Builder, Int32Builder, StringBuilder, TimestampNanosecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::evaluate::Alarm;
use crate::archive::table::rows::{ArchiveRow, TableRows};
use crate::archive::table::schema::{ts, utf8, Small, SCHEMA_VERSION, UTC};
use crate::archive::table::Table;

/// The `alarms` table: one row per alarm and resolution.
pub fn alarms_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("schema_version", DataType::Int32, false),
        Field::new("time", ts(), false),
        utf8("alarm_id", false),
        utf8("scope", false),
        utf8("scope_id", false),
        utf8("budget", false),
        utf8("level", false),
        utf8("reason", false),
        Field::new("observed", DataType::Float64, false),
        Field::new("limit_value", DataType::Float64, false),
        utf8("request_id", true),
        utf8("trace_id", true),
    ]))
}

/// Rows of the `alarms` table being collected for one record batch.
pub struct AlarmRows {
    schema: SchemaRef,
    len: usize,
    schema_version: Int32Builder,
    time: TimestampNanosecondBuilder,
    /// alarm_id, scope, scope_id, budget, level, reason.
    text: [StringBuilder; 6],
    observed: Float64Builder,
    limit_value: Float64Builder,
    request_id: StringBuilder,
    trace_id: StringBuilder,
}

impl Default for AlarmRows {
    fn default() -> Self {
        AlarmRows {
            schema: alarms_schema(),
            len: 0,
            schema_version: Int32Builder::small(),
            time: TimestampNanosecondBuilder::small().with_timezone(UTC),
            text: Small::small(),
            observed: Float64Builder::small(),
            limit_value: Float64Builder::small(),
            request_id: StringBuilder::small(),
            trace_id: StringBuilder::small(),
        }
    }
}

impl TableRows for AlarmRows {
    fn len(&self) -> usize {
        self.len
    }

    /// A fixed share a row: an alarm is a few ids, names and a reason.
    fn approx_bytes(&self) -> usize {
        self.len * 512
    }

    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish()),
            Arc::new(self.time.finish()),
        ];
        for b in &mut self.text {
            columns.push(Arc::new(b.finish()));
        }
        columns.push(Arc::new(self.observed.finish()));
        columns.push(Arc::new(self.limit_value.finish()));
        columns.push(Arc::new(self.request_id.finish()));
        columns.push(Arc::new(self.trace_id.finish()));
        self.len = 0;
        RecordBatch::try_new(Arc::clone(&self.schema), columns)
    }

    // The columns of `finish`, in its order, copied. A `&self` walk cannot share finish's
    // `&mut` one; the tests hold the two to the same batch.
    fn snapshot(&self) -> Result<RecordBatch, ArrowError> {
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.schema_version.finish_cloned()),
            Arc::new(self.time.finish_cloned()),
        ];
        for b in &self.text {
            columns.push(Arc::new(b.finish_cloned()));
        }
        columns.push(Arc::new(self.observed.finish_cloned()));
        columns.push(Arc::new(self.limit_value.finish_cloned()));
        columns.push(Arc::new(self.request_id.finish_cloned()));
        columns.push(Arc::new(self.trace_id.finish_cloned()));
        RecordBatch::try_new(Arc::clone(&self.schema), columns)
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

impl ArchiveRow for Alarm {
    type Rows = AlarmRows;
    const TABLE: Table = Table::Alarms;

    fn tenant(&self) -> &str {
        &self.tenant
    }

    /// An alarm is filed under the hour it fired.
    fn time_ns(&self) -> i64 {
        self.time_ns
    }

    /// Alarms are raised, not journalled: the budget stage's saved window state, not the
    /// archive's checkpoint, keeps them from being lost.
    fn record(&self) -> Option<u64> {
        None
    }

    /// Adds one alarm.
    fn append_to(&self, rows: &mut AlarmRows) -> Result<(), ArrowError> {
        rows.schema_version.append_value(SCHEMA_VERSION);
        rows.time.append_value(self.time_ns);
        let values = [
            self.alarm_id.as_str(),
            self.scope.as_str(),
            self.scope_id.as_str(),
            self.budget.as_str(),
            self.level.as_str(),
            self.reason.as_str(),
        ];
        for (b, v) in rows.text.iter_mut().zip(values) {
            b.append_value(v);
        }
        rows.observed.append_value(self.observed);
        rows.limit_value.append_value(self.limit);
        rows.request_id.append_option(self.request_id.as_deref());
        rows.trace_id.append_option(self.trace_id.as_deref());
        rows.len += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::evaluate::{Level, Scope};
    use super::*;
    use crate::archive::table::rows::assert_snapshot_is_finish;

    #[test]
    fn an_alarm_snapshot_is_the_batch_finish_makes() {
        let warning = Alarm {
            time_ns: 1_700_000_000_000_000_000,
            alarm_id: "00112233aabbccdd".into(),
            scope: Scope::Request,
            scope_id: "req-1".into(),
            tenant: "acme".into(),
            budget: "tool_calls".into(),
            level: Level::Warning,
            reason: "warning:tool_calls".into(),
            observed: 40.0,
            limit: 50.0,
            request_id: Some("req-1".into()),
            trace_id: Some("0102030405060708090a0b0c0d0e0f10".into()),
            finding: None,
        };
        // A tenant alarm names no request or trace: the nullable columns get nulls.
        let tenant = Alarm {
            time_ns: warning.time_ns + 1,
            scope: Scope::Tenant,
            scope_id: "acme".into(),
            budget: "tokens_per_hour".into(),
            level: Level::Limit,
            reason: "budget_exhausted:tokens_per_hour".into(),
            request_id: None,
            trace_id: None,
            ..warning.clone()
        };
        assert_snapshot_is_finish(|rows: &mut AlarmRows| {
            for a in [&warning, &tenant] {
                a.append_to(rows).expect("append");
            }
        });
    }
}
