//! One downstream OTLP endpoint: an OTLP/HTTP (protobuf) or OTLP/gRPC client with the
//! retry policy the OTLP specification asks of exporters.
//!
//! A request larger than the endpoint's `max_batch_items` is split, keeping each span's or
//! record's resource and scope. Each part is sent until the endpoint takes it or `stop` is
//! cancelled: retryable failures (HTTP 429/502/503/504; gRPC `CANCELLED`, `DEADLINE_EXCEEDED`,
//! `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`, `DATA_LOSS`, and `RESOURCE_EXHAUSTED` when the
//! server sent RetryInfo; timeouts and refused connections) are retried with exponential
//! backoff and jitter, honouring `Retry-After` (seconds) and RetryInfo up to `max_backoff`.
//! Any other answer refuses the part for good; a partial success counts the items the
//! endpoint refused as failed, without retrying them. Logs name the endpoint by its configured
//! name only: never its URL (which may carry a token), header values, the server's messages
//! (which may quote the payload) or payload values.

use crate::retry::{failure_kind, retry_after, Backoff};
use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

use super::config::{header_pair, read_ca_file, Compression, EndpointConfig, Protocol};
use crate::metrics::{Metrics, Signal};

/// Largest OTLP/HTTP response body read: a success carries at most a partial-success message.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// The client's `User-Agent`.
const USER_AGENT: &str = concat!("toolwatch/", env!("CARGO_PKG_VERSION"));

/// An endpoint that cannot be set up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("export endpoint {name}: {message}")]
pub struct ExportError {
    /// The endpoint's configured name.
    pub name: String,
    /// What is wrong (never the URL or a header value).
    pub message: String,
}

/// Why a send did not deliver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// `stop` was cancelled before the endpoint took every part; send again after a restart.
    #[error("stopped before the endpoint took the request")]
    Stopped,
    /// The endpoint refused (part of) the request with an answer that must not be retried;
    /// those items are counted as failed. The message is the status, never the server's text.
    #[error("the endpoint refused the request: {0}")]
    Rejected(String),
}

/// A client for one configured endpoint; clones share the connection.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    timeout: Duration,
    max_batch_items: usize,
    initial_backoff: Duration,
    max_backoff: Duration,
    gzip: bool,
    transport: Transport,
    metrics: Arc<Metrics>,
}

// One per endpoint, behind an Arc: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Transport {
    Http {
        client: reqwest::Client,
        traces: reqwest::Url,
        logs: reqwest::Url,
        headers: reqwest::header::HeaderMap,
    },
    Grpc {
        /// Connected on first use, reconnected by tonic after a failure.
        channel: Channel,
        metadata: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
    },
}

/// What one attempt came to.
enum Attempt {
    /// Taken; `rejected` items of it refused as a partial success.
    Delivered {
        rejected: u64,
    },
    /// Worth trying again, after at least this long if the server said so.
    Retry(Option<Duration>, String),
    Rejected(String),
}

