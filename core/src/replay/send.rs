//! Sending replayed requests to the daemon's OTLP/HTTP receiver: split to fit its request
//! limit, retried while it is refusing for load or unreachable, a refusal for what the request
//! holds reported with the daemon's own reason.

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message;

use crate::retry::{failure_kind, retry_after, Backoff};

/// The daemon's OTLP/HTTP receiver.
pub struct Target {
    client: reqwest::Client,
    /// `…/v1/traces`.
    traces_url: String,
    /// `…/v1/logs`.
    logs_url: String,
    token: Option<String>,
    tenant: Option<String>,
    retry_for: Duration,
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged.
    Taken,
    /// Refused for what it holds (HTTP 4xx other than 408/429), or partly rejected: the
    /// daemon's reason.
    Refused(String),
}

/// Why sending cannot go on (the replay stops, its progress kept).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Refused for load, or unreachable, for longer than the replay retries.
    #[error("the daemon did not take a request for {seconds} s (last: {last}); run the replay again to resume")]
    GaveUp {
        /// How long it retried.
        seconds: u64,
        /// The last answer or failure.
        last: String,
    },
    /// The daemon refused the sender itself (401/403): nothing else will be taken.
    #[error("the daemon refused this sender: {0}")]
    Forbidden(String),
    /// An answer that says nothing about the request's content (404, 405, 415, 500, ...): not
    /// toolwatch's OTLP/HTTP receiver there, or something broken. The message stays unsent.
    #[error("unexpected answer to {path}: {why} (is --target the OTLP/HTTP receiver's base URL, such as http://127.0.0.1:4318?)")]
    Unexpected {
        /// The path it was posted to (not the whole URL, which may hold credentials).
        path: String,
        /// The status and message.
        why: String,
    },
}

enum Attempt {
    Done(Outcome),
    Retry(Option<Duration>, String),
    Fatal(SendError),
}

impl Target {
    /// A target at `base` (e.g. `http://127.0.0.1:4318`).
    pub fn new(
        base: &str,
        token: Option<String>,
        tenant: Option<String>,
        retry_for: Duration,
    ) -> Result<Target, String> {
        let base = base.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "--target must be an http:// or https:// URL of the OTLP/HTTP receiver, not {base:?}"
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {}", failure_kind(&e)))?;
        Ok(Target {
            client,
            traces_url: format!("{base}/v1/traces"),
            logs_url: format!("{base}/v1/logs"),
            token,
            tenant,
            retry_for,
        })
    }

    /// Sends spans; the outcome for the whole request.
    pub async fn traces(&self, req: &ExportTraceServiceRequest) -> Result<Outcome, SendError> {
        self.send(&self.traces_url, req.encode_to_vec(), |body| {
            ExportTraceServiceResponse::decode(body)
                .ok()
                .and_then(|r| r.partial_success)
                .filter(|p| p.rejected_spans > 0)
                .map(|p| format!("{} spans rejected: {}", p.rejected_spans, p.error_message))
        })
        .await
    }

    /// Sends log records; the outcome for the whole request.
    pub async fn logs(&self, req: &ExportLogsServiceRequest) -> Result<Outcome, SendError> {
        self.send(&self.logs_url, req.encode_to_vec(), |body| {
            ExportLogsServiceResponse::decode(body)
                .ok()
                .and_then(|r| r.partial_success)
                .filter(|p| p.rejected_log_records > 0)
                .map(|p| {
                    format!(
                        "{} log records rejected: {}",
                        p.rejected_log_records, p.error_message
                    )
                })
        })
        .await
    }

