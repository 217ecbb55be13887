//! OTLP/gRPC: the trace and logs `Export` methods, served over HTTP/2 by axum.
//!
//! The export methods are unary, so each request is one length-prefixed message. Reading the
//! frame here rather than in tonic's generated server lets toolwatch answer as OTLP asks:
//! `RESOURCE_EXHAUSTED` for an oversized message (tonic says `OUT_OF_RANGE`),
//! `INVALID_ARGUMENT` for bytes that are not the message (tonic says `INTERNAL`), gzip
//! inflated under the same bound, `UNAVAILABLE`/`RESOURCE_EXHAUSTED` with RetryInfo when
//! refusing load, and every refusal counted. Messages are `opentelemetry-proto` types.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::StreamBody;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::decode::{self, DecodeError};
use super::tls::Peer;
use super::{Ingestible, ReceiveError, ReceiverContext};
use crate::memory::INTAKE_PER_BODY_BYTE;
use crate::metrics::Transport;
use crate::pipeline::Refusal;

/// Path of the trace service's export method.
pub const TRACE_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// Path of the logs service's export method.
pub const LOGS_EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";

/// The OTLP/gRPC routes; anything else is `UNIMPLEMENTED`.
pub fn router(ctx: Arc<ReceiverContext>) -> Router {
    Router::new()
        .route(TRACE_EXPORT_PATH, post(traces))
        .route(LOGS_EXPORT_PATH, post(logs))
        .fallback(unimplemented)
        .with_state(ctx)
}

async fn unimplemented() -> Response {
    Status::unimplemented("toolwatch serves the OTLP trace and logs Export methods").into_http()
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

async fn export<M: Ingestible, R: Message>(
    ctx: &ReceiverContext,
    peer: &Peer,
    headers: &HeaderMap,
    body: Body,
    ok: R,
) -> Response {
    match receive::<M>(ctx, peer, headers, body).await {
        Ok(()) => reply(&ok),
        Err(e) => {
            ctx.refused(Transport::Grpc, M::SIGNAL, &e);
            status_of(&e, ctx).into_http()
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
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/grpc") {
        return Err(ReceiveError::MediaType(content_type.to_string()));
    }
    let gzip = match headers.get("grpc-encoding").and_then(|v| v.to_str().ok()) {
        None | Some("identity") => false,
        Some("gzip") => true,
        Some(other) => return Err(ReceiveError::Encoding(other.to_string())),
    };
    // The 5-byte frame header is not part of the message limit.
    let limit = ctx.max_body_bytes;
    let raw = match super::read_body(body, limit.saturating_add(5)).await {
        Err(ReceiveError::Decode(DecodeError::TooLarge { .. })) => {
            return Err(DecodeError::TooLarge { limit, after: "" }.into())
        }
        other => other?,
    };
    let wire_bytes = raw.len();
    // Held until the request is answered: the journal has committed its record by then.
    let mut held = ctx.admit_memory(wire_bytes).await?;
    ctx.admit_sender(&origin, wire_bytes)?;
    let (compressed, payload) = frame(&raw, limit)?;
    let message = match (compressed, gzip) {
        (false, _) => payload,
        (true, true) => Bytes::from(decode::gunzip(&payload, limit)?),
        (true, false) => {
            return Err(DecodeError::Protobuf {
                message: M::NAME,
                detail: "message is flagged compressed but no grpc-encoding was given".into(),
            }
            .into())
        }
    };
    held.resize(message.len().saturating_mul(INTAKE_PER_BODY_BYTE));
    ctx.recheck_memory(&held, &origin, wire_bytes)?;
    let request: M = decode::protobuf(&message)?;
    ctx.ingest(Transport::Grpc, wire_bytes, request, &origin)
        .await
}

/// Splits the single length-prefixed message of a unary call.
fn frame(raw: &Bytes, limit: usize) -> Result<(bool, Bytes), DecodeError> {
    let malformed = |detail: String| DecodeError::Protobuf {
        message: "gRPC frame",
        detail,
    };
    if raw.len() < 5 {
        return Err(malformed(format!(
            "request has {} bytes, less than the 5-byte gRPC message header",
            raw.len()
        )));
    }
    let compressed = match raw[0] {
        0 => false,
        1 => true,
        flag => return Err(malformed(format!("unknown compression flag {flag}"))),
    };
    let len = u32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]) as usize;
    if len > limit {
        return Err(DecodeError::TooLarge { limit, after: "" });
    }
    if raw.len() - 5 != len {
        return Err(malformed(format!(
            "message header announces {len} bytes but {} follow (a unary call carries exactly one message)",
            raw.len() - 5
        )));
    }
    Ok((compressed, raw.slice(5..)))
}

fn status_of(e: &ReceiveError, ctx: &ReceiverContext) -> Status {
    let message = e.to_string();
    match e {
        ReceiveError::Decode(DecodeError::TooLarge { .. }) => {
            Status::new(Code::ResourceExhausted, message)
        }
        ReceiveError::Decode(_) | ReceiveError::Invalid(_) | ReceiveError::MediaType(_) => {
            Status::new(Code::InvalidArgument, message)
        }
        ReceiveError::Encoding(_) => Status::new(Code::Unimplemented, message),
        ReceiveError::Unauthenticated(_) => Status::new(Code::Unauthenticated, message),
        ReceiveError::Structure(_) => Status::new(Code::InvalidArgument, message),
        ReceiveError::RateLimited(r) => Status::with_error_details(
            Code::ResourceExhausted,
            message,
            ErrorDetails::with_retry_info(Some(r.retry_after)),
        ),
        ReceiveError::Refused(r) => {
            let code = match r {
                Refusal::Overloaded | Refusal::OverMemory => Code::ResourceExhausted,
                Refusal::ShuttingDown | Refusal::Unavailable => Code::Unavailable,
            };
            Status::with_error_details(
                code,
                message,
                ErrorDetails::with_retry_info(Some(ctx.retry_after)),
            )
        }
    }
}

/// A successful unary reply: one message, then `grpc-status: 0` in the trailers.
fn reply<R: Message>(msg: &R) -> Response {
    let encoded = msg.encode_to_vec();
    let mut data = BytesMut::with_capacity(5 + encoded.len());
    data.put_u8(0);
    data.put_u32(encoded.len() as u32);
    data.put_slice(&encoded);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let frames = futures_util::stream::iter([
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(data.freeze())),
        Ok(http_body::Frame::trailers(trailers)),
    ]);
    let mut resp = Response::new(Body::new(StreamBody::new(frames)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let ok = Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1]);
        assert_eq!(frame(&ok, 10), Ok((false, Bytes::from_static(&[8, 1]))));
        let short = Bytes::from_static(&[0, 0, 0, 0, 3, 8, 1]);
        assert!(matches!(
            frame(&short, 10),
            Err(DecodeError::Protobuf { .. })
        ));
        let big = Bytes::from_static(&[0, 0, 0, 1, 0]);
        assert_eq!(
            frame(&big, 10),
            Err(DecodeError::TooLarge {
                limit: 10,
                after: ""
            })
        );
        assert!(frame(&Bytes::from_static(&[0, 0]), 10).is_err());
    }
}