impl Endpoint {
    /// Builds the client. Nothing connects yet. Must be called inside a Tokio runtime (the
    /// gRPC channel's worker task is spawned on it).
    pub fn new(cfg: &EndpointConfig, metrics: Arc<Metrics>) -> Result<Endpoint, ExportError> {
        let fail = |message: String| ExportError {
            name: cfg.name.clone(),
            message,
        };
        let base = cfg.base_url().map_err(|m| fail(format!("url {m}")))?;
        let ca = match &cfg.ca_file {
            Some(path) => Some(read_ca_file(path).map_err(|m| fail(format!("ca_file: {m}")))?),
            None => None,
        };
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &cfg.headers {
            let (k, mut v) =
                header_pair(k, v, cfg.protocol).map_err(|m| fail(format!("headers: {m}")))?;
            // Kept out of any Debug output of a request.
            v.set_sensitive(true);
            headers.insert(k, v);
        }
        let transport = match cfg.protocol {
            Protocol::Http => {
                // No redirects: a redirect could carry the configured headers to another host.
                let mut builder = reqwest::Client::builder()
                    .use_rustls_tls()
                    .redirect(reqwest::redirect::Policy::none())
                    .connect_timeout(cfg.timeout.0)
                    .user_agent(USER_AGENT);
                if let Some(pem) = &ca {
                    let certs = reqwest::Certificate::from_pem_bundle(pem)
                        .map_err(|_| fail("ca_file: not a PEM certificate bundle".into()))?;
                    for cert in certs {
                        builder = builder.add_root_certificate(cert);
                    }
                }
                let client = builder
                    .build()
                    .map_err(|e| fail(format!("cannot build the HTTP client: {e}")))?;
                let traces = cfg
                    .signal_url(http_path(Signal::Traces))
                    .map_err(|m| fail(format!("url {m}")))?;
                let logs = cfg
                    .signal_url(http_path(Signal::Logs))
                    .map_err(|m| fail(format!("url {m}")))?;
                Transport::Http {
                    client,
                    traces,
                    logs,
                    headers,
                }
            }
            Protocol::Grpc => {
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(fail("a gRPC endpoint needs a Tokio runtime".into()));
                }
                let mut ep = tonic::transport::Endpoint::from_shared(base.to_string())
                    .map_err(|_| fail("url is not a valid gRPC URI".into()))?
                    .timeout(cfg.timeout.0)
                    .connect_timeout(cfg.timeout.0)
                    .user_agent(USER_AGENT)
                    .map_err(|_| fail("invalid user agent".into()))?;
                if base.scheme() == "https" {
                    let mut tls = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
                    if let Some(pem) = ca {
                        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
                    }
                    ep = ep
                        .tls_config(tls)
                        .map_err(|e| fail(format!("TLS setup failed: {e}")))?;
                }
                let mut metadata = Vec::with_capacity(headers.len());
                for (k, v) in &headers {
                    let key = AsciiMetadataKey::from_bytes(k.as_str().as_bytes())
                        .map_err(|_| fail(format!("headers: `{k}` is not valid gRPC metadata")))?;
                    let value = v
                        .to_str()
                        .ok()
                        .and_then(|s| AsciiMetadataValue::try_from(s).ok())
                        .ok_or_else(|| {
                            fail(format!(
                                "headers: the value of `{k}` is not valid gRPC metadata"
                            ))
                        })?;
                    metadata.push((key, value));
                }
                Transport::Grpc {
                    channel: ep.connect_lazy(),
                    metadata,
                }
            }
        };
        Ok(Endpoint {
            inner: Arc::new(Inner {
                name: cfg.name.clone(),
                timeout: cfg.timeout.0,
                max_batch_items: cfg.max_batch_items.0.max(1),
                initial_backoff: cfg.initial_backoff.0,
                max_backoff: cfg.max_backoff.0,
                gzip: cfg.compression == Compression::Gzip,
                transport,
                metrics,
            }),
        })
    }

    /// The configured name (the metric label).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Spans or log records per request; larger requests are split.
    pub fn max_batch_items(&self) -> usize {
        self.inner.max_batch_items
    }

    /// Sends one request; retries retryable failures with exponential backoff (jitter),
    /// honouring the server's hint (HTTP `Retry-After` seconds; gRPC RetryInfo), until
    /// delivered or `stop` is cancelled. Non-retryable failures return
    /// [`SendError::Rejected`] and are counted as failed; a request with no spans sends
    /// nothing. With `stop` already cancelled nothing is sent.
    pub async fn send_traces(
        &self,
        req: ExportTraceServiceRequest,
        stop: &CancellationToken,
    ) -> Result<(), SendError> {
        self.send(req, stop).await
    }

    /// [`Endpoint::send_traces`] for log records.
    pub async fn send_logs(
        &self,
        req: ExportLogsServiceRequest,
        stop: &CancellationToken,
    ) -> Result<(), SendError> {
        self.send(req, stop).await
    }

    /// Sends every part; a refused part does not keep the others from being sent.
    async fn send<P: Payload>(&self, req: P, stop: &CancellationToken) -> Result<(), SendError> {
        let mut refused = None;
        for part in req.split(self.inner.max_batch_items) {
            match self.send_part(part, stop).await {
                Ok(()) => {}
                Err(SendError::Stopped) => return Err(SendError::Stopped),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        refused.map_or(Ok(()), Err)
    }

    async fn send_part<P: Payload>(
        &self,
        part: P,
        stop: &CancellationToken,
    ) -> Result<(), SendError> {
        let inner = &*self.inner;
        let name = inner.name.as_str();
        let signal = P::SIGNAL;
        let items = part.items() as u64;
        if items == 0 {
            return Ok(());
        }
        let metrics = &inner.metrics.export;
        // OTLP/HTTP: encoded (and compressed) once for every attempt.
        let body = match inner.transport {
            Transport::Http { .. } => self.http_body(&part),
            Transport::Grpc { .. } => Bytes::new(),
        };
        let mut backoff = Backoff::new(inner.initial_backoff, inner.max_backoff);
        loop {
            let attempt = tokio::select! {
                biased;
                _ = stop.cancelled() => return Err(SendError::Stopped),
                a = self.attempt(&part, &body) => a,
            };
            match attempt {
                Attempt::Delivered { rejected } => {
                    let rejected = rejected.min(items);
                    metrics.request(name, "sent");
                    metrics.items(name, signal, "sent", items - rejected);
                    metrics.items(name, signal, "failed", rejected);
                    if rejected > 0 {
                        tracing::warn!(
                            endpoint = %name,
                            signal = signal.as_str(),
                            rejected,
                            items,
                            "export endpoint took the request only in part; the refused items are not retried"
                        );
                    }
                    return Ok(());
                }
                Attempt::Rejected(why) => {
                    metrics.request(name, "failed");
                    metrics.items(name, signal, "failed", items);
                    tracing::error!(
                        endpoint = %name,
                        signal = signal.as_str(),
                        error = %why,
                        items,
                        "export endpoint refused the request; not retried"
                    );
                    return Err(SendError::Rejected(why));
                }
                Attempt::Retry(hint, why) => {
                    metrics.request(name, "retried");
                    let wait = backoff.next_wait(hint);
                    tracing::warn!(
                        endpoint = %name,
                        signal = signal.as_str(),
                        error = %why,
                        retry_in_ms = wait.as_millis() as u64,
                        "export failed; retrying"
                    );
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return Err(SendError::Stopped),
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// The OTLP/HTTP body: protobuf, gzipped when configured.
    fn http_body<P: Payload>(&self, part: &P) -> Bytes {
        let raw = part.encode_to_vec();
        if !self.inner.gzip {
            return raw.into();
        }
        let mut gz = flate2::write::GzEncoder::new(
            Vec::with_capacity(raw.len() / 4),
            flate2::Compression::fast(),
        );
        match gz.write_all(&raw).and_then(|()| gz.finish()) {
            Ok(zipped) => zipped.into(),
            // Writing to memory does not fail; were it to, the attempt sends it plain.
            Err(_) => raw.into(),
        }
    }

    async fn attempt<P: Payload>(&self, part: &P, body: &Bytes) -> Attempt {
        let inner = &*self.inner;
        match &inner.transport {
            Transport::Http {
                client,
                traces,
                logs,
                headers,
            } => {
                let url = match P::SIGNAL {
                    Signal::Traces => traces,
                    Signal::Logs => logs,
                };
                let mut req = client
                    .post(url.clone())
                    .timeout(inner.timeout)
                    .headers(headers.clone())
                    .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(body.clone());
                if inner.gzip {
                    req = req.header(reqwest::header::CONTENT_ENCODING, "gzip");
                }
                inner.metrics.export.sent_bytes(&inner.name, body.len());
                http_outcome::<P>(req.send().await).await
            }
            Transport::Grpc { channel, metadata } => {
                let mut req = tonic::Request::new(part.clone());
                req.set_timeout(inner.timeout);
                for (k, v) in metadata {
                    req.metadata_mut().insert(k.clone(), v.clone());
                }
                inner
                    .metrics
                    .export
                    .sent_bytes(&inner.name, part.encoded_len());
                match P::grpc(channel.clone(), req, inner.gzip).await {
                    Ok(resp) => Attempt::Delivered {
                        rejected: P::rejected(resp.get_ref()),
                    },
                    Err(status) => grpc_outcome(&status),
                }
            }
        }
    }
}

/// Classifies an OTLP/HTTP answer as the specification does: 2xx delivered (its body may be a
/// partial success), 429/502/503/504 retryable, anything else refused.
async fn http_outcome<P: Payload>(sent: Result<reqwest::Response, reqwest::Error>) -> Attempt {
    match sent {
        Ok(r) if r.status().is_success() => {
            let rejected = read_limited(r)
                .await
                .and_then(|body| P::Response::decode(body.as_slice()).ok())
                .map_or(0, |resp| P::rejected(&resp));
            Attempt::Delivered { rejected }
        }
        Ok(r) => {
            let status = r.status().as_u16();
            let hint = retry_after(r.headers());
            let why = format!("HTTP {status}");
            if matches!(status, 429 | 502 | 503 | 504) {
                Attempt::Retry(hint, why)
            } else {
                Attempt::Rejected(why)
            }
        }
        Err(e) => Attempt::Retry(None, failure_kind(&e).into()),
    }
}

/// A response body up to [`MAX_RESPONSE_BYTES`]; `None` when longer or cut off.
async fn read_limited(mut r: reqwest::Response) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(chunk) = r.chunk().await.ok()? {
        if out.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return None;
        }
        out.extend_from_slice(&chunk);
    }
    Some(out)
}

/// Classifies a gRPC status by the OTLP specification's table of retryable codes.
fn grpc_outcome(status: &Status) -> Attempt {
    let hint = status
        .get_error_details()
        .retry_info()
        .and_then(|r| r.retry_delay);
    // The status message is the server's text and may quote the payload: only the code.
    let why = format!("gRPC {:?}", status.code());
    match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => Attempt::Retry(hint, why),
        // Only retryable when the server says when to come back.
        Code::ResourceExhausted if hint.is_some() => Attempt::Retry(hint, why),
        _ => Attempt::Rejected(why),
    }
}

/// The OTLP/HTTP path below an endpoint's base URL.
fn http_path(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "v1/traces",
        Signal::Logs => "v1/logs",
    }
}

/// What the two signals' requests have in common for sending.
trait Payload: Message + Default + Clone + Send + Sync + 'static {
    const SIGNAL: Signal;
    type Response: Message + Default;
    /// Spans or log records.
    fn items(&self) -> usize;
    /// Parts of at most `max` items, each item under its own resource and scope.
    fn split(self, max: usize) -> Vec<Self>;
    /// Items refused in a partial success.
    fn rejected(resp: &Self::Response) -> u64;
    /// One gRPC call.
    fn grpc(
        channel: Channel,
        req: tonic::Request<Self>,
        gzip: bool,
    ) -> impl Future<Output = Result<tonic::Response<Self::Response>, Status>> + Send;
}