    async fn send(
        &self,
        url: &str,
        body: Vec<u8>,
        partial: impl Fn(&[u8]) -> Option<String>,
    ) -> Result<Outcome, SendError> {
        let started = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let (hint, last) = match self.attempt(url, body.clone(), &partial).await {
                Attempt::Done(o) => return Ok(o),
                Attempt::Fatal(e) => return Err(e),
                Attempt::Retry(hint, why) => (hint, why),
            };
            let wait = backoff.next_wait(hint);
            if started.elapsed() + wait > self.retry_for {
                return Err(SendError::GaveUp {
                    seconds: started.elapsed().as_secs(),
                    last,
                });
            }
            tokio::time::sleep(wait).await;
        }
    }

    async fn attempt(
        &self,
        url: &str,
        body: Vec<u8>,
        partial: &impl Fn(&[u8]) -> Option<String>,
    ) -> Attempt {
        let mut req = self
            .client
            .post(url)
            .header("content-type", "application/x-protobuf")
            .body(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(t) = &self.tenant {
            req = req.header("x-toolwatch-tenant", t);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            // Transport errors are retryable: a daemon restarting, a connection reset.
            Err(e) => return Attempt::Retry(None, failure_kind(&e).to_string()),
        };
        let status = resp.status();
        let hint = retry_after(resp.headers());
        let bytes = resp.bytes().await.unwrap_or_default();
        if status.is_success() {
            return Attempt::Done(match partial(&bytes) {
                Some(why) => Outcome::Refused(why),
                None => Outcome::Taken,
            });
        }
        let why = format!("HTTP {}: {}", status.as_u16(), status_message(&bytes));
        match status.as_u16() {
            408 | 429 | 502 | 503 | 504 => Attempt::Retry(hint, why),
            401 | 403 => Attempt::Fatal(SendError::Forbidden(why)),
            // What the receiver says about this request's content: refused, the replay goes on.
            400 | 413 => Attempt::Done(Outcome::Refused(why)),
            _ => Attempt::Fatal(SendError::Unexpected {
                path: reqwest::Url::parse(url)
                    .map(|u| u.path().to_string())
                    .unwrap_or_default(),
                why,
            }),
        }
    }
}

/// The message of an OTLP/HTTP error body (a `google.rpc.Status`).
fn status_message(body: &[u8]) -> String {
    match tonic_types::Status::decode(body) {
        Ok(s) if !s.message.is_empty() => s.message,
        _ => "(no message)".into(),
    }
}

/// Splits a traces request into requests of at most `max` encoded bytes where it can: by
/// resource, then scope, then spans. A single span larger than `max` goes alone (the daemon
/// then says whether it takes it).
pub fn split_traces(req: ExportTraceServiceRequest, max: usize) -> Vec<ExportTraceServiceRequest> {
    if req.encoded_len() <= max {
        return vec![req];
    }
    let mut out = Vec::new();
    for rs in req.resource_spans {
        for part in split_resource_spans(rs, max) {
            out.push(ExportTraceServiceRequest {
                resource_spans: vec![part],
            });
        }
    }
    out
}

fn split_resource_spans(rs: ResourceSpans, max: usize) -> Vec<ResourceSpans> {
    if rs.encoded_len() <= max || (rs.scope_spans.len() <= 1 && spans_of(&rs) <= 1) {
        return vec![rs];
    }
    let shell = |scope_spans| ResourceSpans {
        resource: rs.resource.clone(),
        scope_spans,
        schema_url: rs.schema_url.clone(),
    };
    // Each part carries the resource and the framing around it as well.
    let room = max.saturating_sub(shell(Vec::new()).encoded_len() + FRAMING_BYTES);
    let mut out = Vec::new();
    for ss in rs.scope_spans.iter().cloned() {
        for part in split_scope_spans(ss, room) {
            out.push(shell(vec![part]));
        }
    }
    out
}

/// What a request's own framing adds around its resource part (field tags and lengths).
const FRAMING_BYTES: usize = 16;

fn spans_of(rs: &ResourceSpans) -> usize {
    rs.scope_spans.iter().map(|s| s.spans.len()).sum()
}

