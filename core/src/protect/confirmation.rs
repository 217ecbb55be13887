//! What toolwatch derives from a span before redaction and keeps beside it: whether the
//! executor's confirmation digest is the digest of what ran, and the secret trail (keyed
//! fingerprints of credentials a tool returned and of those a span sends out, see
//! [`super::trail`]).
//!
//! The digest is computed from the arguments before protect removes anything, and only its
//! verdict is kept (a digest of arguments that held a short secret would let a reader of the
//! archive test guesses for it). Both travel as attributes under reserved names; a sender's
//! own attributes of those names are dropped, so an executor cannot vouch for itself.

use sha2::{Digest, Sha256};

use super::trail::{self, Side};
use crate::event::{AttrValue, Attributes, SpanRecord};

/// Whether the span's `executor.confirmation_digest` is the digest of what ran (a bool), set
/// when the span carries one and its arguments can be digested.
pub const DIGEST_MATCHES_KEY: &str = "toolwatch.confirmation_digest_matches";

/// Fingerprints of credentials removed from the span's tool result.
pub const RETURNED_KEY: &str = "toolwatch.secrets_returned";

/// Fingerprints of credentials removed from what the span sends out.
pub const SENT_KEY: &str = "toolwatch.secrets_sent";

/// Attributes toolwatch sets itself.
const RESERVED: [&str; 3] = [DIGEST_MATCHES_KEY, RETURNED_KEY, SENT_KEY];

/// The mark protect leaves where it removed a value: arguments that carry one were redacted
/// upstream (by another toolwatch) and cannot be digested as the executor sent them.
const REDACTED_MARK: &str = "[REDACTED:";

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

/// What protect derives from one span around its redaction.
#[derive(Debug, Default)]
pub struct Derived {
    digest_matches: Option<bool>,
    returned: Vec<u64>,
    sent: Vec<u64>,
}

impl Derived {
    /// Reads the span before redaction: drops reserved attributes the sender set and checks
    /// the confirmation digest.
    pub fn before(span: &mut SpanRecord) -> Derived {
        span.attributes
            .0
            .retain(|(k, _)| !RESERVED.contains(&k.as_str()));
        let g = &span.gen_ai;
        let a = &span.audit;
        let digest_matches = a
            .confirmation_digest
            .as_deref()
            .filter(|_| {
                !g.tool_arguments
                    .as_deref()
                    .is_some_and(|t| t.contains(REDACTED_MARK))
            })
            .map(|sent| {
                let computed = confirmation_digest(
                    g.tool_name.as_deref(),
                    g.tool_arguments.as_deref(),
                    a.resource_id.as_deref(),
                    a.resource_version.as_deref(),
                );
                sent.trim().eq_ignore_ascii_case(&computed)
            });
        Derived {
            digest_matches,
            returned: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// Adds what protecting the tool call's arguments (sent) or result (returned) collected.
    pub fn add(&mut self, side: Side, fps: Vec<u64>) {
        match side {
            Side::Sent | Side::SentInAttributes => self.sent.extend(fps),
            Side::Returned => self.returned.extend(fps),
        }
    }

    /// Sets the derived attributes on the protected span.
    pub fn after(mut self, attributes: &mut Attributes) {
        if let Some(m) = self.digest_matches {
            attributes
                .0
                .push((DIGEST_MATCHES_KEY.into(), AttrValue::Bool(m)));
        }
        for (key, fps) in [
            (RETURNED_KEY, &mut self.returned),
            (SENT_KEY, &mut self.sent),
        ] {
            fps.sort_unstable();
            fps.dedup();
            if !fps.is_empty() {
                attributes
                    .0
                    .push((key.into(), AttrValue::Str(trail::to_text(fps))));
            }
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
