//! The cluster CA, node certificates, and the rustls configs built from them.
//!
//! Every node certificate carries one dNSName that encodes its node id (see
//! [`node_server_name`]). A node dialling X asks for X's name, so ordinary webpki
//! server verification proves it reached X; the acceptor verifies the client chain
//! against the CA and then checks the node id the dialler claims against the same
//! name in its certificate. Only the ring provider is used, passed in explicitly, so
//! no process-wide provider has to be installed.
//!
//! A node's certificate also serves HTTPS (a host's admin endpoint): [`NodeTls::https_server_config`]
//! presents it, and [`https_client_config`] is the client that trusts the cluster CA for it.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::ids::NodeId;

/// The ALPN protocol of the mesh; a peer speaking anything else fails the handshake.
pub const ALPN: &[u8] = b"ferry-mesh/1";

/// The DNS zone every node name lives under; the CA may only sign names inside it.
pub const NODE_ZONE: &str = "node.ferry";

/// Node ids up to this many bytes are written as plain hex in their DNS name.
const HEX_MAX_BYTES: usize = 90;
/// Hex characters per DNS label (labels may be at most 63).
const HEX_LABEL: usize = 60;
/// The subject common name is limited to 64 characters by X.509.
const MAX_COMMON_NAME: usize = 64;

/// Why certificates could not be made, read, or turned into a TLS config.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused to generate a key or sign a certificate.
    #[error("could not generate or sign a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM input did not hold what it should.
    #[error("{what} is not usable PEM ({detail}); pass the files written by `ferry certs`")]
    Pem {
        /// Which input was being read ("CA certificate", "node key", ...).
        what: &'static str,
        /// What the parser said.
        detail: String,
    },
    /// A certificate or key file could not be read.
    #[error("could not read {path}: {source}; create it with `ferry certs --out DIR --nodes ...`")]
    Read {
        /// The certificate or key file that could not be read.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A certificate or key file could not be written.
    #[error("could not write {path}: {source}; check that the directory exists and is writable")]
    Write {
        /// The certificate or key file that could not be written.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The CA certificate and key do not belong together, or were not made by Ferry.
    #[error(
        "the CA certificate and key do not work together ({0}); pass the ca.pem and ca.key \
         written together by `ferry certs`"
    )]
    CaMismatch(String),
    /// A certificate does not prove the node id it is used for.
    #[error(
        "the certificate does not name node {node} ({detail}); issue one for this node with \
         `ferry certs --nodes {node}`"
    )]
    WrongNode {
        /// The node the certificate was meant for.
        node: NodeId,
        /// What the check found.
        detail: String,
    },
    /// rustls refused the certificates or settings.
    #[error("rustls refused the TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client verifier could not be built from the CA certificate.
    #[error("could not build the peer verifier from the CA certificate: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// The TLS config lacks a cipher suite QUIC can start with.
    #[error("the TLS config cannot be used for QUIC: {0}")]
    Quic(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
}

/// The only crypto provider the mesh uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The ALPN protocol of a node's HTTPS endpoints.
const HTTP1: &[u8] = b"http/1.1";

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The DNS name, as text, that a node's certificate carries.
///
/// Ids of up to 90 bytes are written as lowercase hex of their UTF-8 bytes (split in
/// labels of 60), so any UTF-8 id maps to a valid name and two ids never share one:
/// `61.node.ferry` is node "a". Longer ids would not fit the 253-character DNS limit,
/// so they use the SHA-256 of their bytes under `sha256.node.ferry`; "sha256" is not
/// hex, so the two forms cannot collide.
pub fn node_dns_name(node: &NodeId) -> String {
    let bytes = node.as_str().as_bytes();
    let (digits, zone) = if bytes.len() <= HEX_MAX_BYTES {
        (hex(bytes), NODE_ZONE.to_owned())
    } else {
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
        (hex(digest.as_ref()), format!("sha256.{NODE_ZONE}"))
    };
    let mut name = String::with_capacity(digits.len() + zone.len() + 8);
    let mut rest = digits.as_str();
    while !rest.is_empty() {
        let (label, tail) = rest.split_at(rest.len().min(HEX_LABEL));
        name.push_str(label);
        name.push('.');
        rest = tail;
    }
    name.push_str(&zone);
    name
}

