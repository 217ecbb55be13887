//! The `[export]` section: the downstream OTLP endpoints the protected stream is forwarded to.
//!
//! No endpoint by default. Each endpoint names itself (the name is its metric label and the
//! only thing logs say about it: URLs and header values often hold credentials).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::{HumanDuration, PositiveUsize};

/// The `[export]` section.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// Where the protected stream goes (none by default).
    pub endpoints: Vec<EndpointConfig>,
}

/// OTLP transport to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// OTLP/gRPC: `url` is the server.
    Grpc,
    /// OTLP/HTTP with protobuf bodies: `/v1/traces` and `/v1/logs` are appended to `url`.
    Http,
}

/// Compression of request bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// gzip (HTTP `Content-Encoding: gzip`; gRPC `grpc-encoding: gzip`).
    Gzip,
    /// Uncompressed.
    None,
}

/// One downstream OTLP endpoint and its retry policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Names the endpoint in metrics and logs: `[a-z0-9_-]`, 1 to 32 characters.
    pub name: String,
    /// `http(s)://host:port`: for gRPC the server; for HTTP the base URL below which
    /// `/v1/traces` and `/v1/logs` are posted. `https://` uses TLS.
    pub url: String,
    /// `grpc` or `http` (OTLP/HTTP protobuf).
    pub protocol: Protocol,
    /// Extra request headers or gRPC metadata (e.g. `authorization`); never logged or printed.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Time allowed for one attempt.
    #[serde(default = "default_timeout")]
    pub timeout: HumanDuration,
    /// Spans or log records per request; larger requests are split.
    #[serde(default = "default_batch")]
    pub max_batch_items: PositiveUsize,
    /// First retry delay; doubles per retry up to `max_backoff`.
    #[serde(default = "default_initial_backoff")]
    pub initial_backoff: HumanDuration,
    /// Longest delay between attempts (a server's `Retry-After` or RetryInfo is honoured up
    /// to this).
    #[serde(default = "default_max_backoff")]
    pub max_backoff: HumanDuration,
    /// PEM file of extra CA certificates trusted for this `https://` endpoint (besides the
    /// built-in web roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// `gzip` or `none`.
    #[serde(default = "default_compression")]
    pub compression: Compression,
}

fn default_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}
fn default_batch() -> PositiveUsize {
    PositiveUsize(1000)
}
fn default_initial_backoff() -> HumanDuration {
    HumanDuration(Duration::from_millis(500))
}
fn default_max_backoff() -> HumanDuration {
    HumanDuration(Duration::from_secs(30))
}
fn default_compression() -> Compression {
    Compression::Gzip
}

/// Headers the clients set themselves; configuring them would break the protocol.
const RESERVED_HEADERS: [&str; 7] = [
    "content-type",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "host",
    "te",
    "user-agent",
];

