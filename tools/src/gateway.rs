//! The client gateway of a `ferry node`: its certificate and its tokens file, read into the
//! framework's session settings.

use std::path::{Path, PathBuf};

use ferry::session::tls::SessionTlsError;
use ferry::{SessionSettings, SessionTls, StaticTokens, WebSocketSettings};

use crate::config::GatewayFiles;

/// Why the gateway settings could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The certificate or key is missing or unusable.
    #[error(
        "cannot use the gateway certificate {} and key {}: {source}; point `sessions_cert` and \
         `sessions_key` at a PEM chain and its key (`ferry certs --gateway` makes a development pair)",
        cert.display(),
        key.display()
    )]
    Tls {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        source: SessionTlsError,
    },
    /// The tokens file could not be read.
    #[error("cannot read the tokens file {}: {source}; check `sessions_tokens`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The tokens file holds no token.
    #[error(
        "the tokens file {} holds no token, so no client could connect; write one token a line \
         (`<token> [name]`)",
        path.display()
    )]
    NoTokens {
        /// The file.
        path: PathBuf,
    },
}

/// The session settings of a gateway from its files.
pub fn settings(files: &GatewayFiles) -> Result<SessionSettings, GatewayError> {
    let tls = SessionTls::load(&files.cert, &files.key).map_err(|source| GatewayError::Tls {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    })?;
    let tokens = load_tokens(&files.tokens)?;
    let websocket = files.websocket.map(|ws| WebSocketSettings {
        listen: ws.listen,
        tls: (!ws.plain).then(|| tls.clone()),
    });
    let mut settings = SessionSettings::new(files.listen, tls, tokens);
    settings.limits = files.limits.session_limits();
    settings.websocket = websocket;
    Ok(settings)
}

/// Reads a tokens file: one `<token> [name]` a line; blank lines and `#` comments are skipped.
/// A token without a name is called `token-<line>` in the logs.
fn load_tokens(path: &Path) -> Result<StaticTokens, GatewayError> {
    let text = std::fs::read_to_string(path).map_err(|source| GatewayError::Read {
        path: path.to_owned(),
        source,
    })?;
    let (tokens, count) = parse_tokens(&text);
    if count == 0 {
        return Err(GatewayError::NoTokens {
            path: path.to_owned(),
        });
    }
    Ok(tokens)
}

fn parse_tokens(text: &str) -> (StaticTokens, usize) {
    let mut tokens = StaticTokens::new();
    let mut count = 0;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (token, name) = match line.split_once(char::is_whitespace) {
            Some((token, name)) => (token, name.trim().to_owned()),
            None => (line, format!("token-{}", n + 1)),
        };
        tokens = tokens.with(token, name);
        count += 1;
    }
    (tokens, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry::Authenticator;

    #[test]
    fn tokens_are_read_with_their_names_and_comments_are_skipped() {
        let (tokens, count) = parse_tokens("# players\n\nalpha-1 alice\n  beta-2\n");
        assert_eq!(count, 2);
        let name = |t: &[u8]| tokens.authenticate(t).map(|i| i.name);
        assert_eq!(name(b"alpha-1"), Ok("alice".to_owned()));
        assert_eq!(name(b"beta-2"), Ok("token-4".to_owned()));
        assert!(name(b"# players").is_err());
        assert!(name(b"alice").is_err());
    }
}
