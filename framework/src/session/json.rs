//! The client protocol's frames as JSON, one per WebSocket text message (docs/client-protocol.md
//! is the spec). They are the frames of [`super::wire`], field for field; an application message
//! rides inside as serde's JSON form of its type, under `message`.
//!
//! A client frame is read in two steps, its `type` first, so an unknown type is told apart from a
//! malformed frame, and its `message` is kept as the client's JSON text: the gateway turns it into
//! the bound Actor's message type when it forwards it.

use serde::Serialize;
use serde_json::value::RawValue;

#[cfg(any(test, feature = "websocket"))]
use super::wire::ClientFrame;
use super::wire::{AnnouncedLimits, CloseCode, ServerFrame};
use crate::ids::{ActorId, NodeId};

/// A client frame as read, before its `type` says which fields it needs.
#[cfg(any(test, feature = "websocket"))]
#[derive(serde::Deserialize)]
struct Incoming<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    version: Option<u16>,
    token: Option<String>,
    actor: Option<ActorId>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
}

/// Reads one client frame from a text message; an input's payload is its `message` as JSON text.
/// A frame it cannot read is refused with the close code and reason its client is told.
#[cfg(any(test, feature = "websocket"))]
pub(crate) fn client_frame(text: &str) -> Result<ClientFrame, (CloseCode, String)> {
    let malformed = |reason: String| (CloseCode::Malformed, reason);
    let frame: Incoming<'_> = serde_json::from_str(text).map_err(|e| {
        malformed(format!(
            "malformed frame: {e}; send one JSON object per text message"
        ))
    })?;
    let missing = |field: &str| {
        malformed(format!(
            "malformed frame: a `{}` frame needs `{field}`",
            frame.kind
        ))
    };
    let actor = || frame.actor.clone().ok_or_else(|| missing("actor"));
    Ok(match &*frame.kind {
        "hello" => ClientFrame::Hello {
            version: frame.version.ok_or_else(|| missing("version"))?,
            token: bytes::Bytes::from(frame.token.clone().ok_or_else(|| missing("token"))?),
        },
        "bind" => ClientFrame::Bind { actor: actor()? },
        "unbind" => ClientFrame::Unbind { actor: actor()? },
        "input" => ClientFrame::Input {
            actor: actor()?,
            payload: bytes::Bytes::copy_from_slice(
                frame
                    .message
                    .ok_or_else(|| missing("message"))?
                    .get()
                    .as_bytes(),
            ),
        },
        "bye" => ClientFrame::Bye,
        other => {
            return Err((
                CloseCode::UnknownFrame,
                format!(
                    "frame type {other:?} is unknown; this gateway speaks client protocol \
                     version {}",
                    super::wire::PROTOCOL_VERSION
                ),
            ));
        }
    })
}

/// A gateway frame as written.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Outgoing<'a> {
    Welcome {
        session: String,
        node: &'a NodeId,
        limits: &'a AnnouncedLimits,
    },
    Bound {
        actor: &'a ActorId,
    },
    BindRefused {
        actor: &'a ActorId,
        reason: &'a str,
    },
    Unbound {
        actor: &'a ActorId,
        reason: &'a str,
    },
    Push {
        actor: &'a ActorId,
        seq: u64,
        message: &'a RawValue,
    },
    Closing {
        code: CloseCode,
        retryable: bool,
        reason: &'a str,
    },
    Delivered {
        actor: &'a ActorId,
        inputs: u64,
    },
    Undelivered {
        actor: &'a ActorId,
        inputs: u64,
    },
}

/// Why a gateway frame could not be written as JSON.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JsonFrameError {
    /// A push's payload is not JSON text (its Actor encoded it for another kind of client).
    #[error("a push from {actor} is not JSON: {reason}")]
    Push {
        /// The Actor whose push it was.
        actor: ActorId,
        /// What the parser said.
        reason: String,
    },
    /// serde_json refused the frame.
    #[error("the frame could not be written as JSON: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Writes one gateway frame as the text of a WebSocket message.
