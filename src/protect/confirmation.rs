//! What toolwatch derives from a span before redaction and keeps beside it: the digest a
//! confirmation should have bound, and the tool calls whose results come back in this span.
//!
//! Both are computed from values protect is about to remove, so they are computed first and
//! kept only in a form that reveals nothing new: the digest of the arguments (only when the
//! executor sent its own confirmation digest of the same arguments, which is already in the
//! record) and span ids. They travel as attributes under reserved names; a sender's own
//! attributes of those names are dropped, so an executor cannot vouch for itself.

use sha2::{Digest, Sha256};

use super::learned::{self, ResultOrigin};
use crate::event::{hex_id, AttrValue, Attributes, SpanClass, SpanRecord};

/// The digest toolwatch computed from what ran (`sha256:<hex>`), set when the span carries
/// `executor.confirmation_digest`.
pub const ARGUMENTS_DIGEST_KEY: &str = "toolwatch.arguments_digest";

/// The tool calls of the same request whose results taught a value found in this span's
/// arguments, URL or headers (span ids, hex, comma-separated).
pub const SECRET_FROM_KEY: &str = "toolwatch.secret_from_spans";

/// Attributes toolwatch sets itself.
const RESERVED: [&str; 2] = [ARGUMENTS_DIGEST_KEY, SECRET_FROM_KEY];

/// Attributes of a span that carry what it sends out: a downstream URL and request headers.
fn outbound_key(key: &str) -> bool {
    matches!(
        key,
        "url.full" | "url.original" | "url.path" | "url.query" | "http.url" | "http.target"
    ) || key.starts_with("http.request.header.")
}

/// The confirmation digest of a tool call: `sha256:` and the hex SHA-256 of the RFC 8785
/// (JCS) canonical JSON of `{"arguments", "resource_id", "resource_version", "tool"}`, absent
/// fields left out. Arguments that are not JSON count as a JSON string of their text.
pub fn confirmation_digest(
    tool: Option<&str>,
    arguments: Option<&str>,
    resource_id: Option<&str>,
    resource_version: Option<&str>,
) -> String {
    let mut doc = serde_json::Map::new();
    if let Some(a) = arguments {
        let value = serde_json::from_str::<serde_json::Value>(a)
            .unwrap_or_else(|_| serde_json::Value::String(a.to_string()));
        doc.insert("arguments".into(), value);
    }
    for (key, v) in [
        ("resource_id", resource_id),
        ("resource_version", resource_version),
        ("tool", tool),
    ] {
        if let Some(v) = v {
            doc.insert(key.into(), serde_json::Value::String(v.to_string()));
        }
    }
    // A map of strings and parsed JSON always serializes; an empty string would never match.
    let canonical =
        serde_json_canonicalizer::to_vec(&serde_json::Value::Object(doc)).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&canonical)))
}

/// What protect derives from one span before it redacts it.
#[derive(Debug, Default)]
pub struct Derived {
    arguments_digest: Option<String>,
    secret_from: Vec<crate::event::SpanId>,
    /// This span as a possible origin of learned values (a tool call with a result).
    pub origin: Option<ResultOrigin>,
}

impl Derived {
    /// Reads the span before redaction: drops reserved attributes the sender set, digests the
    /// arguments if a confirmation digest is there to check, and looks for values that earlier
    /// tool results of the request taught (the thread's learning scope must be set).
    pub fn before(span: &mut SpanRecord) -> Derived {
        span.attributes
            .0
            .retain(|(k, _)| !RESERVED.contains(&k.as_str()));
        let g = &span.gen_ai;
        let a = &span.audit;
        let arguments_digest = a.confirmation_digest.as_ref().map(|_| {
            confirmation_digest(
                g.tool_name.as_deref(),
                g.tool_arguments.as_deref(),
                a.resource_id.as_deref(),
                a.resource_version.as_deref(),
            )
        });
        let tool = span.class == SpanClass::Tool;
        let teaches = tool && g.tool_result.is_some();
        let looks = learned::origins_in_scope();
        if !teaches && !looks {
            return Derived {
                arguments_digest,
                ..Derived::default()
            };
        }
        let here = ResultOrigin {
            trace_id: span.trace_id,
            span_id: span.span_id,
            request: a.request_id.as_deref().map(learned::request_key),
        };
        let mut secret_from = Vec::new();
        if looks {
            if let (true, Some(args)) = (tool, &g.tool_arguments) {
                learned::result_origins_in(args, &here, &mut secret_from);
            }
            for (k, v) in &span.attributes.0 {
                if let (true, AttrValue::Str(text)) = (outbound_key(k), v) {
                    learned::result_origins_in(text, &here, &mut secret_from);
                }
            }
        }
        let origin = teaches.then_some(here);
        Derived {
            arguments_digest,
            secret_from,
            origin,
        }
    }

    /// Sets the derived attributes on the protected span.
    pub fn after(self, attributes: &mut Attributes) {
        if let Some(d) = self.arguments_digest {
            attributes
                .0
                .push((ARGUMENTS_DIGEST_KEY.into(), AttrValue::Str(d)));
        }
        if !self.secret_from.is_empty() {
            let ids: Vec<String> = self.secret_from.iter().map(|s| hex_id(s)).collect();
            attributes
                .0
                .push((SECRET_FROM_KEY.into(), AttrValue::Str(ids.join(","))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_of_the_canonical_document_with_absent_fields_left_out() {
        // Key order, whitespace and number spelling do not change it.
        let a = confirmation_digest(
            Some("create_order_note"),
            Some(r#"{"order_id": 1234, "note": "leave at door", "n": 1.0}"#),
            Some("order:1234"),
            Some("7"),
        );
        let b = confirmation_digest(
            Some("create_order_note"),
            Some(r#"{"n":1,"note":"leave at door","order_id":1234}"#),
            Some("order:1234"),
            Some("7"),
        );
        assert_eq!(a, b);
        // The canonical text, digested by hand.
        let text = r#"{"arguments":{"n":1,"note":"leave at door","order_id":1234},"resource_id":"order:1234","resource_version":"7","tool":"create_order_note"}"#;
        assert_eq!(
            a,
            format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
        );
        let no_resource = confirmation_digest(Some("t"), Some("not json"), None, None);
        let text = r#"{"arguments":"not json","tool":"t"}"#;
        assert_eq!(
            no_resource,
            format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
        );
        assert_ne!(
            a,
            confirmation_digest(
                Some("create_order_note"),
                Some(r#"{"order_id": 1234, "note": "leave at back", "n": 1}"#),
                Some("order:1234"),
                Some("7"),
            )
        );
    }

    #[test]
    fn utf16_key_order_and_escapes_follow_rfc_8785() {
        // RFC 8785 sorts keys by UTF-16 code units and writes non-ASCII as is.
        let d = confirmation_digest(
            Some("t"),
            Some(r#"{"é":"\u00e9","z":"\n","a":1e21}"#),
            None,
            None,
        );
        let text = "{\"arguments\":{\"a\":1e+21,\"z\":\"\\n\",\"é\":\"é\"},\"tool\":\"t\"}";
        assert_eq!(
            d,
            format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
        );
    }
}