fn split_scope_spans(ss: ScopeSpans, max: usize) -> Vec<ScopeSpans> {
    if ss.encoded_len() <= max || ss.spans.len() <= 1 {
        return vec![ss];
    }
    let mut left = ss.clone();
    let right_spans = left.spans.split_off(ss.spans.len() / 2);
    let right = ScopeSpans {
        spans: right_spans,
        ..ss.clone()
    };
    let mut out = split_scope_spans(left, max);
    out.extend(split_scope_spans(right, max));
    out
}

/// [`split_traces`] for logs.
pub fn split_logs(req: ExportLogsServiceRequest, max: usize) -> Vec<ExportLogsServiceRequest> {
    if req.encoded_len() <= max {
        return vec![req];
    }
    let mut out = Vec::new();
    for rl in req.resource_logs {
        let shell = |scope_logs| ResourceLogs {
            resource: rl.resource.clone(),
            scope_logs,
            schema_url: rl.schema_url.clone(),
        };
        let room = max.saturating_sub(shell(Vec::new()).encoded_len() + FRAMING_BYTES);
        for sl in rl.scope_logs.iter().cloned() {
            for part in split_scope_logs(sl, room) {
                out.push(ExportLogsServiceRequest {
                    resource_logs: vec![shell(vec![part])],
                });
            }
        }
    }
    out
}

fn split_scope_logs(sl: ScopeLogs, max: usize) -> Vec<ScopeLogs> {
    if sl.encoded_len() <= max || sl.log_records.len() <= 1 {
        return vec![sl];
    }
    let mut left = sl.clone();
    let right_records = left.log_records.split_off(sl.log_records.len() / 2);
    let right = ScopeLogs {
        log_records: right_records,
        ..sl.clone()
    };
    let mut out = split_scope_logs(left, max);
    out.extend(split_scope_logs(right, max));
    out
}

/// Spans in a request.
pub fn span_count(req: &ExportTraceServiceRequest) -> u64 {
    req.resource_spans.iter().map(|r| spans_of(r) as u64).sum()
}

/// Log records in a request.
pub fn log_count(req: &ExportLogsServiceRequest) -> u64 {
    req.resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
    use opentelemetry_proto::tonic::trace::v1::Span;

    fn request(resources: usize, scopes: usize, spans: usize) -> ExportTraceServiceRequest {
        let mut n = 0u64;
        ExportTraceServiceRequest {
            resource_spans: (0..resources)
                .map(|_| ResourceSpans {
                    scope_spans: (0..scopes)
                        .map(|s| ScopeSpans {
                            scope: Some(InstrumentationScope {
                                name: format!("scope{s}"),
                                ..Default::default()
                            }),
                            spans: (0..spans)
                                .map(|_| {
                                    n += 1;
                                    Span {
                                        trace_id: vec![1; 16],
                                        span_id: n.to_be_bytes().to_vec(),
                                        name: "x".repeat(100),
                                        ..Default::default()
                                    }
                                })
                                .collect(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
        }
    }

    fn ids(reqs: &[ExportTraceServiceRequest]) -> Vec<Vec<u8>> {
        reqs.iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| s.span_id.clone())
            .collect()
    }

    #[test]
    fn a_large_request_splits_under_the_limit_keeping_every_span_once_in_order() {
        let req = request(3, 2, 40);
        let whole = ids(std::slice::from_ref(&req));
        let parts = split_traces(req.clone(), 2_000);
        assert!(parts.len() > 6, "{}", parts.len());
        for p in &parts {
            assert!(p.encoded_len() <= 2_000, "{}", p.encoded_len());
            // Each part keeps its scope.
            assert!(p.resource_spans[0].scope_spans[0].scope.is_some());
        }
        assert_eq!(ids(&parts), whole);
        assert_eq!(parts.iter().map(span_count).sum::<u64>(), 240);
        // Small enough: as it is.
        assert_eq!(split_traces(req.clone(), usize::MAX), vec![req]);
        // A span larger than the limit goes alone.
        let one = request(1, 1, 1);
        assert_eq!(split_traces(one.clone(), 10), vec![one]);
    }
}
