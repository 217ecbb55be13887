//! STUB (replaced by the real codec on merge).
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use crate::event::EventBatch;
/// Stub.
pub enum JournalEntry {
    /// Stub.
    Events(EventBatch),
    /// Stub.
    AlarmLogs(Vec<u8>),
}
/// Stub.
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct CodecError;
/// Stub.
pub fn encode_events(_b: &EventBatch) -> Vec<u8> { Vec::new() }
/// Stub.
pub fn encode_alarm_logs(_r: &ExportLogsServiceRequest) -> Vec<u8> { Vec::new() }
/// Stub.
pub fn decode(_b: &[u8]) -> Result<JournalEntry, CodecError> { Err(CodecError) }
