//! The client gateway of a node: its certificate and its tokens file, read into the framework's
//! session settings.
//!
//! The tokens file has one `<token> [name] [bind=<pattern>,<pattern>...]` a line. A token with
//! `bind=` may bind only the Actors whose id matches one of its patterns (`*` stands for any
//! run of characters: `bind=bingo-*-p3`); a bind outside them is refused and the session stays
//! open. A token without `bind=` may bind any Actor: for bots and tests, not for players.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry::session::tls::SessionTlsError;
use ferry::{ActorId, Authenticator, Identity, SessionSettings, SessionTls, WebSocketSettings};

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
        /// What loading the certificate or key met.
        source: SessionTlsError,
    },
    /// The tokens file could not be read.
    #[error(
        "cannot read the tokens file {}: {source}; check `sessions_tokens`, or write the file: one \
         `<token> [name] [bind=<actor>,...]` a line for each player who may connect, such as \
         `t-4f1c ann bind=ann`",
        path.display()
    )]
    Read {
        /// The tokens file `sessions_tokens` names.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line of the tokens file is not `<token> [name] [bind=<pattern>,...]`.
    #[error(
        "line {line} of the tokens file {} is wrong: {reason}; write `<token> [name] \
         [bind=<pattern>,<pattern>...]`",
        path.display()
    )]
    Line {
        /// The tokens file `sessions_tokens` names.
        path: PathBuf,
        /// The line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The tokens file holds no token.
    #[error(
        "the tokens file {} holds no token, so no client could connect; write one token a line \
         (`<token> [name]`)",
        path.display()
    )]
    NoTokens {
        /// The tokens file `sessions_tokens` names.
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

/// Reads a tokens file (the module says its lines).
fn load_tokens(path: &Path) -> Result<TokenTable, GatewayError> {
    let text = std::fs::read_to_string(path).map_err(|source| GatewayError::Read {
        path: path.to_owned(),
        source,
    })?;
    let tokens = TokenTable::parse(&text).map_err(|(line, reason)| GatewayError::Line {
        path: path.to_owned(),
        line,
        reason,
    })?;
    if tokens.tokens.is_empty() {
        return Err(GatewayError::NoTokens {
            path: path.to_owned(),
        });
    }
    Ok(tokens)
}

/// The tokens a gateway accepts, each with its name and the Actors it may bind.
#[derive(Debug, Clone, Default)]
pub struct TokenTable {
    tokens: HashMap<Vec<u8>, Identity>,
    /// The patterns of each name that has them; a name without any may bind any Actor.
    binds: HashMap<String, Arc<[Pattern]>>,
}

impl TokenTable {
    /// Reads the lines of a tokens file; blank lines and `#` comments are skipped. A token
    /// without a name is called `token-<line>` in the logs. `Err` names the line and its fault.
    pub fn parse(text: &str) -> Result<TokenTable, (usize, String)> {
        let mut table = TokenTable::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let token = words.next().unwrap_or_default();
            let mut name = Vec::new();
            let mut patterns: Option<Vec<Pattern>> = None;
            for word in words {
                match word.strip_prefix("bind=") {
                    Some(list) => {
                        let list: Vec<Pattern> = list
                            .split(',')
                            .filter(|p| !p.is_empty())
                            .map(Pattern::new)
                            .collect();
                        if list.is_empty() {
                            return Err((n + 1, "`bind=` names no Actor".to_owned()));
                        }
                        patterns.get_or_insert_default().extend(list);
                    }
                    None => name.push(word),
                }
            }
            let name = if name.is_empty() {
                format!("token-{}", n + 1)
            } else {
                name.join(" ")
            };
            if table.tokens.contains_key(token.as_bytes()) {
                return Err((n + 1, "this token is on an earlier line too".to_owned()));
            }
            let named_before = table.tokens.values().any(|i| i.name == name);
            if named_before && (patterns.is_some() || table.binds.contains_key(&name)) {
                return Err((
                    n + 1,
                    format!(
                        "the name {name:?} is on an earlier line too; a token with `bind=` needs a name of its own"
                    ),
                ));
            }
            if let Some(patterns) = patterns {
                table.binds.insert(name.clone(), patterns.into());
            }
            table
                .tokens
                .insert(token.as_bytes().to_vec(), Identity::new(name));
        }
        Ok(table)
    }
}