/// The name a dialler asks for to reach `node`, in the form rustls and webpki take.
pub fn node_server_name(node: &NodeId) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(node_dns_name(node)).map_err(|e| TlsError::WrongNode {
        node: node.clone(),
        detail: format!("its DNS name is invalid: {e}"),
    })
}

/// A file-name stem for `node`'s files that is safe on any file system.
///
/// Ids made only of ASCII letters, digits, `-` and `_` give `node-<id>`; any other id
/// gives `node-hex.<hex of its bytes>` (or the SHA-256 form for long ids). The dot keeps
/// the forms apart, since a plain id never contains one, and the prefix keeps a node
/// called "ca" away from the CA's own files.
pub fn node_file_stem(node: &NodeId) -> String {
    let text = node.as_str();
    let plain = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain && text.len() <= 200 {
        format!("node-{text}")
    } else if text.len() <= HEX_MAX_BYTES {
        format!("node-hex.{}", hex(text.as_bytes()))
    } else {
        let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
        format!("node-sha256.{}", hex(digest.as_ref()))
    }
}

/// Checks that `cert` (already verified against the CA) is the certificate of `node`.
pub(crate) fn check_cert_names_node(
    cert: &CertificateDer<'_>,
    node: &NodeId,
) -> Result<(), TlsError> {
    let wrong = |detail: String| TlsError::WrongNode {
        node: node.clone(),
        detail,
    };
    let name = node_server_name(node)?;
    let end_entity = webpki::EndEntityCert::try_from(cert)
        .map_err(|e| wrong(format!("the certificate cannot be parsed: {e}")))?;
    end_entity
        .verify_is_valid_for_subject_name(&name)
        .map_err(|e| wrong(format!("it is not valid for {}: {e}", node_dns_name(node))))
}

/// Checks that `cert` chains to `ca` and names `node`, as a dialler would.
fn verify_issued(
    ca: &CertificateDer<'static>,
    cert: &CertificateDer<'_>,
    node: &NodeId,
) -> Result<(), TlsError> {
    let mut roots = RootCertStore::empty();
    roots
        .add(ca.clone())
        .map_err(|e| TlsError::CaMismatch(e.to_string()))?;
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| TlsError::CaMismatch(e.to_string()))?;
    verifier
        .verify_server_cert(cert, &[], &node_server_name(node)?, &[], UnixTime::now())
        .map(|_| ())
        .map_err(|e| TlsError::CaMismatch(e.to_string()))
}

fn parse_cert(what: &'static str, pem: &str) -> Result<CertificateDer<'static>, TlsError> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
        what,
        detail: e.to_string(),
    })
}

fn parse_key(what: &'static str, pem: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| TlsError::Pem {
        what,
        detail: e.to_string(),
    })
}

fn read_text(path: &Path) -> Result<String, TlsError> {
    fs::read_to_string(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Writes PEM `text` to `path`; a private key is made readable by its owner only.
pub fn write_pem(path: &Path, text: &str, private: bool) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.to_owned(),
        source,
    };
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path).map_err(err)?;
    io::Write::write_all(&mut file, text.as_bytes()).map_err(err)
}

/// The CN and key usages of every Ferry CA; [`ClusterCa::from_pem`] relies on them.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Ferry");
    dn.push(DnType::CommonName, "Ferry cluster CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    // Even a leaked CA key can then only mint names inside the node zone.
    params.name_constraints = Some(NameConstraints {
        permitted_subtrees: vec![GeneralSubtree::DnsName(NODE_ZONE.to_owned())],
        excluded_subtrees: Vec::new(),
    });
    params
}

/// The certificate authority of one cluster: every node trusts it and only it.
pub struct ClusterCa {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
}

impl fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterCa").finish_non_exhaustive()
    }
}

