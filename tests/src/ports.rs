//! Loopback ports for servers and configs the tests write.

use std::net::TcpListener;

/// A loopback TCP port free at the time of asking (the OS picks it; a race with another process
/// taking it meanwhile is possible, and fails that test's start loudly).
pub fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}
