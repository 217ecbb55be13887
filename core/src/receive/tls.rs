//! TLS for the receivers and the admin port: rustls (ring), certificates reloaded on SIGHUP,
//! client certificates that name senders.
//!
//! The listener accepts TCP connections on its own task and runs each TLS handshake on a task
//! of its own (bounded by [`HANDSHAKE_TIMEOUT`]), so a slow or silent client never holds up the
//! next one. A connection's peer carries the names of the client certificate it presented
//! (subject alternative DNS and URI names, and the subject's common name), already verified
//! against `client_ca_file`; [`super::auth`] maps those names to senders.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_util::either::Either;

/// Longest a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections handshaken but not yet taken by the server.
const READY_CONNECTIONS: usize = 128;

/// `[receive.tls]` (and the certificate `[admin] tls = true` serves).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain (leaf first). Empty: plain TCP.
    pub cert_file: PathBuf,
    /// PEM private key of the leaf certificate (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM certificates of the CAs that sign client certificates. Set: clients may present a
    /// certificate, verified against these; one whose names match a sender's `client_names`
    /// authenticates as that sender.
    pub client_ca_file: PathBuf,
    /// Refuse the handshake of a client without a valid certificate.
    pub require_client_cert: bool,
}

impl TlsConfig {
    /// True when TLS is configured.
    pub fn enabled(&self) -> bool {
        !self.cert_file.as_os_str().is_empty()
    }
}

/// Why TLS cannot be set up; names the file, never its contents.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{key} {path}: {source}")]
    Read {
        /// The configuration key.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file holds no usable PEM item.
    #[error("{key} {path}: {what}")]
    Pem {
        /// The configuration key.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is missing or wrong.
        what: String,
    },
    /// Half a configuration.
    #[error("receive.tls: {0}")]
    Incomplete(&'static str),
    /// rustls refused the certificates or key.
    #[error("TLS configuration: {0}")]
    Rustls(String),
}

/// The admin port's TLS: the receivers' certificate, without client certificates (scrapers
/// and `query` present none).
pub fn admin_config(config: &TlsConfig) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    server_config(&TlsConfig {
        client_ca_file: PathBuf::new(),
        require_client_cert: false,
        ..config.clone()
    })
}

/// Builds the rustls server configuration `config` describes (`None` without TLS).
pub fn server_config(config: &TlsConfig) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    if !config.enabled() {
        if !config.key_file.as_os_str().is_empty() || !config.client_ca_file.as_os_str().is_empty()
        {
            return Err(TlsError::Incomplete(
                "key_file or client_ca_file without cert_file",
            ));
        }
        return Ok(None);
    }
    if config.key_file.as_os_str().is_empty() {
        return Err(TlsError::Incomplete("cert_file without key_file"));
    }
    if config.require_client_cert && config.client_ca_file.as_os_str().is_empty() {
        return Err(TlsError::Incomplete(
            "require_client_cert without client_ca_file",
        ));
    }
    let certs = read_certs("cert_file", &config.cert_file)?;
    let key = read_key(&config.key_file)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = if config.client_ca_file.as_os_str().is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        for ca in read_certs("client_ca_file", &config.client_ca_file)? {
            roots
                .add(ca)
                .map_err(|e| TlsError::Rustls(format!("client_ca_file: {e}")))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if config.require_client_cert {
            verifier
        } else {
            verifier.allow_unauthenticated()
        };
        builder.with_client_cert_verifier(
            verifier
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?,
        )
    };
    let mut server = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    // gRPC needs HTTP/2 negotiated; OTLP/HTTP clients and scrapers speak either.
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(server)))
}

fn read_certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        key,
        path: path.to_path_buf(),
        source,
    })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            key,
            path: path.to_path_buf(),
            what: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            key,
            path: path.to_path_buf(),
            what: "no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        key: "key_file",
        path: path.to_path_buf(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| TlsError::Pem {
        key: "key_file",
        path: path.to_path_buf(),
        what: "no PRIVATE KEY block (PKCS#8, RSA or EC)".into(),
    })
}

/// The TLS configuration in force; SIGHUP swaps in a new one for connections from then on.
#[derive(Debug)]
pub struct SharedTls(RwLock<Arc<ServerConfig>>);