impl Authenticator for TokenTable {
    fn authenticate(&self, token: &[u8]) -> Result<Identity, String> {
        self.tokens
            .get(token)
            .cloned()
            .ok_or_else(|| "unknown token; ask the game service for a fresh one".to_owned())
    }

    fn authorize_bind(&self, identity: &Identity, actor: &ActorId) -> Result<(), String> {
        match self.binds.get(&identity.name) {
            Some(patterns) if !patterns.iter().any(|p| p.matches(actor.as_str())) => Err(format!(
                "{} may not bind {actor}: its token binds only the Actors its tokens file line \
                 names",
                identity.name
            )),
            _ => Ok(()),
        }
    }
}

/// An Actor id pattern: text in which `*` stands for any run of characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(Vec<String>);

impl Pattern {
    /// The pattern `text`.
    pub fn new(text: &str) -> Self {
        Pattern(text.split('*').map(str::to_owned).collect())
    }

    /// Whether `id` matches: it starts with the first part, ends with the last, and holds the
    /// others in order between.
    pub fn matches(&self, id: &str) -> bool {
        let (first, rest) = match self.0.split_first() {
            Some(split) => split,
            None => return id.is_empty(),
        };
        let Some(mut left) = id.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            // No `*`: the whole id.
            return left.is_empty();
        };
        for part in middle {
            match left.find(part.as_str()) {
                Some(at) => left = &left[at + part.len()..],
                None => return false,
            }
        }
        left.len() >= last.len() && left.ends_with(last.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(id: &str) -> ActorId {
        ActorId::new(id).expect("actor id")
    }

    #[test]
    fn tokens_are_read_with_their_names_and_comments_are_skipped() {
        let tokens = TokenTable::parse("# players\n\nalpha-1 alice\n  beta-2\n").expect("parsed");
        assert_eq!(tokens.tokens.len(), 2);
        let name = |t: &[u8]| tokens.authenticate(t).map(|i| i.name);
        assert_eq!(name(b"alpha-1"), Ok("alice".to_owned()));
        assert_eq!(name(b"beta-2"), Ok("token-4".to_owned()));
        assert!(name(b"# players").is_err());
        assert!(name(b"alice").is_err());
    }

    #[test]
    fn a_token_with_bind_may_bind_only_its_actors() {
        let tokens =
            TokenTable::parse("t-ann ann bind=ann,room-*-ann\nt-bob bob bind=bob\nt-bots bots\n")
                .expect("parsed");
        let may = |token: &[u8], id: &str| {
            let identity = tokens.authenticate(token).expect("known token");
            tokens.authorize_bind(&identity, &actor(id)).is_ok()
        };
        assert!(may(b"t-ann", "ann"));
        assert!(may(b"t-ann", "room-7-ann"));
        assert!(!may(b"t-ann", "bob"));
        assert!(!may(b"t-ann", "anna"));
        assert!(!may(b"t-ann", "room-7-bob"));
        assert!(may(b"t-bob", "bob"));
        assert!(!may(b"t-bob", "ann"));
        // No bind=: any Actor.
        assert!(may(b"t-bots", "ann"));
        let refused = tokens
            .authorize_bind(&Identity::new("ann"), &actor("bob"))
            .expect_err("refused");
        assert!(refused.contains("may not bind bob"), "{refused}");
    }

    #[test]
    fn patterns_match_whole_ids() {
        let p = Pattern::new("a*b*c");
        assert!(p.matches("abc") && p.matches("a-b-c") && p.matches("axxbyyc"));
        assert!(!p.matches("ab") && !p.matches("abcd") && !p.matches("xabc"));
        assert!(Pattern::new("*").matches("anything"));
        assert!(Pattern::new("p-*").matches("p-") && !Pattern::new("p-*").matches("p"));
        assert!(!Pattern::new("a*a").matches("a"));
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let e = TokenTable::parse("t1 ann\nt1 bob\n").expect_err("duplicate token");
        assert_eq!(e.0, 2);
        let e = TokenTable::parse("t1 ann bind=ann\nt2 ann bind=bob\n").expect_err("same name");
        assert_eq!(e.0, 2);
        let e = TokenTable::parse("t1 ann bind=\n").expect_err("empty bind");
        assert_eq!(e.0, 1);
    }
}
