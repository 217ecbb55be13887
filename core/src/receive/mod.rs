//! Receive: OTLP/gRPC and OTLP/HTTP servers, decoding and normalization.
//!
//! Owns the listening sockets. Promises: a request is answered success only once every item
//! in it has been normalized, protected and handed to the pipeline; a request with anything
//! invalid in it is refused whole with a message saying what and where (nothing of it is
//! kept); bodies are bounded before and after decompression; overload is refused with the
//! retryable codes OTLP clients understand; every refusal is counted by reason.

pub mod admission;
pub mod auth;
pub mod decode;
pub mod grpc;
pub mod http;
pub mod normalize;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::event::EventBatch;
use crate::memory::{HeldBytes, Holder, MemoryBudget, INTAKE_PER_BODY_BYTE};
use crate::metrics::{Metrics, RejectReason, Signal, Transport};
use crate::pipeline::{Intake, Origin, Refusal};
use decode::{DecodeError, OtlpRequest};
use normalize::NormalizeError;

/// How long a request waits for the intake's memory before it is refused. A consumer over
/// its allowance gives back within a record or two (an archive file written, a request
/// summarized), mostly well inside this; a refusal costs its client a retry delay
/// (`limits.retry_after`, a second by default), a wait only this.
pub const MEMORY_WAIT: Duration = Duration::from_millis(250);

/// What the receivers share.
pub struct ReceiverContext {
    /// Where accepted batches go.
    pub intake: Arc<Intake>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Largest body, compressed and decompressed.
    pub max_body_bytes: usize,
    /// Delay suggested to clients that are refused for overload.
    pub retry_after: Duration,
    /// The senders in force (replaced on SIGHUP).
    pub senders: Arc<auth::SharedDirectory>,
    /// Rates per tenant and per sender.
    pub rates: Arc<admission::RateLimiter>,
    /// The largest span and record accepted.
    pub structure: admission::StructureLimits,
    /// What requests hold from their body to the journal's commit is counted here; over the
    /// intake's allowance, requests are refused before they are decoded.
    pub memory: Arc<MemoryBudget>,
}

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// The body could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The message decoded but holds invalid data.
    #[error("invalid OTLP data at {0}")]
    Invalid(#[from] NormalizeError),
    /// Unsupported content type.
    #[error("unsupported content type {0:?}: send application/x-protobuf or application/json")]
    MediaType(String),
    /// Unsupported content encoding.
    #[error("unsupported encoding {0:?}: send gzip or identity")]
    Encoding(String),
    /// The pipeline refused the batch.
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// No known credential.
    #[error("{0}")]
    Unauthenticated(#[from] auth::AuthFailure),
    /// A tenant or sender is over its rate.
    #[error("{} over its rate (limits.rate); retry in {:.1}s", .0.scope.as_str(), .0.retry_after.as_secs_f64())]
    RateLimited(admission::RateRefusal),
    /// A span or record is over a structural limit.
    #[error("request over a structural limit at {0}")]
    Structure(#[from] admission::StructureError),
}

impl ReceiveError {
    /// The metrics reason.
    pub fn reason(&self) -> RejectReason {
        match self {
            ReceiveError::Decode(DecodeError::TooLarge { .. }) => RejectReason::TooLarge,
            ReceiveError::Decode(_) => RejectReason::Malformed,
            ReceiveError::Invalid(_) => RejectReason::InvalidData,
            ReceiveError::MediaType(_) => RejectReason::UnsupportedMediaType,
            ReceiveError::Encoding(_) => RejectReason::UnsupportedEncoding,
            ReceiveError::Refused(Refusal::Overloaded) => RejectReason::Overloaded,
            ReceiveError::Refused(Refusal::OverMemory) => RejectReason::Memory,
            ReceiveError::Refused(Refusal::ShuttingDown) => RejectReason::ShuttingDown,
            ReceiveError::Refused(Refusal::Unavailable) => RejectReason::StorageFailed,
            ReceiveError::Unauthenticated(_) => RejectReason::Unauthenticated,
            ReceiveError::RateLimited(_) => RejectReason::RateLimited,
            ReceiveError::Structure(_) => RejectReason::StructureLimit,
        }
    }
}

/// An OTLP request type that toolwatch accepts, with its signal and normalization.
pub trait Ingestible: OtlpRequest {
    /// Which signal it carries.
    const SIGNAL: Signal;
    /// Normalizes the request.
    fn normalize(self) -> Result<EventBatch, NormalizeError>;
    /// Checks it against the structural limits.
    fn check_structure(
        &self,
        limits: &admission::StructureLimits,
    ) -> Result<(), admission::StructureError>;
}

impl Ingestible for ExportTraceServiceRequest {
    const SIGNAL: Signal = Signal::Traces;
    fn normalize(self) -> Result<EventBatch, NormalizeError> {
        normalize::spans(self)
    }
    fn check_structure(
        &self,
        limits: &admission::StructureLimits,
    ) -> Result<(), admission::StructureError> {
        admission::check_traces(self, limits)
    }
}

impl Ingestible for ExportLogsServiceRequest {
    const SIGNAL: Signal = Signal::Logs;
    fn normalize(self) -> Result<EventBatch, NormalizeError> {
        normalize::logs(self)
    }
    fn check_structure(
        &self,
        limits: &admission::StructureLimits,
    ) -> Result<(), admission::StructureError> {
        admission::check_logs(self, limits)
    }
}

/// Reads a request body of at most `limit` bytes.
pub(crate) async fn read_body(
    body: axum::body::Body,
    limit: usize,
) -> Result<bytes::Bytes, ReceiveError> {
    match axum::body::to_bytes(body, limit).await {
        Ok(b) => Ok(b),
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                Err(DecodeError::TooLarge { limit, after: "" }.into())
            } else {
                Err(DecodeError::Body(e.to_string()).into())
            }
        }
    }
}

