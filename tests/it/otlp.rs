//! OTLP messages built for the tests: attributes and one-resource, one-scope span requests,
//! so each test writes only the spans it is about.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// An attribute with any value.
pub fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// A string attribute.
pub fn text(key: &str, value: &str) -> KeyValue {
    attribute(key, any_value::Value::StringValue(value.into()))
}

/// One export request: `spans` under one resource (with `resource` attributes; none gives no
/// resource at all) and one scope.
pub fn spans_request(resource: Vec<KeyValue>, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: (!resource.is_empty()).then(|| Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
