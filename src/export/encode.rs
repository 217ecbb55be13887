//! STUB
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use crate::event::{LogRecord, SpanRecord};
/// Stub.
pub fn trace_request(_s: &[SpanRecord]) -> ExportTraceServiceRequest { Default::default() }
/// Stub.
pub fn logs_request(_s: &[LogRecord]) -> ExportLogsServiceRequest { Default::default() }
