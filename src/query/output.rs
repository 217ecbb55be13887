//! Query results as a table, JSON or CSV.

use std::io::Write;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use super::QueryError;

/// Output formats of `toolwatch query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// An aligned text table.
    Table,
    /// One JSON array of row objects (timestamps as RFC 3339 text).
    Json,
    /// CSV with a header row; lists and maps as their text form.
    Csv,
}

fn output_error(e: impl std::fmt::Display) -> QueryError {
    QueryError::Output(e.to_string())
}

/// The rows as one JSON array of objects (`[]` when there are none; Arrow's writer would
/// write nothing).
pub fn json_array(batches: &[RecordBatch]) -> Result<Vec<u8>, QueryError> {
    let mut writer = datafusion::arrow::json::ArrayWriter::new(Vec::new());
    for b in batches {
        writer.write(b).map_err(output_error)?;
    }
    writer.finish().map_err(output_error)?;
    let bytes = writer.into_inner();
    Ok(if bytes.is_empty() {
        b"[]".to_vec()
    } else {
        bytes
    })
}

/// Writes the batches in `format`.
pub fn write(
    out: &mut impl Write,
    format: Format,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<(), QueryError> {
    match format {
        Format::Table => {
            let text = datafusion::arrow::util::pretty::pretty_format_batches(batches)
                .map_err(output_error)?;
            if batches.iter().all(|b| b.num_rows() == 0) {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                writeln!(out, "{}\n(0 rows)", names.join(" | ")).map_err(output_error)?;
            } else {
                writeln!(out, "{text}").map_err(output_error)?;
            }
        }
        Format::Json => {
            out.write_all(&json_array(batches)?).map_err(output_error)?;
            writeln!(out).map_err(output_error)?;
        }
        Format::Csv => {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut *out);
            if batches.is_empty() {
                let flat = flatten(&RecordBatch::new_empty(Arc::clone(schema)))?;
                writer.write(&flat).map_err(output_error)?;
            }
            for b in batches {
                writer.write(&flatten(b)?).map_err(output_error)?;
            }
        }
    }
    Ok(())
}

/// The batch with list, map and struct columns turned into their text form (CSV has no
/// nested values).
fn flatten(batch: &RecordBatch) -> Result<RecordBatch, QueryError> {
    let options = FormatOptions::default();
    let mut fields = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (field, col) in batch.schema().fields().iter().zip(batch.columns()) {
        if matches!(
            field.data_type(),
            DataType::List(_) | DataType::LargeList(_) | DataType::Map(_, _) | DataType::Struct(_)
        ) {
            let formatter =
                ArrayFormatter::try_new(col.as_ref(), &options).map_err(output_error)?;
            let mut text = StringBuilder::new();
            for i in 0..col.len() {
                if col.is_null(i) {
                    text.append_null();
                } else {
                    text.append_value(formatter.value(i).to_string());
                }
            }
            fields.push(Field::new(field.name(), DataType::Utf8, true));
            columns.push(Arc::new(text.finish()));
        } else {
            fields.push(field.as_ref().clone());
            columns.push(Arc::clone(col));
        }
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(output_error)
}