/// Splits a request into parts of at most `max` items, copying each resource and scope
/// header into every part that holds some of its items, and keeping the items' order.
macro_rules! split_request {
    ($req:expr, $max:expr, $resources:ident, $scopes:ident, $items:ident) => {{
        let max = $max;
        let mut parts = Vec::new();
        let mut cur = Self::default();
        let mut n = 0;
        for mut resource in $req.$resources {
            let scopes = std::mem::take(&mut resource.$scopes);
            let mut resource_open = false;
            for mut scope in scopes {
                let mut items = std::mem::take(&mut scope.$items).into_iter();
                let mut scope_open = false;
                loop {
                    if n == max {
                        parts.push(std::mem::take(&mut cur));
                        n = 0;
                        resource_open = false;
                        scope_open = false;
                    }
                    let chunk: Vec<_> = items.by_ref().take(max - n).collect();
                    if chunk.is_empty() {
                        break;
                    }
                    n += chunk.len();
                    if !resource_open {
                        cur.$resources.push(resource.clone());
                        resource_open = true;
                    }
                    let r = cur.$resources.len() - 1;
                    let r = &mut cur.$resources[r];
                    if !scope_open {
                        r.$scopes.push(scope.clone());
                        scope_open = true;
                    }
                    let s = r.$scopes.len() - 1;
                    r.$scopes[s].$items.extend(chunk);
                }
            }
        }
        if n > 0 {
            parts.push(cur);
        }
        parts
    }};
}