impl ClusterCa {
    /// Makes a fresh CA, for `ferry certs` and for clusters with ephemeral certificates.
    pub fn generate() -> Result<Self, TlsError> {
        let key = KeyPair::generate()?;
        let params = ca_params();
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA written by [`ClusterCa::to_pem`], so more nodes can be issued later.
    ///
    /// Checks that the pair really signs certificates that chain to the certificate.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let cert_der = parse_cert("CA certificate", cert_pem)?;
        let key = KeyPair::from_pem(key_pem).map_err(|e| TlsError::Pem {
            what: "CA key",
            detail: e.to_string(),
        })?;
        let ca = Self {
            issuer: Issuer::new(ca_params(), key),
            cert_der,
            cert_pem: cert_pem.to_owned(),
        };
        let probe_node =
            NodeId::new("ca-probe").map_err(|e| TlsError::CaMismatch(e.to_string()))?;
        let probe = ca.issue_node(&probe_node)?;
        let probe_der = parse_cert("probe certificate", &probe.cert_pem)?;
        verify_issued(&ca.cert_der, &probe_der, &probe_node)?;
        Ok(ca)
    }

    /// Reads `ca.pem` and `ca.key` from `dir`.
    pub fn load(dir: &Path) -> Result<Self, TlsError> {
        let cert = read_text(&dir.join("ca.pem"))?;
        let key = read_text(&dir.join("ca.key"))?;
        Self::from_pem(&cert, &key)
    }

    /// The CA certificate and private key, as PEM text.
    pub fn to_pem(&self) -> (String, String) {
        (self.cert_pem.clone(), self.issuer.key().serialize_pem())
    }

    /// The CA certificate as PEM text: what every node of the cluster must trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes `ca.pem` and `ca.key` (owner-only) into `dir`.
    pub fn write_files(&self, dir: &Path) -> Result<(), TlsError> {
        let (cert, key) = self.to_pem();
        write_pem(&dir.join("ca.pem"), &cert, false)?;
        write_pem(&dir.join("ca.key"), &key, true)
    }

    /// Issues the certificate of `node`, with a fresh key, usable to both dial and accept.
    pub fn issue_node(&self, node: &NodeId) -> Result<NodeCert, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![node_dns_name(node)])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "Ferry");
        // Only for people reading the certificate; the dNSName is what is checked.
        if node.as_str().chars().count() <= MAX_COMMON_NAME {
            dn.push(DnType::CommonName, node.as_str());
        }
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(NodeCert {
            node: node.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Issues a certificate for `node` and bundles it with this CA: ephemeral clusters in one step.
    pub fn node_tls(&self, node: &NodeId) -> Result<NodeTls, TlsError> {
        NodeTls::new(&self.cert_pem, &self.issue_node(node)?)
    }
}

/// One node's certificate and private key, as PEM text.
#[derive(Clone)]
pub struct NodeCert {
    node: NodeId,
    cert_pem: String,
    key_pem: String,
}

impl fmt::Debug for NodeCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeCert")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl NodeCert {
    /// Takes a certificate and key for `node`, refusing a certificate that names another node.
    pub fn from_pem(node: NodeId, cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        check_cert_names_node(&parse_cert("node certificate", cert_pem)?, &node)?;
        parse_key("node key", key_pem)?;
        Ok(Self {
            node,
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        })
    }

    /// Reads `<stem>.pem` and `<stem>.key` from `dir` (see [`node_file_stem`]).
    pub fn load(dir: &Path, node: NodeId) -> Result<Self, TlsError> {
        let stem = node_file_stem(&node);
        let cert = read_text(&dir.join(format!("{stem}.pem")))?;
        let key = read_text(&dir.join(format!("{stem}.key")))?;
        Self::from_pem(node, &cert, &key)
    }

    /// The node this certificate proves.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The certificate, as PEM text.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, as PEM text (PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Writes `<stem>.pem` and `<stem>.key` (owner-only) into `dir`.
    pub fn write_files(&self, dir: &Path) -> Result<(), TlsError> {
        let stem = node_file_stem(&self.node);
        write_pem(&dir.join(format!("{stem}.pem")), &self.cert_pem, false)?;
        write_pem(&dir.join(format!("{stem}.key")), &self.key_pem, true)
    }
}