/// An export configuration that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExportConfigError {
    /// An endpoint cannot work; `key` is e.g. `export.endpoints[0].url`.
    #[error("{key}: {message}")]
    Endpoint {
        /// The offending key, with the endpoint's position.
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl ExportConfig {
    /// Checks what serde cannot: names, URLs, headers, backoff bounds, CA files.
    pub fn validate(&self) -> Result<(), ExportConfigError> {
        let mut names = HashSet::new();
        for (index, e) in self.endpoints.iter().enumerate() {
            let fail = |field: &str, message: String| ExportConfigError::Endpoint {
                key: format!("export.endpoints[{index}].{field}"),
                message,
            };
            if !valid_name(&e.name) {
                return Err(fail(
                    "name",
                    "must be 1 to 32 of a-z, 0-9, '_' or '-'".into(),
                ));
            }
            if !names.insert(e.name.as_str()) {
                return Err(fail(
                    "name",
                    format!("`{}` is the name of an earlier endpoint", e.name),
                ));
            }
            e.base_url().map_err(|m| fail("url", m))?;
            for (k, v) in &e.headers {
                header_pair(k, v, e.protocol).map_err(|m| fail("headers", m))?;
            }
            const HOUR: Duration = Duration::from_secs(3600);
            if e.max_backoff.0 > HOUR || e.initial_backoff.0 > e.max_backoff.0 {
                return Err(fail(
                    "max_backoff",
                    "backoff must satisfy initial_backoff <= max_backoff <= 1h".into(),
                ));
            }
            if e.timeout.0 > HOUR {
                return Err(fail("timeout", "must be at most 1h".into()));
            }
            if let Some(path) = &e.ca_file {
                if !e.url.starts_with("https://") {
                    return Err(fail("ca_file", "needs an https:// url".into()));
                }
                read_ca_file(path).map_err(|m| fail("ca_file", m))?;
            }
        }
        Ok(())
    }
}

fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Checks one configured header: a valid HTTP (and for gRPC, ASCII metadata) name and value,
/// not one the client sets itself. The value is never quoted: it is usually a credential.
pub(crate) fn header_pair(
    name: &str,
    value: &str,
    protocol: Protocol,
) -> Result<(http::HeaderName, http::HeaderValue), String> {
    let key = http::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a valid header name"))?;
    let value = http::HeaderValue::from_str(value)
        .map_err(|_| format!("the value of `{name}` is not a valid header value"))?;
    if RESERVED_HEADERS.contains(&key.as_str()) || key.as_str().starts_with("grpc-") {
        return Err(format!(
            "`{name}` is set by toolwatch and cannot be configured"
        ));
    }
    if protocol == Protocol::Grpc && key.as_str().ends_with("-bin") {
        return Err(format!(
            "`{name}` is binary gRPC metadata; only text headers can be configured"
        ));
    }
    Ok((key, value))
}

/// Reads a PEM bundle of CA certificates; an error says why without quoting the file.
pub(crate) fn read_ca_file(path: &Path) -> Result<Vec<u8>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(pem),
        Ok(_) => Err(format!("{} holds no PEM certificate", path.display())),
        Err(_) => Err(format!(
            "{} is not a PEM certificate bundle",
            path.display()
        )),
    }
}