pub(crate) fn server_frame(frame: &ServerFrame) -> Result<String, JsonFrameError> {
    let raw;
    let out = match frame {
        ServerFrame::Welcome {
            session,
            node,
            limits,
        } => Outgoing::Welcome {
            session: session.to_string(),
            node,
            limits,
        },
        ServerFrame::Bound { actor } => Outgoing::Bound { actor },
        ServerFrame::BindRefused { actor, reason } => Outgoing::BindRefused { actor, reason },
        ServerFrame::Unbound { actor, reason } => Outgoing::Unbound { actor, reason },
        ServerFrame::Push {
            actor,
            seq,
            payload,
        } => {
            let push_error = |reason: String| JsonFrameError::Push {
                actor: actor.clone(),
                reason,
            };
            let text = std::str::from_utf8(payload).map_err(|e| push_error(e.to_string()))?;
            raw = serde_json::from_str::<&RawValue>(text).map_err(|e| push_error(e.to_string()))?;
            Outgoing::Push {
                actor,
                seq: *seq,
                message: raw,
            }
        }
        ServerFrame::Closing { code, reason } => Outgoing::Closing {
            code: *code,
            retryable: code.retryable(),
            reason,
        },
        ServerFrame::Delivered { actor, inputs } => Outgoing::Delivered {
            actor,
            inputs: *inputs,
        },
        ServerFrame::Undelivered { actor, inputs } => Outgoing::Undelivered {
            actor,
            inputs: *inputs,
        },
    };
    Ok(serde_json::to_string(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionId;
    use bytes::Bytes;

    fn actor(id: &str) -> ActorId {
        ActorId::new(id).unwrap()
    }

    fn bad_code(text: &str) -> Option<CloseCode> {
        match client_frame(text) {
            Err((code, _)) => Some(code),
            _ => None,
        }
    }

    #[test]
    fn client_frames_read_with_the_message_kept_as_its_json_text() {
        assert_eq!(
            client_frame(r#"{"type":"hello","version":1,"token":"t-1"}"#).ok(),
            Some(ClientFrame::Hello {
                version: 1,
                token: Bytes::from_static(b"t-1")
            })
        );
        assert_eq!(
            client_frame(r#"{"type":"bind","actor":"p1"}"#).ok(),
            Some(ClientFrame::Bind { actor: actor("p1") })
        );
        assert_eq!(
            client_frame(r#"{"type":"input","actor":"p1","message":{"Say": "hi"}}"#).ok(),
            Some(ClientFrame::Input {
                actor: actor("p1"),
                payload: Bytes::from_static(br#"{"Say": "hi"}"#)
            })
        );
        assert_eq!(
            client_frame(r#"{"type":"bye"}"#).ok(),
            Some(ClientFrame::Bye)
        );
    }

    #[test]
    fn unknown_types_and_malformed_frames_have_their_own_codes() {
        assert_eq!(
            bad_code(r#"{"type":"teleport"}"#),
            Some(CloseCode::UnknownFrame)
        );
        assert_eq!(bad_code("not json"), Some(CloseCode::Malformed));
        assert_eq!(bad_code(r#"{"actor":"p1"}"#), Some(CloseCode::Malformed));
        assert_eq!(bad_code(r#"{"type":"bind"}"#), Some(CloseCode::Malformed));
        assert_eq!(
            bad_code(r#"{"type":"input","actor":"p1"}"#),
            Some(CloseCode::Malformed)
        );
        assert_eq!(
            bad_code(r#"{"type":"bind","actor":""}"#),
            Some(CloseCode::Malformed)
        );
    }

    #[test]
    fn server_frames_write_as_the_spec_shows() {
        let push = ServerFrame::Push {
            actor: actor("p1"),
            seq: 7,
            payload: Bytes::from_static(br#"{"seq":3,"text":"hi"}"#),
        };
        assert_eq!(
            server_frame(&push).unwrap(),
            r#"{"type":"push","actor":"p1","seq":7,"message":{"seq":3,"text":"hi"}}"#
        );
        let welcome = ServerFrame::Welcome {
            session: SessionId(0xab),
            node: NodeId::new("n1").unwrap(),
            limits: AnnouncedLimits {
                max_frame: 100,
                rate_per_second: 2,
                rate_burst: 3,
            },
        };
        assert_eq!(
            server_frame(&welcome).unwrap(),
            r#"{"type":"welcome","session":"00000000000000ab","node":"n1","limits":{"max_frame":100,"rate_per_second":2,"rate_burst":3}}"#
        );
        let closing = ServerFrame::Closing {
            code: CloseCode::SealTimeout,
            reason: "late".into(),
        };
        assert_eq!(
            server_frame(&closing).unwrap(),
            r#"{"type":"closing","code":"seal_timeout","retryable":true,"reason":"late"}"#
        );
        let delivered = ServerFrame::Delivered {
            actor: actor("p1"),
            inputs: 12,
        };
        assert_eq!(
            server_frame(&delivered).unwrap(),
            r#"{"type":"delivered","actor":"p1","inputs":12}"#
        );
        let undelivered = ServerFrame::Undelivered {
            actor: actor("p1"),
            inputs: 14,
        };
        assert_eq!(
            server_frame(&undelivered).unwrap(),
            r#"{"type":"undelivered","actor":"p1","inputs":14}"#
        );
        let not_json = ServerFrame::Push {
            actor: actor("p1"),
            seq: 0,
            payload: Bytes::from_static(&[0, 1, 2]),
        };
        assert!(matches!(
            server_frame(&not_json),
            Err(JsonFrameError::Push { .. })
        ));
    }

    /// The shared protocol vectors (docs/client-protocol-vectors.json), which the TypeScript and C#
    /// clients' tests read too: the gateway writes each gateway frame as they show it, reads each
    /// client frame as the call they name, refuses what they say it refuses, and has their close
    /// codes. The clients' half (reading gateway frames, refusing malformed ones) is theirs to check.
    #[test]
    fn the_shared_protocol_vectors_hold_for_the_gateway() {
        use serde_json::Value;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/client-protocol-vectors.json"
        );
        let text = std::fs::read_to_string(path).expect("the vectors file");
        let vectors: Value = serde_json::from_str(&text).expect("the vectors are JSON");
        let rows = |key: &str| vectors[key].as_array().expect(key).clone();
        let text_of = |row: &Value, key: &str| row[key].as_str().expect(key).to_owned();
        let code_of = |row: &Value| -> CloseCode {
            serde_json::from_value(row["code"].clone()).expect("a close code")
        };

        let codes = rows("close_codes");
        for (n, row) in codes.iter().enumerate() {
            let code = code_of(row);
            assert_eq!(Some(u64::from(code.to_u32())), row["n"].as_u64(), "{row}");
            assert_eq!(CloseCode::from_u64(n as u64), Some(code), "{row}");
            assert_eq!(Some(code.retryable()), row["retryable"].as_bool(), "{row}");
        }
        assert_eq!(CloseCode::from_u64(codes.len() as u64), None);

        for row in rows("close_statuses") {
            let status = row["status"].as_u64().expect("status");
            let code = status.checked_sub(4000).and_then(CloseCode::from_u64);
            let expected = match &row["code"] {
                Value::Null => None,
                _ => Some(code_of(&row)),
            };
            assert_eq!(code, expected, "{row}");
            let retryable = code.is_none_or(|code| code.retryable());
            assert_eq!(Some(retryable), row["retryable"].as_bool(), "{row}");
        }

        for row in rows("client_frames") {
            let expected = match row["call"].as_str() {
                Some("hello") => ClientFrame::Hello {
                    version: crate::session::wire::PROTOCOL_VERSION,
                    token: Bytes::from(text_of(&row, "token")),
                },
                Some("bind") => ClientFrame::Bind {
                    actor: actor(&text_of(&row, "actor")),
                },
                Some("unbind") => ClientFrame::Unbind {
                    actor: actor(&text_of(&row, "actor")),
                },
                Some("input") => ClientFrame::Input {
                    actor: actor(&text_of(&row, "actor")),
                    payload: Bytes::from(row["message"].to_string()),
                },
                Some("bye") => ClientFrame::Bye,
                other => panic!("a vector calls {other:?}"),
            };
            assert_eq!(client_frame(&row["frame"].to_string()).ok(), Some(expected));
        }

        for row in rows("gateway_refuses") {
            assert_eq!(
                bad_code(&text_of(&row, "text")),
                Some(code_of(&row)),
                "{row}"
            );
        }

        let mut written = 0;
        for row in rows("server_frames") {
            if row.get("malformed").is_some() {
                continue;
            }
            let f = &row["frame"];
            let frame = match f["type"].as_str() {
                Some("welcome") => ServerFrame::Welcome {
                    session: SessionId(
                        u64::from_str_radix(&text_of(f, "session"), 16).expect("a session id"),
                    ),
                    node: NodeId::new(text_of(f, "node")).expect("a node id"),
                    limits: serde_json::from_value(f["limits"].clone()).expect("limits"),
                },
                Some("bound") => ServerFrame::Bound {
                    actor: actor(&text_of(f, "actor")),
                },
                Some("bind_refused") => ServerFrame::BindRefused {
                    actor: actor(&text_of(f, "actor")),
                    reason: text_of(f, "reason"),
                },
                Some("unbound") => ServerFrame::Unbound {
                    actor: actor(&text_of(f, "actor")),
                    reason: text_of(f, "reason"),
                },
                Some("push") => ServerFrame::Push {
                    actor: actor(&text_of(f, "actor")),
                    seq: f["seq"].as_u64().expect("seq"),
                    payload: Bytes::from(f["message"].to_string()),
                },
                Some("delivered") => ServerFrame::Delivered {
                    actor: actor(&text_of(f, "actor")),
                    inputs: f["inputs"].as_u64().expect("inputs"),
                },
                Some("undelivered") => ServerFrame::Undelivered {
                    actor: actor(&text_of(f, "actor")),
                    inputs: f["inputs"].as_u64().expect("inputs"),
                },
                Some("closing") => ServerFrame::Closing {
                    code: code_of(f),
                    reason: text_of(f, "reason"),
                },
                other => panic!("a vector has the gateway frame {other:?}"),
            };
            let text = server_frame(&frame).expect("the frame is written");
            let as_json: Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(&as_json, f, "{text}");
            written += 1;
        }
        assert!(written > 0);
    }
}