/// Everything a node needs for mesh TLS: the CA to trust and its own certificate and key.
pub struct NodeTls {
    node: NodeId,
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl Clone for NodeTls {
    fn clone(&self) -> Self {
        Self {
            node: self.node.clone(),
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTls")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl NodeTls {
    /// Bundles the CA certificate (PEM) with a node's certificate and key.
    ///
    /// Refuses a node certificate the CA did not issue, which would otherwise only show
    /// up as every peer refusing this node.
    pub fn new(ca_cert_pem: &str, node: &NodeCert) -> Result<Self, TlsError> {
        let ca = parse_cert("CA certificate", ca_cert_pem)?;
        let cert = parse_cert("node certificate", &node.cert_pem)?;
        verify_issued(&ca, &cert, &node.node)?;
        Ok(Self {
            node: node.node.clone(),
            ca,
            cert,
            key: parse_key("node key", &node.key_pem)?,
        })
    }

    /// Reads `ca.pem`, `<stem>.pem` and `<stem>.key` from `dir`, as `ferry certs` wrote them.
    pub fn load(dir: &Path, node: NodeId) -> Result<Self, TlsError> {
        let ca = read_text(&dir.join("ca.pem"))?;
        Self::new(&ca, &NodeCert::load(dir, node)?)
    }

    /// The node these credentials prove.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone())?;
        Ok(Arc::new(roots))
    }

    /// The acceptor's config: present our certificate, demand one chaining to the CA.
    pub(crate) fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = provider();
        let verifier =
            WebPkiClientVerifier::builder_with_provider(self.roots()?, provider.clone()).build()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())?;
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(config)
    }

    /// The dialler's config: trust only the CA, and present our certificate.
    pub(crate) fn client_config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(vec![self.cert.clone()], self.key.clone_key())?;
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(config)
    }

    /// TLS for an HTTPS endpoint of this node, such as a host's admin endpoint: TLS 1.3, this
    /// node's certificate, HTTP/1.1, and no client certificate asked for (its callers are
    /// operators and probes, who prove themselves otherwise, if at all).
    pub fn https_server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())?;
        config.alpn_protocols = vec![HTTP1.to_vec()];
        Ok(config)
    }
}

/// The TLS of an HTTPS client of a node's endpoints ([`NodeTls::https_server_config`]), with the
/// name to connect with: it trusts only the cluster CA of `ca_pem`, and takes the certificate of
/// `node` only, or, without one, of any node of the cluster (a certificate the CA issued for a
/// name in the node zone).
pub fn https_client_config(
    ca_pem: &str,
    node: Option<&NodeId>,
) -> Result<(rustls::ClientConfig, ServerName<'static>), TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add(parse_cert("CA certificate", ca_pem)?)?;
    let provider = provider();
    let expected = node.map(node_server_name).transpose()?;
    let name = match &expected {
        Some(name) => name.clone(),
        // Only the SNI: the verifier checks the names itself.
        None => ServerName::try_from(NODE_ZONE).map_err(|e| {
            TlsError::Rustls(rustls::Error::General(format!(
                "{NODE_ZONE} is no DNS name: {e}"
            )))
        })?,
    };
    let verifier = ClusterNodeVerifier {
        roots,
        expected,
        algorithms: provider.signature_verification_algorithms,
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![HTTP1.to_vec()];
    Ok((config, name))
}

/// Takes a server certificate that chains to the cluster CA and names one node: the node
/// expected, or any node of the zone. Webpki's own verifier checks one name given in advance,
/// which a client that knows only the cluster cannot give.
#[derive(Debug)]
struct ClusterNodeVerifier {
    roots: RootCertStore,
    expected: Option<ServerName<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClusterNodeVerifier {
    /// Checks `cert` names the expected node, or some node: a name under the zone that the
    /// certificate is valid for, as webpki decides validity.
    fn check_name(
        &self,
        cert: &ParsedCertificate<'_>,
        der: &CertificateDer<'_>,
    ) -> Result<(), rustls::Error> {
        if let Some(expected) = &self.expected {
            return rustls::client::verify_server_name(cert, expected);
        }
        let suffix = format!(".{NODE_ZONE}");
        let parsed = webpki::EndEntityCert::try_from(der).map_err(|e| {
            rustls::Error::General(format!("the certificate cannot be parsed: {e}"))
        })?;
        let named = parsed
            .valid_dns_names()
            .filter(|name| name.to_ascii_lowercase().ends_with(&suffix))
            .filter_map(|name| ServerName::try_from(name.to_owned()).ok())
            .any(|name| rustls::client::verify_server_name(cert, &name).is_ok());
        if named {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))
        }
    }
}