impl Payload for ExportTraceServiceRequest {
    const SIGNAL: Signal = Signal::Traces;
    type Response = ExportTraceServiceResponse;

    fn items(&self) -> usize {
        self.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum()
    }

    fn split(self, max: usize) -> Vec<Self> {
        if self.items() <= max {
            return vec![self];
        }
        split_request!(self, max.max(1), resource_spans, scope_spans, spans)
    }

    fn rejected(resp: &Self::Response) -> u64 {
        resp.partial_success
            .as_ref()
            .map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0))
    }

    async fn grpc(
        channel: Channel,
        req: tonic::Request<Self>,
        gzip: bool,
    ) -> Result<tonic::Response<Self::Response>, Status> {
        let mut client = TraceServiceClient::new(channel);
        if gzip {
            client = client
                .send_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Gzip);
        }
        client.export(req).await
    }
}

impl Payload for ExportLogsServiceRequest {
    const SIGNAL: Signal = Signal::Logs;
    type Response = ExportLogsServiceResponse;

    fn items(&self) -> usize {
        self.resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum()
    }

    fn split(self, max: usize) -> Vec<Self> {
        if self.items() <= max {
            return vec![self];
        }
        split_request!(self, max.max(1), resource_logs, scope_logs, log_records)
    }

    fn rejected(resp: &Self::Response) -> u64 {
        resp.partial_success
            .as_ref()
            .map_or(0, |p| u64::try_from(p.rejected_log_records).unwrap_or(0))
    }

