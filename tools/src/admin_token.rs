//! The admin token the operator commands send: from `--admin-token-file`, else
//! `FERRY_ADMIN_TOKEN`.

use std::path::PathBuf;

use clap::Args;
use ferry_host::admin::{AdminClient, ClientError};

/// The environment variable the token is read from when no file is given; a node reads the
/// same one.
pub const TOKEN_ENV: &str = "FERRY_ADMIN_TOKEN";

/// How a command finds the node's admin token.
#[derive(Args, Debug, Clone, Default)]
pub struct TokenArgs {
    /// A file that holds the node's admin token (its `admin_token_file`); without it, the
    /// token is read from FERRY_ADMIN_TOKEN if that is set.
    #[arg(long = "admin-token-file", value_name = "FILE")]
    token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// A client for the admin endpoint at `addr`, sending the token if there is one.
    pub fn client(&self, addr: &str) -> Result<AdminClient, ClientError> {
        let client = AdminClient::new(addr)?;
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
        Ok(match token {
            Some(token) if !token.trim().is_empty() => client.with_token(token.trim()),
            _ => client,
        })
    }
}