impl SharedTls {
    /// Starts with `c`.
    pub fn new(c: Arc<ServerConfig>) -> SharedTls {
        SharedTls(RwLock::new(c))
    }

    /// The configuration now.
    pub fn current(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Puts `c` in force for new connections.
    pub fn replace(&self, c: Arc<ServerConfig>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = c;
    }
}

/// Who is at the other end of a connection.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The remote address.
    pub addr: SocketAddr,
    /// Names of the verified client certificate (SAN DNS and URI names, subject CN); empty
    /// without one.
    pub client_names: Arc<[String]>,
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, OtlpListener>>
    for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, OtlpListener>) -> Peer {
        stream.remote_addr().clone()
    }
}

/// A connection, plain TCP (left) or TLS over TCP (right).
pub type Connection = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// A listener for axum: plain TCP, or TLS with handshakes off the accept loop.
pub struct OtlpListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(Connection, Peer)>,
    /// The accept loop, stopped with the listener.
    accept: tokio::task::JoinHandle<()>,
}

/// Counts handshakes that failed (bad or missing client certificates, protocol errors,
/// timeouts).
pub type HandshakeFailed = Arc<dyn Fn(&'static str) + Send + Sync>;

impl OtlpListener {
    /// Serves `tcp`, with TLS from `tls` when given.
    pub fn new(
        tcp: TcpListener,
        tls: Option<Arc<SharedTls>>,
        failed: HandshakeFailed,
    ) -> io::Result<OtlpListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = mpsc::channel(READY_CONNECTIONS);
        let accept = tokio::spawn(accept_loop(tcp, tls, tx, failed));
        Ok(OtlpListener {
            local,
            ready,
            accept,
        })
    }
}

impl Drop for OtlpListener {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl axum::serve::Listener for OtlpListener {
    type Io = Connection;
    type Addr = Peer;

    async fn accept(&mut self) -> (Connection, Peer) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept task is gone only when the listener is being dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Peer> {
        Ok(Peer {
            addr: self.local,
            client_names: Arc::from(Vec::new()),
        })
    }
}

async fn accept_loop(
    tcp: TcpListener,
    tls: Option<Arc<SharedTls>>,
    tx: mpsc::Sender<(Connection, Peer)>,
    failed: HandshakeFailed,
) {
    loop {
        let (stream, addr) = tokio::select! {
            r = tcp.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: wait a little, as axum's own loop does.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = tx.closed() => return,
        };
        let _ = stream.set_nodelay(true);
        let no_names: Arc<[String]> = Arc::from(Vec::new());
        let Some(tls) = &tls else {
            let peer = Peer {
                addr,
                client_names: no_names,
            };
            if tx.send((Either::Left(stream), peer)).await.is_err() {
                return;
            }
            continue;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
        let (tx, failed) = (tx.clone(), Arc::clone(&failed));
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => {
                    let names = s
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(client_names)
                        .unwrap_or_default();
                    let peer = Peer {
                        addr,
                        client_names: Arc::from(names),
                    };
                    let _ = tx.send((Either::Right(Box::new(s)), peer)).await;
                }
                Ok(Err(e)) => {
                    tracing::debug!(peer = %addr, error = %e, "TLS handshake failed");
                    failed(handshake_reason(&e));
                }
                Err(_) => failed("timeout"),
            }
        });
    }
}

/// A failed handshake's reason, for the counter.
fn handshake_reason(e: &io::Error) -> &'static str {
    let text = e.to_string();
    if text.contains("CertificateRequired") || text.contains("peer sent no certificates") {
        "no_client_certificate"
    } else if text.contains("certificate") || text.contains("Certificate") {
        "bad_certificate"
    } else {
        "protocol"
    }
}

