//! STUB
use serde::{Deserialize, Serialize};
use crate::config::PositiveUsize;
/// Stub.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ExportConfig {
    /// Stub.
    pub endpoints: Vec<EndpointConfig>,
}
/// Stub.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointConfig {
    /// Stub.
    pub name: String,
    /// Stub.
    pub max_batch_items: PositiveUsize,
}
