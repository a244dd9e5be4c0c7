//! How the operator commands reach a node's admin endpoint: the token they send (from
//! `--admin-token-file`, else `FERRY_ADMIN_TOKEN`), and HTTPS checked against the cluster CA
//! (`--admin-ca`, else `FERRY_ADMIN_CA`) for a node with `admin_tls`.

use std::path::PathBuf;

use clap::Args;
use ferry::NodeId;
use ferry_host::admin::{AdminClient, ClientError};

/// The environment variable the token is read from when no file is given; a node reads the
/// same one.
pub const TOKEN_ENV: &str = "FERRY_ADMIN_TOKEN";

/// How a command reaches the node's admin endpoint.
#[derive(Args, Debug, Clone, Default)]
pub struct AdminArgs {
    /// A file that holds the node's admin token (its `admin_token_file`); without it, the
    /// token is read from FERRY_ADMIN_TOKEN if that is set.
    #[arg(long = "admin-token-file", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Speak HTTPS to a node with `admin_tls`, trusting only this cluster CA (the ca.pem of
    /// the nodes' certs folder): the endpoint must show a certificate it issued.
    #[arg(long = "admin-ca", value_name = "FILE", env = "FERRY_ADMIN_CA")]
    admin_ca: Option<PathBuf>,
    /// With --admin-ca: the endpoint must show this node's certificate, not just any node's of
    /// the cluster, so a mistyped address reaches no other node.
    #[arg(
        long = "admin-node",
        value_name = "ID",
        requires = "admin_ca",
        value_parser = ferry_host::node_ids::node_id
    )]
    admin_node: Option<NodeId>,
}

impl AdminArgs {
    /// A client for the admin endpoint at `addr`, with the token and the TLS asked for.
    pub fn client(&self, addr: &str) -> Result<AdminClient, ClientError> {
        let mut client = AdminClient::new(addr)?;
        let token = match &self.token_file {
            Some(path) => {
                Some(
                    std::fs::read_to_string(path).map_err(|e| ClientError::TokenFile {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?,
                )
            }
            None => std::env::var(TOKEN_ENV).ok(),
        };
        if let Some(token) = token.filter(|t| !t.trim().is_empty()) {
            client = client.with_token(token.trim());
        }
        if let Some(ca) = &self.admin_ca {
            client = client.with_ca_file(ca, self.admin_node.as_ref())?;
        }
        Ok(client)
    }
}
