//! `ferry resume ADDR`: puts a drained node back into service through its admin endpoint, so it
//! takes units again (new rooms, moves, and recovery of a dead node's units).

use clap::Args;

use ferry_host::admin::ClientError;

/// Which node.
#[derive(Args, Debug, Clone)]
pub struct ResumeArgs {
    /// The node's admin endpoint, HOST:PORT (the admin= part of its ready line).
    addr: String,
    #[command(flatten)]
    access: crate::admin_access::AdminArgs,
}

/// Why the node was not put back into service.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The request did not get through, or the node refused it.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// Resumes the node and says what changed.
pub async fn run(args: ResumeArgs) -> Result<(), ResumeError> {
    let client = args.access.client(&args.addr)?;
    let resumed = client.resume().await?;
    if resumed.was == resumed.state {
        println!(
            "node {} at {} was serving already; nothing changed",
            resumed.node,
            client.addr()
        );
    } else {
        println!(
            "node {} at {} is back in service ({} before): it takes units again",
            resumed.node,
            client.addr(),
            resumed.was
        );
    }
    Ok(())
}
