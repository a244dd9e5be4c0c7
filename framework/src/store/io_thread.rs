//! A thread of the store's own, where its connections run.
//!
//! A unit's turn runs on a runtime thread, and a turn may hold that thread for a while (a long
//! game tick, a blocking call in a handler). A connection task that happens to be next in line on
//! that thread waits with it, and tokio lets no other thread take it over meanwhile: every store
//! call of the node would wait too, past its timeout, and a lease renewal among them. So the
//! network stores run their connections on a single-threaded runtime of their own. Redis sends a
//! call from the caller's task to its connection's task there; etcd runs its calls there whole.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::StoreError;

/// The store's thread. Clones share it; it ends when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct IoThread {
    handle: Handle,
    /// Dropped with the last clone, which ends the thread and every task on it.
    _stop: Arc<oneshot::Sender<()>>,
}

impl IoThread {
    /// Starts the thread, named `name` (as `top` and debuggers show it).
    pub fn start(name: &str) -> Result<Self, StoreError> {
        let failed = |e: std::io::Error| StoreError::InvalidConfig {
            reason: format!("the store's thread could not start ({e}); check the process limits"),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(failed)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                // Ends when every clone is gone (the sender is dropped).
                let _ = runtime.block_on(stopped);
            })
            .map_err(failed)?;
        Ok(IoThread {
            handle,
            _stop: Arc::new(stop),
        })
    }

    /// Runs `call` on the store's thread and waits for its answer.
    pub async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        match self.handle.spawn(call).await {
            Ok(answer) => answer,
            Err(error) => Err(StoreError::Unavailable {
                reason: format!("{op}: the store's thread ended the call ({error})"),
            }),
        }
    }
}
