//! Who may use the admin endpoint: a bearer token in `Authorization: Bearer <token>`.
//!
//! With a token set, every route that changes anything (every method but GET and HEAD) needs it,
//! and so does every route at all when the endpoint listens beyond loopback. A few reads never
//! need it ([`PUBLIC`]): the probes, since a kubelet cannot hold a secret in a probe and they say
//! no more than whether the node serves; the files of the cluster view and the play page, which
//! hold no data and which a browser loads before it can send any header (the cluster view then
//! sends the token with each request itself); and what the play page reads, which a player holds
//! no admin token for and which says no more than where a room runs. A CORS preflight (`OPTIONS`)
//! never carries a token and changes nothing, so it needs none either. A node without a token
//! listens on loopback only (the config refuses anything else), for development on one machine.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::wire::ErrorBody;

/// The routes any caller may read: the probes, and the pages' files and what the play page
/// reads (the module says why).
pub const PUBLIC: [&str; 8] = [
    "/healthz",
    "/readyz",
    "/cluster",
    "/cluster/view.js",
    "/play",
    "/play/play.js",
    "/play/ferry-client.js",
    "/play/config",
];

/// The public routes under a prefix: where a room runs, for the play page.
const PUBLIC_UNDER: &str = "/play/rooms/";

/// Whether anyone may `GET` `path`.
fn public(path: &str) -> bool {
    PUBLIC.contains(&path)
        || path
            .strip_prefix(PUBLIC_UNDER)
            .is_some_and(|rest| !rest.contains('/'))
}

/// What the endpoint asks of callers.
#[derive(Clone, Default)]
pub struct Access {
    token: Option<Arc<[u8]>>,
    reads_too: bool,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself: this lands in logs.
        f.debug_struct("Access")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("reads_too", &self.reads_too)
            .finish()
    }
}

impl Access {
    /// No token: anyone who can reach the endpoint may use it (loopback only).
    pub fn open() -> Self {
        Access::default()
    }

    /// `token` for every changing route, and for reads too when `reads_too` (an endpoint that
    /// listens beyond loopback).
    pub fn token(token: impl Into<Vec<u8>>, reads_too: bool) -> Self {
        Access {
            token: Some(token.into().into()),
            reads_too,
        }
    }

    /// Whether a request of `method` to `path` needs the token.
    fn needs_token(&self, method: &Method, path: &str) -> bool {
        if self.token.is_none() || *method == Method::OPTIONS {
            return false;
        }
        if public(path) && matches!(*method, Method::GET | Method::HEAD) {
            return false;
        }
        self.reads_too || !matches!(*method, Method::GET | Method::HEAD)
    }

    /// Whether `header` carries the token, compared in constant time.
    fn admits(&self, header: Option<&HeaderValue>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(given) = header
            .and_then(|h| h.as_bytes().strip_prefix(b"Bearer "))
            .map(<[u8]>::trim_ascii)
        else {
            return false;
        };
        given.len() == token.len()
            && given
                .iter()
                .zip(token.iter())
                .fold(0_u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

/// Refuses, with 401, a request that needs the token and does not carry it.
pub async fn guard(State(access): State<Access>, request: Request, next: Next) -> Response {
    if !access.needs_token(request.method(), request.uri().path()) {
        return next.run(request).await;
    }
    let given = request.headers().get(header::AUTHORIZATION);
    if access.admits(given) {
        return next.run(request).await;
    }
    let error = if given.is_some() {
        "the admin token is wrong; pass the token in the node's `admin_token_file` (or \
         FERRY_ADMIN_TOKEN) with --admin-token-file or FERRY_ADMIN_TOKEN"
    } else {
        "this route needs the admin token: send `Authorization: Bearer <token>` (the `ferry` \
         commands take --admin-token-file or FERRY_ADMIN_TOKEN)"
    };
    tracing::warn!(method = %request.method(), path = %request.uri().path(), "an admin request without the right token was refused");
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, "Bearer"),
            // The cluster view on another node can then tell "asks for the token" from "down".
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        ],
        axum::Json(ErrorBody {
            error: error.to_owned(),
        }),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_needed_for_changes_and_beyond_loopback_for_reads() {
        let loopback = Access::token("s3cret", false);
        assert!(loopback.needs_token(&Method::POST, "/relocate"));
        assert!(!loopback.needs_token(&Method::GET, "/status"));
        let wide = Access::token("s3cret", true);
        assert!(wide.needs_token(&Method::GET, "/status"));
        assert!(wide.needs_token(&Method::GET, "/metrics"));
        assert!(!wide.needs_token(&Method::GET, "/readyz"));
        assert!(!wide.needs_token(&Method::GET, "/cluster"));
        assert!(!wide.needs_token(&Method::GET, "/play/rooms/c1"));
        assert!(!wide.needs_token(&Method::OPTIONS, "/cluster/node"));
        assert!(wide.needs_token(&Method::GET, "/cluster/node"));
        assert!(wide.needs_token(&Method::GET, "/cluster/moves"));
        assert!(wide.needs_token(&Method::GET, "/play/rooms/c1/x"));
        assert!(wide.needs_token(&Method::POST, "/play"));
        assert!(!Access::open().needs_token(&Method::POST, "/shutdown"));
    }

    #[test]
    fn only_the_exact_token_is_admitted() {
        let access = Access::token("s3cret", true);
        let admits = |v: &str| access.admits(Some(&HeaderValue::from_str(v).expect("header")));
        assert!(admits("Bearer s3cret"));
        assert!(!admits("Bearer s3cre"));
        assert!(!admits("Bearer s3cret2"));
        assert!(!admits("Basic s3cret"));
        assert!(!admits("s3cret"));
        assert!(!access.admits(None));
    }
}
