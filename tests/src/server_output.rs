//! Watching a server process the tests started: when it says it is ready, or what it said before
//! it exited.

use std::io::{BufRead, BufReader, Read};

use tokio::sync::oneshot;

/// Reads a server's output on plain threads (so it does not depend on which runtime is alive) and
/// resolves once a line of `ready` contains `phrase`, or, if the server exits first, with what it
/// wrote on both streams. The threads keep draining afterwards, so a chatty server never blocks on
/// a full pipe.
pub(crate) fn watch_for(
    ready: impl Read + Send + 'static,
    phrase: &'static str,
    other: impl Read + Send + 'static,
) -> oneshot::Receiver<Result<(), String>> {
    let (tx, rx) = oneshot::channel();
    let (other_tx, other_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(other).read_to_string(&mut text);
        let _ = other_tx.send(text);
    });
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut seen = Vec::new();
        for line in BufReader::new(ready).lines() {
            let Ok(line) = line else { break };
            if tx.is_some() {
                if line.contains(phrase) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(Ok(()));
                    }
                } else {
                    seen.push(line);
                }
            }
        }
        if let Some(tx) = tx {
            // The server exited before it was ready: its other stream is complete by now.
            seen.extend(other_rx.recv().ok());
            let _ = tx.send(Err(seen.join("\n")));
        }
    });
    rx
}
