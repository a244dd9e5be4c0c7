//! The gateway's server certificate, and the trust a client gives it.
//!
//! Clients authenticate the server only (players prove who they are with their token); the
//! server certificate is the application's own (a public CA's, or one its clients ship with).
//! Only the ring provider is used, passed in explicitly, as on the mesh.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::wire::ALPN;

/// Why a certificate, key or trust anchor could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SessionTlsError {
    /// A PEM input did not hold what it should.
    #[error("{what} is not usable PEM ({detail}); pass a PEM certificate chain and a PKCS#8 key")]
    Pem {
        /// Which input.
        what: &'static str,
        /// What the parser said.
        detail: String,
    },
    /// A file could not be read.
    #[error("could not read {path}: {source}; check the path in the session settings")]
    Read {
        /// The certificate or key file the session settings name.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// rcgen could not make a certificate.
    #[error("could not generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificate or settings.
    #[error("rustls refused the TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    /// The config lacks a cipher suite QUIC can start with.
    #[error("the TLS config cannot be used for QUIC: {0}")]
    Quic(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(what: &'static str, pem: &str) -> Result<Vec<CertificateDer<'static>>, SessionTlsError> {
    let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SessionTlsError::Pem {
            what,
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(SessionTlsError::Pem {
            what,
            detail: "no certificate in it".to_owned(),
        });
    }
    Ok(chain)
}

fn read(path: &Path) -> Result<String, SessionTlsError> {
    std::fs::read_to_string(path).map_err(|source| SessionTlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The certificate chain and key a gateway presents to game clients.
pub struct SessionTls {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for SessionTls {
    fn clone(&self) -> Self {
        SessionTls {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl fmt::Debug for SessionTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionTls")
            .field("chain", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl SessionTls {
    /// A certificate chain (leaf first) and its private key, as PEM text.
    pub fn from_pem(chain_pem: &str, key_pem: &str) -> Result<Self, SessionTlsError> {
        let chain = certs("server certificate chain", chain_pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| {
            SessionTlsError::Pem {
                what: "server key",
                detail: e.to_string(),
            }
        })?;
        let tls = SessionTls { chain, key };
        // Refuse a key that does not match now, not at the first client.
        tls.server_config()?;
        Ok(tls)
    }

    /// Reads the chain and key from PEM files.
    pub fn load(chain: &Path, key: &Path) -> Result<Self, SessionTlsError> {
        Self::from_pem(&read(chain)?, &read(key)?)
    }

    /// A fresh self-signed certificate for these DNS names, for demos and tests; returns it with
    /// its PEM, which clients then trust as their CA.
    pub fn self_signed(names: &[&str]) -> Result<(Self, String), SessionTlsError> {
        let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let cert = rcgen::generate_simple_self_signed(names)?;
        let pem = cert.cert.pem();
        let tls = Self::from_pem(&pem, &cert.signing_key.serialize_pem())?;
        Ok((tls, pem))
    }

    /// The listener's TLS: TLS 1.3, this certificate, no client certificate, the client ALPN.
    pub(crate) fn server_config(&self) -> Result<rustls::ServerConfig, SessionTlsError> {
        self.server_config_for(ALPN)
    }

    /// The WebSocket listener's TLS: the same, speaking HTTP/1.1 for the upgrade.
    #[cfg(feature = "websocket")]
    pub(crate) fn websocket_server_config(&self) -> Result<rustls::ServerConfig, SessionTlsError> {
        self.server_config_for(b"http/1.1")
    }

    fn server_config_for(&self, alpn: &[u8]) -> Result<rustls::ServerConfig, SessionTlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(config)
    }

    pub(crate) fn quic_server_config(&self) -> Result<QuicServerConfig, SessionTlsError> {
        Ok(QuicServerConfig::try_from(self.server_config()?)?)
    }
}

/// The QUIC client config of a game client: trust only the CA certificates in `ca_pem` (or the
/// gateway's self-signed certificate), speak the client ALPN. For clients that speak the wire
/// protocol themselves; [`crate::client::Client`] builds it for you.
pub fn client_quic_config(ca_pem: &str) -> Result<quinn::ClientConfig, SessionTlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs("trusted CA certificate", ca_pem)? {
        roots.add(cert)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(Arc::new(roots))
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(quinn::ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(config)?,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_makes_both_configs_and_bad_pem_is_refused() {
        let (tls, pem) = SessionTls::self_signed(&["localhost"]).unwrap();
        assert!(tls.quic_server_config().is_ok());
        assert!(client_quic_config(&pem).is_ok());
        assert!(matches!(
            client_quic_config("not pem"),
            Err(SessionTlsError::Pem { .. })
        ));
        let (_, other_pem) = SessionTls::self_signed(&["localhost"]).unwrap();
        let other_key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        assert!(SessionTls::from_pem(&other_pem, &other_key).is_err());
    }
}