impl ReceiverContext {
    /// The request's sender and tenant header; refused before its body is read when
    /// authentication is required and it has no known token.
    pub fn authenticate(
        &self,
        headers: &axum::http::HeaderMap,
        peer: &tls::Peer,
    ) -> Result<Origin, ReceiveError> {
        let sender = self
            .senders
            .current()
            .authenticate(headers, &peer.client_names)?;
        let tenant_header = headers
            .get(crate::tenancy::binding::TENANT_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
        Ok(Origin {
            sender,
            tenant_header,
        })
    }

    /// Normalizes a decoded request and hands it on; counts the outcome.
    pub async fn ingest<M: Ingestible>(
        &self,
        transport: Transport,
        wire_bytes: usize,
        request: M,
        origin: &Origin,
    ) -> Result<(), ReceiveError> {
        if let Err(e) = request.check_structure(&self.structure) {
            let tenant = origin
                .sender
                .as_deref()
                .and_then(crate::event::Sender::home_tenant)
                .unwrap_or("unknown");
            self.metrics.structure_refused(e.limit, tenant);
            return Err(e.into());
        }
        let mut batch = request.normalize()?;
        let items = batch.len();
        let mismatched = self.intake.file_under_tenants(&mut batch, origin);
        if let Err(e) = self.admit_tenants(&batch, wire_bytes) {
            // Refused whole: what the sender paid for it is given back.
            if let Some(s) = origin.sender.as_deref() {
                self.rates.refund_sender(&s.name, wire_bytes as u64);
            }
            return Err(e);
        }
        self.intake.submit(batch).await?;
        // Counted once accepted: a refused request is sent again and would count twice.
        if let Some(s) = origin.sender.as_deref() {
            self.metrics.tenancy.mismatched(&s.name, mismatched);
        }
        self.metrics
            .accepted(transport, M::SIGNAL, wire_bytes, items);
        Ok(())
    }

    /// Holds memory for a request of `body_bytes` until the guard is dropped (once it is
    /// answered). While the intake is at its allowance of the memory budget the request
    /// waits, up to [`MEMORY_WAIT`], for a consumer to give back (unless the bodies already
    /// waiting hold the intake's share); then it is refused: nothing more is held, and the
    /// client retries later.
    pub async fn admit_memory(&self, body_bytes: usize) -> Result<HeldBytes, ReceiveError> {
        if !crate::memory::wait_for_intake(&self.memory, MEMORY_WAIT, body_bytes).await {
            return Err(self.over_memory());
        }
        Ok(self.memory.hold(
            Holder::Intake,
            body_bytes.saturating_mul(INTAKE_PER_BODY_BYTE),
        ))
    }

    /// Once the body is decompressed and `held` counts it: refuses the request (giving back
    /// what its sender was charged) when the intake is now over its allowance and other
    /// requests are in flight too. A request alone is taken, however large: else a body over
    /// the intake's share could never be.
    pub fn recheck_memory(
        &self,
        held: &HeldBytes,
        origin: &Origin,
        wire_bytes: usize,
    ) -> Result<(), ReceiveError> {
        if self.memory.keeps(held.bytes()) {
            return Ok(());
        }
        if let Some(s) = origin.sender.as_deref() {
            self.rates.refund_sender(&s.name, wire_bytes as u64);
        }
        Err(self.over_memory())
    }

    /// A refusal for memory: not ready until a retry could succeed.
    fn over_memory(&self) -> ReceiveError {
        self.metrics.refusing_for(self.retry_after);
        Refusal::OverMemory.into()
    }

    /// Charges the request's sender for it (after its body is read, before decoding).
    pub fn admit_sender(&self, origin: &Origin, wire_bytes: usize) -> Result<(), ReceiveError> {
        let Some(sender) = origin.sender.as_deref() else {
            return Ok(());
        };
        self.rates
            .admit_sender(&sender.name, wire_bytes as u64, std::time::Instant::now())
            .map_err(|r| self.rate_limited(r))
    }

    /// Charges each tenant of the batch one request and its items' share of the bytes.
    fn admit_tenants(&self, batch: &EventBatch, wire_bytes: usize) -> Result<(), ReceiveError> {
        if self.rates.is_unlimited() || batch.is_empty() {
            return Ok(());
        }
        let mut counts: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
        for t in batch
            .spans
            .iter()
            .map(|s| s.tenant.as_str())
            .chain(batch.logs.iter().map(|l| l.tenant.as_str()))
        {
            *counts.entry(t).or_default() += 1;
        }
        let total = batch.len() as u64;
        let shares: Vec<(&str, u64)> = counts
            .into_iter()
            .map(|(t, n)| (t, wire_bytes as u64 * n / total))
            .collect();
        self.rates
            .admit_tenants(&shares, std::time::Instant::now())
            .map_err(|r| self.rate_limited(r))
    }

    fn rate_limited(&self, r: admission::RateRefusal) -> ReceiveError {
        self.metrics.rate_limited(r.scope.as_str(), &r.name);
        ReceiveError::RateLimited(r)
    }

    /// Counts and logs a refusal. The message carries no payload values.
    pub fn refused(&self, transport: Transport, signal: Signal, e: &ReceiveError) {
        let reason = e.reason();
        self.metrics.rejected(transport, signal, reason);
        if let ReceiveError::Unauthenticated(why) = e {
            self.metrics.auth_refused(transport, why.as_str());
        }
        tracing::debug!(
            transport = transport.as_str(),
            signal = signal.as_str(),
            reason = reason.as_str(),
            error = %e,
            "refused OTLP request"
        );
    }
}
