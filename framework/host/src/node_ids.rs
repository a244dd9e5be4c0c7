//! Node ids as operators type them, on the command line or in a config file.

use ferry::NodeId;

/// A node id given on the command line or in a config file that Ferry cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid node id {id:?}: {reason}")]
pub struct BadNodeId {
    /// The id as given.
    pub id: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Checks a node id as an operator typed it.
///
/// Beyond the framework's rule (1 to 255 bytes of UTF-8), ids with whitespace or control
/// characters are refused: they are almost always a typo (`--nodes "a, b"`), and they would make
/// log lines and shell commands ambiguous.
pub fn node_id(text: &str) -> Result<NodeId, BadNodeId> {
    let bad = |reason: String| BadNodeId {
        id: text.to_owned(),
        reason,
    };
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(
            "node ids may not contain spaces or control characters".to_owned()
        ));
    }
    NodeId::new(text).map_err(|_| {
        bad(format!(
            "node ids must be 1 to {} bytes of UTF-8",
            ferry::ids::MAX_ID_BYTES
        ))
    })
}
