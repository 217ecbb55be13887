//! OTLP/HTTP: `POST /v1/traces` and `POST /v1/logs`, protobuf or JSON, optionally gzip.
//!
//! Answers follow the OTLP specification: 200 with an export response in the request's
//! encoding; 400 for malformed or invalid data, 413 for an oversized body, 415 for an
//! unsupported content type or encoding, 429/503 with `Retry-After` when refusing load, 401
//! with `WWW-Authenticate: Bearer` when a required credential is missing or unknown.
//! Error bodies are a `google.rpc.Status` in the request's encoding.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;

use super::decode::{self, DecodeError};
use super::tls::Peer;
use super::{Ingestible, ReceiveError, ReceiverContext};
use crate::memory::INTAKE_PER_BODY_BYTE;
use crate::metrics::Transport;
use crate::pipeline::Refusal;

/// Body encodings OTLP/HTTP defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Format::Protobuf => "application/x-protobuf",
            Format::Json => "application/json",
        }
    }
}

/// The OTLP/HTTP routes.
pub fn router(ctx: Arc<ReceiverContext>) -> Router {
    Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/logs", post(logs))
        // The body limit is enforced by `read_body` so that refusals are counted and explained.
        .layer(DefaultBodyLimit::disable())
        .with_state(ctx)
}

async fn traces(
    State(ctx): State<Arc<ReceiverContext>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    export::<ExportTraceServiceRequest, _>(
        &ctx,
        &peer,
        &headers,
        body,
        ExportTraceServiceResponse::default(),
    )
    .await
}

async fn logs(
    State(ctx): State<Arc<ReceiverContext>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    export::<ExportLogsServiceRequest, _>(
        &ctx,
        &peer,
        &headers,
        body,
        ExportLogsServiceResponse::default(),
    )
    .await
}

async fn export<M, R>(
    ctx: &ReceiverContext,
    peer: &Peer,
    headers: &HeaderMap,
    body: Body,
    ok: R,
) -> Response
where
    M: Ingestible,
    R: Message + serde::Serialize,
{
    // Answer errors in the request's format where it is known, protobuf otherwise.
    let format = format_of(headers).unwrap_or(Format::Protobuf);
    match receive::<M>(ctx, peer, headers, body).await {
        Ok(()) => success(format, &ok),
        Err(e) => {
            ctx.refused(Transport::Http, M::SIGNAL, &e);
            failure(format, &e, ctx)
        }
    }
}

async fn receive<M: Ingestible>(
    ctx: &ReceiverContext,
    peer: &Peer,
    headers: &HeaderMap,
    body: Body,
) -> Result<(), ReceiveError> {
    // Before anything of the request is read: an unknown sender learns nothing else.
    let origin = ctx.authenticate(headers, peer)?;
    let format = match format_of(headers) {
        Some(f) => f,
        None => {
            return Err(ReceiveError::MediaType(header_text(
                headers,
                header::CONTENT_TYPE,
            )))
        }
    };
    let gzip = match header_text(headers, header::CONTENT_ENCODING)
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "identity" => false,
        "gzip" | "x-gzip" => true,
        other => return Err(ReceiveError::Encoding(other.to_string())),
    };
    let raw = super::read_body(body, ctx.max_body_bytes).await?;
    let wire_bytes = raw.len();
    // Held until the request is answered: the journal has committed its record by then.
    let mut held = ctx.admit_memory(wire_bytes).await?;
    ctx.admit_sender(&origin, wire_bytes)?;
    let plain = if gzip {
        Bytes::from(decode::gunzip(&raw, ctx.max_body_bytes)?)
    } else {
        raw
    };
    held.resize(plain.len().saturating_mul(INTAKE_PER_BODY_BYTE));
    ctx.recheck_memory(&held, &origin, wire_bytes)?;
    let request: M = match format {
        Format::Protobuf => decode::protobuf(&plain)?,
        Format::Json => decode::json(&plain)?,
    };
    ctx.ingest(Transport::Http, wire_bytes, request, &origin)
        .await
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_string()
}

fn format_of(headers: &HeaderMap) -> Option<Format> {
    let ct = header_text(headers, header::CONTENT_TYPE);
    let media = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/x-protobuf" | "application/protobuf" => Some(Format::Protobuf),
        "application/json" => Some(Format::Json),
        _ => None,
    }
}

fn success<R: Message + serde::Serialize>(format: Format, msg: &R) -> Response {
    let body = match format {
        Format::Protobuf => msg.encode_to_vec(),
        Format::Json => serde_json::to_vec(msg).unwrap_or_else(|_| b"{}".to_vec()),
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response()
}

/// gRPC code numbers carried in the `google.rpc.Status` body.
fn grpc_code(e: &ReceiveError) -> tonic::Code {
    match e {
        ReceiveError::Decode(DecodeError::TooLarge { .. }) => tonic::Code::ResourceExhausted,
        ReceiveError::Decode(_) | ReceiveError::Invalid(_) => tonic::Code::InvalidArgument,
        ReceiveError::MediaType(_) | ReceiveError::Encoding(_) => tonic::Code::InvalidArgument,
        ReceiveError::Refused(Refusal::Overloaded | Refusal::OverMemory) => {
            tonic::Code::ResourceExhausted
        }
        ReceiveError::Refused(Refusal::ShuttingDown | Refusal::Unavailable) => {
            tonic::Code::Unavailable
        }
        ReceiveError::Unauthenticated(_) => tonic::Code::Unauthenticated,
        ReceiveError::RateLimited(_) => tonic::Code::ResourceExhausted,
        ReceiveError::Structure(_) => tonic::Code::InvalidArgument,
    }
}

fn http_status(e: &ReceiveError) -> StatusCode {
    match e {
        ReceiveError::Decode(DecodeError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
        ReceiveError::Decode(_) | ReceiveError::Invalid(_) => StatusCode::BAD_REQUEST,
        ReceiveError::MediaType(_) | ReceiveError::Encoding(_) => {
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        }
        ReceiveError::Refused(Refusal::Overloaded | Refusal::OverMemory) => {
            StatusCode::TOO_MANY_REQUESTS
        }
        ReceiveError::Refused(Refusal::ShuttingDown | Refusal::Unavailable) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ReceiveError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        ReceiveError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        ReceiveError::Structure(_) => StatusCode::BAD_REQUEST,
    }
}

fn failure(format: Format, e: &ReceiveError, ctx: &ReceiverContext) -> Response {
    let code = grpc_code(e) as i32;
    let message = e.to_string();
    let body = match format {
        Format::Protobuf => tonic_types::Status {
            code,
            message,
            details: Vec::new(),
        }
        .encode_to_vec(),
        Format::Json => serde_json::json!({ "code": code, "message": message })
            .to_string()
            .into_bytes(),
    };
    let mut resp = (
        http_status(e),
        [(header::CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response();
    if matches!(e, ReceiveError::Unauthenticated(_)) {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"toolwatch\""),
        );
    }
    let retry = match e {
        ReceiveError::Refused(_) => Some(ctx.retry_after),
        ReceiveError::RateLimited(r) => Some(r.retry_after),
        _ => None,
    };
    if let Some(delay) = retry {
        // Whole seconds, rounded up: a client that retries sooner is refused again.
        let secs = delay.as_secs_f64().ceil().max(1.0) as u64;
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    resp
}
