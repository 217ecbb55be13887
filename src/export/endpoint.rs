//! STUB
use std::sync::Arc;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokio_util::sync::CancellationToken;
use crate::metrics::Metrics;
use super::config::EndpointConfig;
/// Stub.
pub struct Endpoint { name: String }
/// Stub.
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct ExportError;
/// Stub.
pub enum SendError {
    /// Stub.
    Stopped,
    /// Stub.
    Rejected(String),
}
impl Endpoint {
    /// Stub.
    pub fn new(c: &EndpointConfig, _m: Arc<Metrics>) -> Result<Endpoint, ExportError> { Ok(Endpoint { name: c.name.clone() }) }
    /// Stub.
    pub fn name(&self) -> &str { &self.name }
    /// Stub.
    pub async fn send_traces(&self, _r: ExportTraceServiceRequest, _s: &CancellationToken) -> Result<(), SendError> { Ok(()) }
    /// Stub.
    pub async fn send_logs(&self, _r: ExportLogsServiceRequest, _s: &CancellationToken) -> Result<(), SendError> { Ok(()) }
}
