//! Protect: what must never be stored, forwarded or logged is removed here.
//!
//! Every event passes through [`Protector::protect`] after normalization and before any
//! other stage sees it. Today this stage replaces idempotency keys with a keyed HMAC
//! (`hmac:<key-id>:<hex>`), so equal keys stay joinable without being readable; the
//! configurable redaction rules are the next piece of this stage.

use std::io::Write;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use std::sync::Arc;

use crate::event::{AttrValue, Attributes, AuditFields, EventBatch, Resource};

/// The attribute that carries an idempotency key on the wire.
const IDEMPOTENCY_KEY: &str = "executor.idempotency_key";

/// Why the protection key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read or created.
    #[error("hash key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The key file does not hold 64 hex digits.
    #[error("hash key file {path} must hold 64 hex digits (a 32-byte key)")]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// HMAC-SHA256 under toolwatch's own key.
#[derive(Clone)]
pub struct KeyedHasher {
    key: Vec<u8>,
    key_id: String,
}

impl KeyedHasher {
    /// A hasher with the given key; the key id is derived from the key, so a rotated key is
    /// visible in every hash it produced.
    pub fn new(key: &[u8]) -> KeyedHasher {
        let digest = Sha256::digest(key);
        KeyedHasher {
            key: key.to_vec(),
            key_id: hex::encode(&digest[..4]),
        }
    }

    /// Loads the key from `path`, creating a random one (mode 0600) if the file is absent.
    pub fn load_or_create(path: &Path) -> Result<KeyedHasher, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let key = hex::decode(text.trim())
                    .ok()
                    .filter(|k| k.len() == 32)
                    .ok_or_else(|| KeyError::Malformed {
                        path: path.to_path_buf(),
                    })?;
                Ok(KeyedHasher::new(&key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(io)?;
                }
                let key: [u8; 32] = rand::random();
                let mut opts = std::fs::OpenOptions::new();
                opts.write(true).create_new(true);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    opts.mode(0o600);
                }
                let mut f = opts.open(path).map_err(io)?;
                f.write_all(hex::encode(key).as_bytes()).map_err(io)?;
                f.sync_all().map_err(io)?;
                Ok(KeyedHasher::new(&key))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// `hmac:<key-id>:<hex>` of `value`.
    pub fn hash(&self, value: &str) -> String {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(m) => m,
            // HMAC accepts keys of any length; this branch cannot be taken.
            Err(_) => return format!("hmac:{}:unavailable", self.key_id),
        };
        mac.update(value.as_bytes());
        format!(
            "hmac:{}:{}",
            self.key_id,
            hex::encode(mac.finalize().into_bytes())
        )
    }
}

/// The protect stage.
#[derive(Clone)]
pub struct Protector {
    hasher: KeyedHasher,
}

impl Protector {
    /// A protector hashing with `hasher`.
    pub fn new(hasher: KeyedHasher) -> Protector {
        Protector { hasher }
    }

    /// Protects a batch in place.
    pub fn protect(&self, batch: &mut EventBatch) {
        for span in &mut batch.spans {
            self.protect_audit(&mut span.audit);
            self.protect_attributes(&mut span.attributes);
            for e in &mut span.events {
                self.protect_attributes(&mut e.attributes);
            }
            for l in &mut span.links {
                self.protect_attributes(&mut l.attributes);
            }
            self.protect_resource(&mut span.resource);
        }
        for log in &mut batch.logs {
            self.protect_audit(&mut log.audit);
            self.protect_attributes(&mut log.attributes);
            self.protect_resource(&mut log.resource);
        }
    }

    fn protect_audit(&self, audit: &mut AuditFields) {
        if let Some(raw) = audit.idempotency_key.take() {
            audit.idempotency_key_hash = Some(self.hasher.hash(&raw));
        }
    }

    /// An idempotency key that did not land in the typed field (repeated, not text, or on
    /// an event, link or resource) is hashed where it stands.
    fn protect_attributes(&self, attrs: &mut Attributes) {
        for (key, value) in &mut attrs.0 {
            if key == IDEMPOTENCY_KEY {
                let raw = match &*value {
                    AttrValue::Str(s) => s.clone(),
                    other => serde_json::to_string(other).unwrap_or_default(),
                };
                *value = AttrValue::Str(self.hasher.hash(&raw));
            }
        }
    }

