//! A small HTTP/1.1 client for the admin endpoint: one request per connection, JSON in and out,
//! every failure an error that names the address and what to check. It speaks HTTPS to a node
//! with `admin_tls` when given the cluster CA, and checks the node's certificate against it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry::NodeId;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::wire::{
    DrainReport, ErrorBody, RelocateRequest, Resumed, ShutdownReport, ShutdownRequest, UnitCreated,
    UnitRequest,
};

/// How long connecting may take.
const CONNECT: Duration = Duration::from_secs(5);

/// How long a quick request (status, creating a unit) may take.
const QUICK: Duration = Duration::from_secs(10);

/// How long past its deadline a drain or shutdown may take to answer: the moves in flight at
/// the deadline settle, and the node stops.
const SETTLE: Duration = Duration::from_secs(60);

/// The largest answer read: a status with many peers is far smaller.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// Why a request to an admin endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not `HOST:PORT`.
    #[error(
        "bad admin address {addr:?}: {reason}; pass HOST:PORT, such as 127.0.0.1:7100 (the \
         admin= part of the node's ready line)"
    )]
    BadAddress {
        /// The address as given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Nothing answered there.
    #[error(
        "cannot reach the admin endpoint at {addr}: {reason}; check that the node runs and that \
         {addr} is the admin= address of its ready line"
    )]
    Unreachable {
        /// The address dialled, as given.
        addr: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// Something answered, but not as an admin endpoint does.
    #[error(
        "{addr} did not answer as a ferry admin endpoint ({reason}); check that it is the admin= \
         address of the node's ready line, and give a node with `admin_tls` its cluster CA: it \
         answers HTTPS only"
    )]
    NotAdmin {
        /// The address that answered.
        addr: String,
        /// What was wrong with the answer.
        reason: String,
    },
    /// The node answered a status, then closed the connection before it answered the request:
    /// it stopped or crashed meanwhile.
    #[error(
        "the node at {addr} went away before it answered {what} ({reason}): it stopped or \
         crashed; read its log. What it was doing ended with it: recovery rebuilds the units it \
         still hosted on the other nodes once its lease lapses"
    )]
    Lost {
        /// The node's admin address.
        addr: String,
        /// The request it did not answer, as `METHOD /path`.
        what: String,
        /// How the connection ended.
        reason: String,
    },
    /// The endpoint's certificate did not pass the check against the cluster CA, or it speaks
    /// no TLS.
    #[error(
        "the TLS handshake with the admin endpoint at {addr} failed ({reason}); check that the \
         node has `admin_tls`, that the CA is the ca.pem of its cluster, and that the node id \
         asked for (if any) is the node's"
    )]
    Handshake {
        /// The address dialled.
        addr: String,
        /// What TLS said.
        reason: String,
    },
    /// The cluster CA file could not be read or holds no certificate.
    #[error(
        "cannot use {} as the cluster CA: {reason}; pass the ca.pem of the nodes' `certs` folder",
        path.display()
    )]
    CaFile {
        /// The CA file given.
        path: PathBuf,
        /// What reading or parsing it met.
        reason: String,
    },
    /// The admin token file could not be read.
    #[error("cannot read the admin token file {}: {reason}; pass the file the node's `admin_token_file` names", path.display())]
    TokenFile {
        /// The token file given.
        path: std::path::PathBuf,
        /// What reading it met.
        reason: String,
    },
    /// The node refused the request, saying why.
    #[error("node at {addr} refused {what} ({status}): {message}")]
    Refused {
        /// The node's admin address.
        addr: String,
        /// The request it refused, as `METHOD /path`.
        what: String,
        /// The HTTP status.
        status: StatusCode,
        /// The node's explanation.
        message: String,
    },
}

/// The admin endpoint of one node.
#[derive(Clone)]
pub struct AdminClient {
    addr: String,
    token: Option<String>,
    /// HTTPS: the TLS that trusts the cluster CA, and the name asked for.
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        f.debug_struct("AdminClient")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("tls", &self.tls.as_ref().map(|(_, name)| name))
            .finish()
    }
}