impl ServerCertVerifier for ClusterNodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        self.check_name(&cert, end_entity)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str) -> NodeId {
        NodeId::new(id).unwrap()
    }

    #[test]
    fn dns_names_are_valid_and_distinct_for_any_utf8_id() {
        let ids = [
            "a".to_owned(),
            "A".to_owned(),
            "node/1 é".to_owned(),
            "x".repeat(90),
            "x".repeat(91),
            "€".repeat(85),
        ];
        let mut seen = std::collections::HashSet::new();
        for id in &ids {
            let id = node(id);
            let name = node_dns_name(&id);
            assert!(node_server_name(&id).is_ok(), "{name} is not a DNS name");
            assert!(name.len() <= 253);
            assert!(seen.insert(name));
        }
        assert_eq!(node_dns_name(&node("a")), "61.node.ferry");
        assert!(node_dns_name(&node(&"y".repeat(255))).ends_with(".sha256.node.ferry"));
    }

    #[test]
    fn file_stems_are_plain_or_marked() {
        assert_eq!(node_file_stem(&node("n-1_b")), "node-n-1_b");
        assert_eq!(node_file_stem(&node("a/b")), "node-hex.612f62");
        assert_eq!(node_file_stem(&node("ca")), "node-ca");
        assert_ne!(
            node_file_stem(&node("612f62")),
            node_file_stem(&node("a/b"))
        );
    }

    #[test]
    fn issued_certificate_names_its_node_only() {
        let ca = ClusterCa::generate().unwrap();
        let cert = ca.issue_node(&node("a")).unwrap();
        let der = parse_cert("t", cert.cert_pem()).unwrap();
        assert!(check_cert_names_node(&der, &node("a")).is_ok());
        assert!(matches!(
            check_cert_names_node(&der, &node("b")),
            Err(TlsError::WrongNode { .. })
        ));
        let long = node(&"z".repeat(200));
        let cert = ca.issue_node(&long).unwrap();
        let der = parse_cert("t", cert.cert_pem()).unwrap();
        assert!(check_cert_names_node(&der, &long).is_ok());
    }

    #[test]
    fn node_cert_from_pem_refuses_another_nodes_certificate() {
        let ca = ClusterCa::generate().unwrap();
        let cert = ca.issue_node(&node("a")).unwrap();
        let err = NodeCert::from_pem(node("b"), cert.cert_pem(), cert.key_pem()).unwrap_err();
        assert!(matches!(err, TlsError::WrongNode { .. }), "{err}");
        assert!(NodeCert::from_pem(node("a"), cert.cert_pem(), cert.key_pem()).is_ok());
    }

    #[test]
    fn ca_round_trips_through_pem_and_rejects_a_foreign_key() {
        let ca = ClusterCa::generate().unwrap();
        let (cert, key) = ca.to_pem();
        let loaded = ClusterCa::from_pem(&cert, &key).unwrap();
        // A node issued by the reloaded CA is trusted by configs built from the original.
        let issued = loaded.issue_node(&node("late")).unwrap();
        assert!(
            NodeTls::new(ca.cert_pem(), &issued)
                .unwrap()
                .server_config()
                .is_ok()
        );

        let other = ClusterCa::generate().unwrap();
        let (_, other_key) = other.to_pem();
        let err = ClusterCa::from_pem(&cert, &other_key).unwrap_err();
        assert!(matches!(err, TlsError::CaMismatch(_)), "{err}");
        assert!(matches!(
            ClusterCa::from_pem("not pem", &key),
            Err(TlsError::Pem { .. })
        ));
    }

    #[test]
    fn files_written_by_certs_load_back() {
        let dir = std::env::temp_dir().join(format!("ferry-tls-{}", rand::random::<u64>()));
        fs::create_dir_all(&dir).unwrap();
        let ca = ClusterCa::generate().unwrap();
        ca.write_files(&dir).unwrap();
        let id = node("n/1");
        ca.issue_node(&id).unwrap().write_files(&dir).unwrap();
        let tls = NodeTls::load(&dir, id.clone()).unwrap();
        assert_eq!(tls.node(), &id);
        assert!(tls.client_config().is_ok());
        assert!(ClusterCa::load(&dir).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.join("ca.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0);
        }
        let foreign = ClusterCa::generate().unwrap().issue_node(&id).unwrap();
        let err = NodeTls::new(ca.cert_pem(), &foreign).unwrap_err();
        assert!(matches!(err, TlsError::CaMismatch(_)), "{err}");
        let missing = NodeTls::load(&dir, node("nobody")).unwrap_err();
        assert!(matches!(missing, TlsError::Read { .. }), "{missing}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A whole TLS handshake in memory between a client of `client` connecting as `name` and a
    /// server of `server`; the error the client saw, if any.
    fn handshake(
        client: rustls::ClientConfig,
        name: ServerName<'static>,
        server: rustls::ServerConfig,
    ) -> Result<(), rustls::Error> {
        let mut client = rustls::ClientConnection::new(Arc::new(client), name)?;
        let mut server = rustls::ServerConnection::new(Arc::new(server))?;
        while client.is_handshaking() || server.is_handshaking() {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            // The server's refusal shows on the client's side, in the alert it sends.
            let server_failed = server.process_new_packets().is_err();
            let mut wire = Vec::new();
            server.write_tls(&mut wire).unwrap();
            client.read_tls(&mut wire.as_slice()).unwrap();
            client.process_new_packets()?;
            assert!(!server_failed, "the server failed, the client did not");
        }
        Ok(())
    }

    #[test]
    fn an_https_client_of_the_cluster_ca_takes_its_nodes_and_only_them() {
        let ca = ClusterCa::generate().unwrap();
        let server = ca
            .node_tls(&node("a"))
            .unwrap()
            .https_server_config()
            .unwrap();
        assert_eq!(server.alpn_protocols, [b"http/1.1".to_vec()]);
        let connect = |ca_pem: &str, to: Option<&str>| {
            let to = to.map(node);
            let (client, name) = https_client_config(ca_pem, to.as_ref()).unwrap();
            handshake(client, name, server.clone())
        };
        // Any node of the cluster, or node a by name.
        assert!(connect(ca.cert_pem(), None).is_ok());
        assert!(connect(ca.cert_pem(), Some("a")).is_ok());
        // Another node's name, or another cluster's CA, is refused.
        let other_node = connect(ca.cert_pem(), Some("b")).unwrap_err();
        assert!(
            matches!(
                other_node,
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                        | rustls::CertificateError::NotValidForNameContext { .. }
                )
            ),
            "{other_node}"
        );
        let other_ca = ClusterCa::generate().unwrap();
        let stranger = connect(other_ca.cert_pem(), None).unwrap_err();
        assert!(
            matches!(
                stranger,
                // Every Ferry CA has the same name: the signature does not match.
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::BadSignature
                        | rustls::CertificateError::UnknownIssuer
                )
            ),
            "{stranger}"
        );
        assert!(matches!(
            https_client_config("not pem", None),
            Err(TlsError::Pem { .. })
        ));
    }

    #[test]
    fn an_https_client_of_any_node_refuses_a_certificate_outside_the_node_zone() {
        // A CA of another kind, which may sign any name: its "localhost" is no node.
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = params.self_signed(&key).unwrap();
        let issuer = Issuer::new(params, key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::from_pem_slice(leaf_key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        let (client, name) = https_client_config(&ca_cert.pem(), None).unwrap();
        let error = handshake(client, name, server).unwrap_err();
        assert!(
            matches!(
                error,
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                        | rustls::CertificateError::NotValidForNameContext { .. }
                )
            ),
            "{error}"
        );
    }
}