    fn protect_resource(&self, resource: &mut Arc<Resource>) {
        let exposed = resource
            .attributes
            .0
            .iter()
            .any(|(k, _)| k == IDEMPOTENCY_KEY);
        if exposed {
            // The resource is shared with other items: this item gets its own protected copy,
            // and each item is protected exactly once, so nothing is hashed twice.
            self.protect_attributes(&mut Arc::make_mut(resource).attributes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_keyed_stable_and_hides_the_value() {
        let a = KeyedHasher::new(b"k1");
        let b = KeyedHasher::new(b"k2");
        let h = a.hash("order-123");
        assert_eq!(h, a.hash("order-123"));
        assert_ne!(h, b.hash("order-123"));
        assert!(h.starts_with(&format!("hmac:{}:", a.key_id)));
        assert!(!h.contains("order-123"));
        assert_eq!(h.len(), "hmac:".len() + 8 + 1 + 64);
    }

    #[test]
    fn idempotency_keys_are_hashed_wherever_they_stand() {
        use crate::event::{SpanEventRecord, SpanRecord};
        let raw = |v: &str| {
            (
                "executor.idempotency_key".to_string(),
                AttrValue::Str(v.into()),
            )
        };
        let hasher = KeyedHasher::new(b"k");
        let resource = Arc::new(Resource {
            service_name: "s".into(),
            attributes: Attributes(vec![raw("idem-res")]),
        });
        let span = SpanRecord {
            tenant: "t".into(),
            resource: Arc::clone(&resource),
            scope: Arc::default(),
            trace_id: [1; 16],
            span_id: [1; 8],
            parent_span_id: None,
            trace_state: String::new(),
            name: "n".into(),
            kind: crate::event::SpanKind::Internal,
            class: crate::event::SpanClass::Tool,
            start_ns: 0,
            end_ns: 0,
            status_code: crate::event::StatusCode::Unset,
            status_message: String::new(),
            gen_ai: Default::default(),
            audit: AuditFields {
                idempotency_key: Some("idem-typed".into()),
                ..Default::default()
            },
            attributes: Attributes(vec![
                raw("idem-repeated"),
                ("executor.idempotency_key".into(), AttrValue::Int(42)),
            ]),
            events: vec![SpanEventRecord {
                time_ns: 0,
                name: "e".into(),
                attributes: Attributes(vec![raw("idem-event")]),
            }],
            links: vec![],
            dropped: Default::default(),
            redactions: Default::default(),
        };
        let mut batch = EventBatch {
            spans: vec![span.clone(), span],
            logs: vec![],
        };
        Protector::new(hasher.clone()).protect(&mut batch);
        let s = &batch.spans[1];
        assert_eq!(s.audit.idempotency_key, None);
        assert_eq!(
            s.audit.idempotency_key_hash,
            Some(hasher.hash("idem-typed"))
        );
        assert_eq!(
            s.attributes.0[0].1,
            AttrValue::Str(hasher.hash("idem-repeated"))
        );
        assert_eq!(s.attributes.0[1].1, AttrValue::Str(hasher.hash("42")));
        assert_eq!(
            s.events[0].attributes.0[0].1,
            AttrValue::Str(hasher.hash("idem-event"))
        );
        for s in &batch.spans {
            assert_eq!(
                s.resource.attributes.0[0].1,
                AttrValue::Str(hasher.hash("idem-res"))
            );
        }
    }

    #[test]
    fn key_file_is_created_once_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state/hash.key");
        let a = KeyedHasher::load_or_create(&path).expect("create");
        let b = KeyedHasher::load_or_create(&path).expect("load");
        assert_eq!(a.hash("x"), b.hash("x"));
        std::fs::write(&path, "zz").expect("write");
        assert!(matches!(
            KeyedHasher::load_or_create(&path),
            Err(KeyError::Malformed { .. })
        ));
    }
}