    async fn grpc(
        channel: Channel,
        req: tonic::Request<Self>,
        gzip: bool,
    ) -> Result<tonic::Response<Self::Response>, Status> {
        let mut client = LogsServiceClient::new(channel);
        if gzip {
            client = client
                .send_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Gzip);
        }
        client.export(req).await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::io::Read;
    use std::sync::Mutex;
    use std::time::Instant;

    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, Uri};
    use axum::response::{IntoResponse, Response};
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess;
    use opentelemetry_proto::tonic::common::v1::{
        any_value, AnyValue, InstrumentationScope, KeyValue,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use tokio::sync::mpsc;
    use tonic_types::ErrorDetails;

    use super::*;
    use crate::units::{HumanDuration, PositiveUsize};

    /// Long enough for any awaited condition on a loaded 2-core machine.
    const DEADLINE: Duration = Duration::from_secs(20);

    fn config(url: String, protocol: Protocol) -> EndpointConfig {
        EndpointConfig {
            name: "downstream".into(),
            url,
            protocol,
            headers: [("authorization".to_string(), "Bearer t0ken".to_string())].into(),
            timeout: HumanDuration(Duration::from_secs(5)),
            max_batch_items: PositiveUsize(1000),
            initial_backoff: HumanDuration(Duration::from_millis(10)),
            max_backoff: HumanDuration(Duration::from_secs(30)),
            ca_file: None,
            compression: Compression::None,
        }
    }

    fn span(i: u8) -> Span {
        Span {
            trace_id: vec![1; 16],
            span_id: vec![i; 8],
            name: format!("span-{i}"),
            ..Default::default()
        }
    }

    fn resource(service: &str, scopes: Vec<(&str, Vec<Span>)>) -> ResourceSpans {
        ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(service.into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: scopes
                .into_iter()
                .map(|(name, spans)| ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: name.into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn request() -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![resource(
                "executor",
                vec![("tools", vec![span(1), span(2)])],
            )],
        }
    }

    /// What an OTLP/HTTP test receiver saw of one POST.
    struct Post {
        path: String,
        headers: HeaderMap,
        body: Bytes,
    }

    /// An OTLP/HTTP receiver answering from a script (then 200 with `success`), reporting
    /// every POST.
    struct HttpReceiver {
        replies: Mutex<VecDeque<Response>>,
        success: Vec<u8>,
        seen: mpsc::UnboundedSender<Post>,
    }

    async fn receive_post(
        State(r): State<Arc<HttpReceiver>>,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let _ = r.seen.send(Post {
            path: uri.path().to_string(),
            headers,
            body,
        });
        let next = r
            .replies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front();
        next.unwrap_or_else(|| {
            (
                [(http::header::CONTENT_TYPE, "application/x-protobuf")],
                r.success.clone(),
            )
                .into_response()
        })
    }

    /// Starts a receiver on 127.0.0.1:0; returns its base URL and the POSTs it sees.
    async fn http_receiver(
        replies: Vec<Response>,
        success: Vec<u8>,
    ) -> (String, mpsc::UnboundedReceiver<Post>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(HttpReceiver {
            replies: Mutex::new(replies.into()),
            success,
            seen: tx,
        });
        let app = axum::Router::new().fallback(receive_post).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (format!("http://{addr}"), rx)
    }

    fn drain<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> Vec<T> {
        let mut out = Vec::new();
        while let Ok(p) = rx.try_recv() {
            out.push(p);
        }
        out
    }

    fn has(metrics: &Metrics, line: &str) -> bool {
        metrics.render().lines().any(|l| l == line)
    }

    async fn within<F: Future>(f: F) -> F::Output {
        tokio::time::timeout(DEADLINE, f).await.expect("deadline")
    }

    #[tokio::test]
    async fn http_retries_after_the_servers_hint_then_delivers() {
        let busy = (
            StatusCode::SERVICE_UNAVAILABLE,
            [(http::header::RETRY_AFTER, "1")],
        )
            .into_response();
        let ok = ExportTraceServiceResponse::default().encode_to_vec();
        let (url, mut rx) = http_receiver(vec![busy], ok).await;
        let metrics = Arc::new(Metrics::new());
        let ep = Endpoint::new(&config(url, Protocol::Http), Arc::clone(&metrics)).expect("new");
        let started = Instant::now();
        let sent = within(ep.send_traces(request(), &CancellationToken::new())).await;
        assert_eq!(sent, Ok(()));
        // The hint (1 s) is honoured over initial_backoff (10 ms).
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let posts = drain(&mut rx);
        assert_eq!(posts.len(), 2);
        for p in &posts {
            assert_eq!(p.path, "/v1/traces");
            assert_eq!(p.headers["content-type"], "application/x-protobuf");
            assert_eq!(p.headers["authorization"], "Bearer t0ken");
            assert!(p.headers.get("content-encoding").is_none());
            let got = ExportTraceServiceRequest::decode(p.body.clone()).expect("protobuf");
            assert_eq!(got, request());
        }
        let m = &metrics;
        assert!(
            has(
                m,
                r#"toolwatch_export_requests_total{endpoint="downstream",outcome="retried"} 1"#
            ),
            "{}",
            m.render()
        );
        assert!(has(
            m,
            r#"toolwatch_export_requests_total{endpoint="downstream",outcome="sent"} 1"#
        ));
        assert!(has(
            m,
            r#"toolwatch_export_items_total{endpoint="downstream",signal="traces",outcome="sent"} 2"#
        ));
        let bytes = posts.iter().map(|p| p.body.len()).sum::<usize>();
        assert!(has(
            m,
            &format!(r#"toolwatch_export_sent_bytes_total{{endpoint="downstream"}} {bytes}"#)
        ));
    }

    #[tokio::test]
    async fn http_bad_request_is_rejected_and_not_retried() {
        let bad = StatusCode::BAD_REQUEST.into_response();
        let (url, mut rx) = http_receiver(vec![bad], Vec::new()).await;
        let metrics = Arc::new(Metrics::new());
        let ep = Endpoint::new(&config(url, Protocol::Http), Arc::clone(&metrics)).expect("new");
        let sent = within(ep.send_traces(request(), &CancellationToken::new())).await;
        assert_eq!(sent, Err(SendError::Rejected("HTTP 400".into())));
        assert_eq!(drain(&mut rx).len(), 1);
        let m = &metrics;
        assert!(
            has(
                m,
                r#"toolwatch_export_requests_total{endpoint="downstream",outcome="failed"} 1"#
            ),
            "{}",
            m.render()
        );
        assert!(has(
            m,
            r#"toolwatch_export_items_total{endpoint="downstream",signal="traces",outcome="failed"} 2"#
        ));
        assert!(!m.render().contains(r#"outcome="retried""#));
    }

    #[tokio::test]
    async fn http_gzips_splits_and_counts_a_partial_success() {
        let partial = ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: 1,
                error_message: "span 2 is too old".into(),
            }),
        };
        let (url, mut rx) = http_receiver(Vec::new(), partial.encode_to_vec()).await;
        let metrics = Arc::new(Metrics::new());
        let mut cfg = config(format!("{url}/otlp/"), Protocol::Http);
        cfg.compression = Compression::Gzip;
        cfg.max_batch_items = PositiveUsize(2);
        let ep = Endpoint::new(&cfg, Arc::clone(&metrics)).expect("new");
        let mut req = request();
        req.resource_spans[0].scope_spans[0].spans.push(span(3));
        let sent = within(ep.send_traces(req.clone(), &CancellationToken::new())).await;
        assert_eq!(sent, Ok(()));
        let posts = drain(&mut rx);
        assert_eq!(posts.len(), 2, "3 spans at 2 per request");
        let mut spans = Vec::new();
        for p in &posts {
            assert_eq!(p.path, "/otlp/v1/traces");
            assert_eq!(p.headers["content-encoding"], "gzip");
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(p.body.as_ref())
                .read_to_end(&mut raw)
                .expect("gzip");
            let got = ExportTraceServiceRequest::decode(raw.as_slice()).expect("protobuf");
            assert_eq!(
                got.resource_spans[0].resource,
                req.resource_spans[0].resource
            );
            spans.extend(got.resource_spans[0].scope_spans[0].spans.clone());
        }
        assert_eq!(spans, req.resource_spans[0].scope_spans[0].spans);
        let m = &metrics;
        // Each of the two answers refused one span: counted failed, not retried.
        assert!(
            has(
                m,
                r#"toolwatch_export_items_total{endpoint="downstream",signal="traces",outcome="sent"} 1"#
            ),
            "{}",
            m.render()
        );
        assert!(has(
            m,
            r#"toolwatch_export_items_total{endpoint="downstream",signal="traces",outcome="failed"} 2"#
        ));
        assert!(has(
            m,
            r#"toolwatch_export_requests_total{endpoint="downstream",outcome="sent"} 2"#
        ));
    }

    #[tokio::test]
    async fn stop_during_backoff_returns_stopped_promptly() {
        let busy = || {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [(http::header::RETRY_AFTER, "30")],
            )
                .into_response()
        };
        let (url, mut rx) = http_receiver(vec![busy(), busy()], Vec::new()).await;
        let ep =
            Endpoint::new(&config(url, Protocol::Http), Arc::new(Metrics::new())).expect("new");
        let stop = CancellationToken::new();
        let send = tokio::spawn({
            let (ep, stop) = (ep.clone(), stop.clone());
            async move { ep.send_traces(request(), &stop).await }
        });
        within(rx.recv()).await.expect("first POST");
        stop.cancel();
        let stopped_at = Instant::now();
        let sent = within(send).await.expect("task");
        assert_eq!(sent, Err(SendError::Stopped));
        assert!(stopped_at.elapsed() < Duration::from_secs(5));
        assert!(drain(&mut rx).is_empty(), "no second attempt");
    }

    type Seen = (tonic::metadata::MetadataMap, ExportTraceServiceRequest);

    /// An OTLP/gRPC trace receiver answering from a script (`None` = OK; OK after its end).
    struct GrpcReceiver {
        replies: Mutex<VecDeque<Option<Status>>>,
        seen: mpsc::UnboundedSender<Seen>,
    }

    #[tonic::async_trait]
    impl TraceService for GrpcReceiver {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, Status> {
            let (metadata, _, message) = request.into_parts();
            let _ = self.seen.send((metadata, message));
            let next = self
                .replies
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop_front()
                .flatten();
            match next {
                Some(status) => Err(status),
                None => Ok(tonic::Response::new(ExportTraceServiceResponse::default())),
            }
        }
    }

    async fn grpc_receiver(
        replies: Vec<Option<Status>>,
    ) -> (String, mpsc::UnboundedReceiver<Seen>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let service = TraceServiceServer::new(GrpcReceiver {
            replies: Mutex::new(replies.into()),
            seen: tx,
        })
        .accept_compressed(CompressionEncoding::Gzip);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        });
        (format!("http://{addr}"), rx)
    }

    #[tokio::test]
    async fn grpc_honours_retry_info_then_delivers_and_refuses_invalid_arguments() {
        let unavailable = Status::with_error_details(
            Code::Unavailable,
            "busy",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(300))),
        );
        let invalid = Status::invalid_argument("span 1 has a bad id");
        let (url, mut rx) = grpc_receiver(vec![Some(unavailable), None, Some(invalid)]).await;
        let metrics = Arc::new(Metrics::new());
        let mut cfg = config(url, Protocol::Grpc);
        cfg.compression = Compression::Gzip;
        let ep = Endpoint::new(&cfg, Arc::clone(&metrics)).expect("new");
        let stop = CancellationToken::new();

        let started = Instant::now();
        assert_eq!(within(ep.send_traces(request(), &stop)).await, Ok(()));
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "RetryInfo over initial_backoff"
        );
        let calls = drain(&mut rx);
        assert_eq!(calls.len(), 2);
        for (metadata, message) in &calls {
            assert_eq!(message, &request());
            assert_eq!(
                metadata.get("authorization").and_then(|v| v.to_str().ok()),
                Some("Bearer t0ken")
            );
        }

        let refused = within(ep.send_traces(request(), &stop)).await;
        assert_eq!(
            refused,
            Err(SendError::Rejected("gRPC InvalidArgument".into()))
        );
        assert_eq!(drain(&mut rx).len(), 1, "not retried");

        let m = &metrics;
        for line in [
            r#"toolwatch_export_requests_total{endpoint="downstream",outcome="retried"} 1"#,
            r#"toolwatch_export_requests_total{endpoint="downstream",outcome="sent"} 1"#,
            r#"toolwatch_export_requests_total{endpoint="downstream",outcome="failed"} 1"#,
            r#"toolwatch_export_items_total{endpoint="downstream",signal="traces",outcome="sent"} 2"#,
            r#"toolwatch_export_items_total{endpoint="downstream",signal="traces",outcome="failed"} 2"#,
        ] {
            assert!(has(m, line), "{line} in {}", m.render());
        }
    }

    #[test]
    fn grpc_codes_are_classified_as_otlp_says() {
        let retried = |s: Status| matches!(grpc_outcome(&s), Attempt::Retry(..));
        assert!(retried(Status::unavailable("x")));
        assert!(retried(Status::deadline_exceeded("x")));
        assert!(!retried(Status::resource_exhausted("no hint")));
        assert!(retried(Status::with_error_details(
            Code::ResourceExhausted,
            "hint",
            ErrorDetails::with_retry_info(Some(Duration::from_secs(2))),
        )));
        assert!(!retried(Status::permission_denied("x")));
        assert!(!retried(Status::unimplemented("x")));
    }

    /// (scope name, spans) of one resource in a part.
    type Scopes = Vec<(String, usize)>;

    #[test]
    fn a_split_keeps_resources_scopes_and_order() {
        let req = ExportTraceServiceRequest {
            resource_spans: vec![
                resource(
                    "a",
                    vec![
                        ("s1", vec![span(1), span(2), span(3)]),
                        ("s2", vec![span(4)]),
                    ],
                ),
                resource("b", vec![("s3", vec![]), ("s4", vec![span(5)])]),
            ],
        };
        let parts = req.clone().split(2);
        let shape: Vec<Vec<Scopes>> = parts
            .iter()
            .map(|p| {
                p.resource_spans
                    .iter()
                    .map(|r| {
                        r.scope_spans
                            .iter()
                            .map(|s| (s.scope.clone().unwrap_or_default().name, s.spans.len()))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let s = |n: &str, k| (n.to_string(), k);
        assert_eq!(
            shape,
            vec![
                vec![vec![s("s1", 2)]],
                vec![vec![s("s1", 1), s("s2", 1)]],
                vec![vec![s("s4", 1)]],
            ]
        );
        assert_eq!(
            parts[2].resource_spans[0].resource,
            req.resource_spans[1].resource
        );
        let all: Vec<Span> = parts
            .into_iter()
            .flat_map(|p| p.resource_spans)
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect();
        assert_eq!(all.len(), 5);
        assert_eq!(
            all.iter().map(|s| s.span_id[0]).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        assert_eq!(
            request().split(1000),
            vec![request()],
            "small requests stay whole"
        );
    }
}