/// The names a client certificate gives: SAN DNS and URI names, or the subject's CN when it
/// has none.
pub fn client_names(der: &CertificateDer<'_>) -> Vec<String> {
    let Ok(cert) = webpki::EndEntityCert::try_from(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert.valid_dns_names().map(str::to_string).collect();
    names.extend(cert.valid_uri_names().map(str::to_string));
    // The CN counts only without SAN names, as TLS name checks treat it (RFC 6125).
    if names.is_empty() {
        if let Some(cn) = common_name(cert.subject()) {
            names.push(cn);
        }
    }
    names
}

/// One DER item: its tag, its content, and what follows it.
fn der_item(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = match len {
        n if n < 0x80 => (usize::from(n), rest),
        0x81 => (usize::from(*rest.first()?), rest.get(1..)?),
        0x82 => (
            usize::from(*rest.first()?) << 8 | usize::from(*rest.get(1)?),
            rest.get(2..)?,
        ),
        _ => return None,
    };
    Some((tag, rest.get(..len)?, rest.get(len..)?))
}

/// The first common name (OID 2.5.4.3) of a DER subject (the content of its SEQUENCE: SETs of
/// attribute SEQUENCEs), as UTF8String, PrintableString or IA5String. Each attribute is read
/// as the structure it is, so bytes inside another attribute's value are never taken for one.
fn common_name(subject: &[u8]) -> Option<String> {
    const SET: u8 = 0x31;
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let mut sets = subject;
    while !sets.is_empty() {
        let (tag, set, next) = der_item(sets)?;
        sets = next;
        if tag != SET {
            return None;
        }
        let mut attributes = set;
        while !attributes.is_empty() {
            let (tag, attribute, next) = der_item(attributes)?;
            attributes = next;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = der_item(attribute)?;
            if tag == OID && oid == CN {
                let (tag, text, _) = der_item(value)?;
                return matches!(tag, 0x0c | 0x13 | 0x16)
                    .then(|| std::str::from_utf8(text).ok().map(str::to_string))
                    .flatten();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_common_name_is_read_from_a_der_subject() {
        // SEQUENCE { SET { SEQUENCE { OID 2.5.4.10, "Acme" } }, SET { SEQUENCE { OID 2.5.4.3, "executor-eu" } } }
        let mut subject = vec![
            0x31, 0x0d, 0x30, 0x0b, 0x06, 0x03, 0x55, 0x04, 0x0a, 0x0c, 0x04,
        ];
        subject.extend(b"Acme");
        subject.extend([
            0x31, 0x14, 0x30, 0x12, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x0b,
        ]);
        subject.extend(b"executor-eu");
        assert_eq!(common_name(&subject).as_deref(), Some("executor-eu"));
        assert_eq!(
            common_name(&subject[..subject.len() - 3]),
            None,
            "cut short"
        );
        assert_eq!(common_name(&subject[..11]), None, "no CN");
        let mut bmp = subject.clone();
        let tag = bmp.len() - 13;
        bmp[tag] = 0x1e;
        assert_eq!(common_name(&bmp), None, "BMPString is not read");

        // An O value that holds the bytes of a CN attribute is a value, not a CN.
        let mut inner = vec![0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x07];
        inner.extend(b"gateway");
        let mut forged = vec![0x31, (inner.len() + 9) as u8, 0x30, (inner.len() + 7) as u8];
        forged.extend([0x06, 0x03, 0x55, 0x04, 0x0a, 0x0c, inner.len() as u8]);
        forged.extend(&inner);
        assert_eq!(common_name(&forged), None, "no CN attribute at all");
        forged.extend([
            0x31, 0x14, 0x30, 0x12, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x0b,
        ]);
        forged.extend(b"executor-eu");
        assert_eq!(common_name(&forged).as_deref(), Some("executor-eu"));
    }

    #[test]
    fn half_a_configuration_is_refused_and_files_are_named() {
        let c = TlsConfig {
            key_file: "k.pem".into(),
            ..TlsConfig::default()
        };
        assert!(matches!(server_config(&c), Err(TlsError::Incomplete(_))));
        let c = TlsConfig {
            cert_file: "/nonexistent/cert.pem".into(),
            key_file: "/nonexistent/key.pem".into(),
            ..TlsConfig::default()
        };
        let e = server_config(&c).expect_err("no file");
        assert!(
            e.to_string().contains("cert_file /nonexistent/cert.pem"),
            "{e}"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").expect("write");
        let c = TlsConfig {
            cert_file: junk.clone(),
            key_file: junk,
            ..TlsConfig::default()
        };
        let e = server_config(&c).expect_err("junk");
        assert!(e.to_string().contains("no CERTIFICATE block"), "{e}");
        assert!(matches!(server_config(&TlsConfig::default()), Ok(None)));
    }
}