impl AdminClient {
    /// A client for `addr`: `HOST:PORT`, with or without a leading `http://`.
    pub fn new(addr: &str) -> Result<Self, ClientError> {
        let bad = |reason: &str| ClientError::BadAddress {
            addr: addr.to_owned(),
            reason: reason.to_owned(),
        };
        let trimmed = addr.strip_prefix("http://").unwrap_or(addr);
        let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
        if trimmed.contains('/') || trimmed.contains("://") {
            return Err(bad("it is not HOST:PORT"));
        }
        let Some((host, port)) = trimmed.rsplit_once(':') else {
            return Err(bad("it has no port"));
        };
        if host.is_empty() {
            return Err(bad("it has no host"));
        }
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad("the port is not a number from 1 to 65535"));
        }
        Ok(AdminClient {
            addr: trimmed.to_owned(),
            token: None,
            tls: None,
        })
    }

    /// Speaks HTTPS, trusting only the cluster CA in the PEM file `ca`: the endpoint must show
    /// the certificate of `node`, or, without one, of any node of that cluster.
    pub fn with_ca_file(mut self, ca: &Path, node: Option<&NodeId>) -> Result<Self, ClientError> {
        let bad = |reason: String| ClientError::CaFile {
            path: ca.to_owned(),
            reason,
        };
        let pem = std::fs::read_to_string(ca).map_err(|e| bad(e.to_string()))?;
        let (config, name) =
            ferry::mesh::https_client_config(&pem, node).map_err(|e| bad(e.to_string()))?;
        self.tls = Some((Arc::new(config), name));
        Ok(self)
    }

    /// Sends `token` as `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The address, as requests name it.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `GET /status`, as a [`StatusBody`] or as the JSON the node sent.
    pub async fn status<T: DeserializeOwned>(&self) -> Result<T, ClientError> {
        let body = self.call(Method::GET, "/status", None, QUICK).await?;
        self.decode(&body)
    }

    /// `POST /units`: answers once the unit runs on the node.
    pub async fn create_unit(&self, request: &UnitRequest) -> Result<UnitCreated, ClientError> {
        let body = self
            .call(Method::POST, "/units", Some(json(request)), QUICK)
            .await?;
        self.decode(&body)
    }

    /// `POST /relocate`: answers once the drain has ended.
    pub async fn relocate(&self, request: &RelocateRequest) -> Result<DrainReport, ClientError> {
        self.operate("/relocate", request, request.deadline_ms)
            .await
    }

    /// `POST /resume`: answers once the node serves again.
    pub async fn resume(&self) -> Result<Resumed, ClientError> {
        let body = self.call(Method::POST, "/resume", None, QUICK).await?;
        self.decode(&body)
    }

    /// `POST /shutdown`: answers once the node has stopped.
    pub async fn shutdown(&self, request: &ShutdownRequest) -> Result<ShutdownReport, ClientError> {
        self.operate("/shutdown", request, request.deadline_ms)
            .await
    }

    /// `GET path` of one of the application's own pages, its JSON answer decoded.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let body = self.call(Method::GET, path, None, QUICK).await?;
        self.decode(&body)
    }

    /// `POST path` without a body, to one of the application's own pages, its JSON answer
    /// decoded.
    pub async fn post<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let body = self.call(Method::POST, path, None, QUICK).await?;
        self.decode(&body)
    }

    /// A host operation, waited for until a while past its deadline.
    async fn operate<T: DeserializeOwned>(
        &self,
        path: &str,
        request: &impl Serialize,
        deadline_ms: Option<u64>,
    ) -> Result<T, ClientError> {
        // Asked first, so that a connection cut off later is known to be the node going away,
        // not something that is no admin endpoint (which is then never sent the operation).
        self.status::<serde_json::Value>().await?;
        let wait = super::wire::deadline(deadline_ms).unwrap_or_default() + SETTLE;
        match self
            .call(Method::POST, path, Some(json(request)), wait)
            .await
        {
            Ok(body) => self.decode(&body),
            Err(ClientError::NotAdmin { reason, .. }) => Err(ClientError::Lost {
                addr: self.addr.clone(),
                what: format!("POST {path}"),
                reason,
            }),
            Err(error) => Err(error),
        }
    }

    fn decode<T: DeserializeOwned>(&self, body: &[u8]) -> Result<T, ClientError> {
        serde_json::from_slice(body).map_err(|e| self.not_admin(format!("unexpected JSON: {e}")))
    }

    fn not_admin(&self, reason: String) -> ClientError {
        ClientError::NotAdmin {
            addr: self.addr.clone(),
            reason,
        }
    }

    /// One request on a fresh connection; a 2xx answer's body, or the node's refusal.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        wait: Duration,
    ) -> Result<Bytes, ClientError> {
        let unreachable = |reason: String| ClientError::Unreachable {
            addr: self.addr.clone(),
            reason,
        };
        let stream = tokio::time::timeout(CONNECT, self.connect())
            .await
            .map_err(|_| unreachable(format!("no connection within {CONNECT:?}")))??;
        let has_body = body.is_some();
        let mut request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, &self.addr);
        if has_body {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.not_admin(e.to_string()))?;
        let (status, body) = match &self.tls {
            Some((config, name)) => {
                let handshake = |reason: String| ClientError::Handshake {
                    addr: self.addr.clone(),
                    reason,
                };
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let stream = tokio::time::timeout(CONNECT, connector.connect(name.clone(), stream))
                    .await
                    .map_err(|_| handshake(format!("no handshake within {CONNECT:?}")))?
                    .map_err(|e| handshake(e.to_string()))?;
                self.exchange(stream, request, wait).await?
            }
            None => self.exchange(stream, request, wait).await?,
        };
        if status.is_success() {
            return Ok(body);
        }
        let message = serde_json::from_slice::<ErrorBody>(&body)
            .map(|e| e.error)
            .map_err(|_| self.not_admin(format!("{status} without a JSON error")))?;
        Err(ClientError::Refused {
            addr: self.addr.clone(),
            what: format!("{method} {path}"),
            status,
            message,
        })
    }

    /// Sends `request` on `stream` and reads the answer within `wait`.
    async fn exchange<S>(
        &self,
        stream: S,
        request: Request<Full<Bytes>>,
        wait: Duration,
    ) -> Result<(StatusCode, Bytes), ClientError>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.not_admin(e.to_string()))?;
        // Drives the connection; it ends when the answer is read and the sender dropped.
        tokio::spawn(connection);
        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| self.not_admin(e.to_string()))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| self.not_admin(format!("the answer could not be read: {e}")))?
                .to_bytes();
            Ok::<_, ClientError>((status, body))
        };
        tokio::time::timeout(wait, exchange)
            .await
            .map_err(|_| self.not_admin(format!("no answer within {wait:?}")))?
    }

    async fn connect(&self) -> Result<tokio::net::TcpStream, ClientError> {
        let unreachable = |reason: String| ClientError::Unreachable {
            addr: self.addr.clone(),
            reason,
        };
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&self.addr)
            .await
            .map_err(|e| unreachable(format!("the host name does not resolve ({e})")))?
            .collect();
        let mut last = "the host name resolves to no address".to_owned();
        for addr in addrs {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e.to_string(),
            }
        }
        Err(unreachable(last))
    }
}