impl EndpointConfig {
    /// The parsed URL: `http` or `https`, a host, no fragment; for gRPC also no path, query or
    /// user name (put credentials in `headers`).
    pub fn base_url(&self) -> Result<reqwest::Url, String> {
        // The parser's message never quotes the URL, which may hold a token.
        let url = reqwest::Url::parse(&self.url).map_err(|e| format!("does not parse: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "scheme `{}` is not supported; use http:// or https://",
                url.scheme()
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err("names no host".into());
        }
        if url.fragment().is_some() {
            return Err("must not have a #fragment".into());
        }
        if self.protocol == Protocol::Grpc {
            if url.path() != "/" || url.query().is_some() {
                return Err(
                    "a gRPC url is the server only (http(s)://host:port), without path or query"
                        .into(),
                );
            }
            if !url.username().is_empty() || url.password().is_some() {
                return Err("a gRPC url cannot carry credentials; use headers".into());
            }
        }
        Ok(url)
    }

    /// OTLP/HTTP: the URL a signal is posted to, `<url>/v1/traces` or `<url>/v1/logs` (the
    /// base's query is kept).
    pub fn signal_url(&self, path: &str) -> Result<reqwest::Url, String> {
        let mut url = self.base_url()?;
        let joined = format!("{}/{}", url.path().trim_end_matches('/'), path);
        url.set_path(&joined);
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `[export]` section of a configuration file holding `text` (the section's keys
    /// without the `export.` prefix, so line numbers are the file's).
    fn section(text: &str) -> Result<ExportConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    fn endpoint(name: &str, url: &str, protocol: Protocol) -> EndpointConfig {
        let text = format!(
            "[[endpoints]]\nname = \"{name}\"\nurl = \"{url}\"\nprotocol = \"{}\"\n",
            if protocol == Protocol::Grpc {
                "grpc"
            } else {
                "http"
            }
        );
        section(&text).expect("parses").endpoints[0].clone()
    }

    fn check(endpoints: Vec<EndpointConfig>) -> Result<(), String> {
        ExportConfig { endpoints }
            .validate()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_apply_and_validate() {
        let e = endpoint("collector", "http://127.0.0.1:4318", Protocol::Http);
        assert_eq!(e.timeout, HumanDuration(Duration::from_secs(10)));
        assert_eq!(e.max_batch_items, PositiveUsize(1000));
        assert_eq!(e.initial_backoff, HumanDuration(Duration::from_millis(500)));
        assert_eq!(e.max_backoff, HumanDuration(Duration::from_secs(30)));
        assert_eq!(e.compression, Compression::Gzip);
        assert!(e.headers.is_empty() && e.ca_file.is_none());
        assert_eq!(check(vec![e.clone()]), Ok(()));
        assert_eq!(
            e.signal_url("v1/traces").map(|u| u.to_string()),
            Ok("http://127.0.0.1:4318/v1/traces".to_string())
        );
        let mut prefixed = e;
        prefixed.url = "https://otel.example:443/otlp/?k=v".into();
        assert_eq!(
            prefixed.signal_url("v1/logs").map(|u| u.to_string()),
            Ok("https://otel.example/otlp/v1/logs?k=v".to_string())
        );
        assert!(ExportConfig::default().endpoints.is_empty());
    }

    #[test]
    fn bad_urls_are_named() {
        let e = |url: &str, p| check(vec![endpoint("a", url, p)]);
        assert_eq!(
            e("not a url", Protocol::Http),
            Err("export.endpoints[0].url: does not parse: relative URL without a base".into())
        );
        assert_eq!(
            e("ftp://h:21", Protocol::Http),
            Err(
                "export.endpoints[0].url: scheme `ftp` is not supported; use http:// or https://"
                    .into()
            )
        );
        assert_eq!(
            e("http://h:4317/v1/traces", Protocol::Grpc),
            Err("export.endpoints[0].url: a gRPC url is the server only (http(s)://host:port), without path or query".into())
        );
        assert_eq!(
            e("http://u:p@h:4317", Protocol::Grpc),
            Err("export.endpoints[0].url: a gRPC url cannot carry credentials; use headers".into())
        );
    }

    #[test]
    fn bad_protocol_is_named_with_its_line() {
        let err =
            section("[[endpoints]]\nname = \"a\"\nurl = \"http://h:1\"\nprotocol = \"thrift\"\n")
                .expect_err("bad protocol");
        assert!(err.contains("line 4"), "{err}");
        assert!(
            err.contains("unknown variant `thrift`, expected `grpc` or `http`"),
            "{err}"
        );
    }

    #[test]
    fn names_must_be_labels_and_unique() {
        let a = endpoint("a", "http://h:1", Protocol::Http);
        assert_eq!(
            check(vec![a.clone(), a.clone()]),
            Err("export.endpoints[1].name: `a` is the name of an earlier endpoint".into())
        );
        let mut upper = a;
        upper.name = "Collector".into();
        assert_eq!(
            check(vec![upper]),
            Err("export.endpoints[0].name: must be 1 to 32 of a-z, 0-9, '_' or '-'".into())
        );
    }

    #[test]
    fn bad_headers_are_named_without_their_values() {
        let mut e = endpoint("a", "http://h:1", Protocol::Http);
        e.headers
            .insert("authorization".into(), "Bearer s3cret\n".into());
        let err = check(vec![e.clone()]);
        assert_eq!(
            err,
            Err("export.endpoints[0].headers: the value of `authorization` is not a valid header value".into())
        );
        e.headers.clear();
        e.headers.insert("bad header".into(), "v".into());
        assert_eq!(
            check(vec![e.clone()]),
            Err("export.endpoints[0].headers: `bad header` is not a valid header name".into())
        );
        e.headers.clear();
        e.headers.insert("Content-Type".into(), "text/plain".into());
        assert_eq!(
            check(vec![e]),
            Err("export.endpoints[0].headers: `Content-Type` is set by toolwatch and cannot be configured".into())
        );
    }

    #[test]
    fn backoff_and_ca_file_are_checked() {
        let mut e = endpoint("a", "http://h:1", Protocol::Http);
        e.initial_backoff = HumanDuration(Duration::from_secs(60));
        assert_eq!(
            check(vec![e.clone()]),
            Err("export.endpoints[0].max_backoff: backoff must satisfy initial_backoff <= max_backoff <= 1h".into())
        );
        e.initial_backoff = HumanDuration(Duration::from_secs(1));
        e.ca_file = Some(PathBuf::from("/nonexistent/ca.pem"));
        assert_eq!(
            check(vec![e.clone()]),
            Err("export.endpoints[0].ca_file: needs an https:// url".into())
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").expect("write");
        e.url = "https://h:1".into();
        e.ca_file = Some(path.clone());
        assert_eq!(
            check(vec![e]),
            Err(format!(
                "export.endpoints[0].ca_file: {} holds no PEM certificate",
                path.display()
            ))
        );
    }
}