fn json(value: &impl Serialize) -> Vec<u8> {
    // These request types are plain structs of strings and numbers: encoding cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::wire::Mode;

    fn drain_request() -> RelocateRequest {
        RelocateRequest {
            mode: Mode::Maintenance,
            version: None,
            deadline_ms: Some(1000),
        }
    }

    /// Requests' first lines, as a test server saw them.
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

    /// Listens on loopback and closes every connection after reading its request; with
    /// `status`, answers the first one (a status) with an empty JSON object. Every request the
    /// client made has been read by the time its call returns: it waits for each answer.
    async fn closing_server(status: bool) -> (AdminClient, Seen, tokio::task::JoinHandle<()>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let seen = Seen::default();
        let requests = seen.clone();
        let server = tokio::spawn(async move {
            let mut answer = status;
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0_u8; 1024];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let first = request.lines().next().unwrap_or_default().to_owned();
                requests.lock().expect("not poisoned").push(first);
                if std::mem::take(&mut answer) {
                    let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
                    stream.write_all(ok.as_bytes()).await.expect("answer sent");
                }
            }
        });
        let client = AdminClient::new(&addr.to_string()).expect("a valid address");
        (client, seen, server)
    }

    #[tokio::test]
    async fn a_node_that_goes_away_mid_drain_is_reported_lost() {
        let (client, seen, server) = closing_server(true).await;
        let error = client
            .relocate(&drain_request())
            .await
            .expect_err("no answer");
        server.abort();
        assert!(matches!(error, ClientError::Lost { .. }), "{error:?}");
        let said = error.to_string();
        assert!(
            said.contains("went away before it answered POST /relocate"),
            "{said}"
        );
        let seen = seen.lock().expect("not poisoned").clone();
        assert_eq!(seen, ["GET /status HTTP/1.1", "POST /relocate HTTP/1.1"]);
    }

    #[tokio::test]
    async fn something_that_is_no_admin_endpoint_is_never_sent_the_drain() {
        let (client, seen, server) = closing_server(false).await;
        let error = client
            .relocate(&drain_request())
            .await
            .expect_err("no answer");
        server.abort();
        assert!(matches!(error, ClientError::NotAdmin { .. }), "{error:?}");
        let seen = seen.lock().expect("not poisoned").clone();
        assert_eq!(seen, ["GET /status HTTP/1.1"]);
    }

    /// Writes a fresh cluster CA's certificate to a file of its own, removed on drop.
    struct CaFile(std::path::PathBuf);

    impl CaFile {
        fn new(text: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "ferry-host-ca-{}-{}.pem",
                std::process::id(),
                next_suffix()
            ));
            std::fs::write(&path, text).expect("CA file written");
            CaFile(path)
        }
    }

    impl Drop for CaFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn next_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    #[tokio::test]
    async fn with_the_cluster_ca_a_plain_http_server_is_sent_no_request() {
        let ca = ferry::mesh::ClusterCa::generate().expect("a CA");
        let file = CaFile::new(ca.cert_pem());
        let (client, seen, server) = closing_server(true).await;
        let client = client
            .with_token("s3cret")
            .with_ca_file(&file.0, None)
            .expect("a usable CA");
        let error = client
            .status::<serde_json::Value>()
            .await
            .expect_err("no TLS there");
        server.abort();
        assert!(matches!(error, ClientError::Handshake { .. }), "{error:?}");
        assert!(error.to_string().contains("admin_tls"), "{error}");
        // The server saw a TLS hello, never a request (nor its token) in the clear.
        let seen = seen.lock().expect("not poisoned").clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(!seen[0].contains("HTTP/1.1"), "{seen:?}");
    }

    #[test]
    fn a_missing_or_unusable_ca_file_is_refused_before_any_request() {
        let client = AdminClient::new("127.0.0.1:7100").expect("a valid address");
        let missing = std::env::temp_dir().join("ferry-host-no-such-ca.pem");
        let error = client
            .clone()
            .with_ca_file(&missing, None)
            .expect_err("no file");
        assert!(matches!(error, ClientError::CaFile { .. }), "{error:?}");
        assert!(error.to_string().contains("ca.pem"), "{error}");
        let file = CaFile::new("not a certificate");
        let error = client.with_ca_file(&file.0, None).expect_err("no PEM");
        assert!(matches!(error, ClientError::CaFile { .. }), "{error:?}");
    }
}
