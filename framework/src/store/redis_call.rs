//! One call to redis: bounded by the store's timeout, its failure given a [`StoreError`] type that
//! says whether the store may have done it, and whether another server may be master now.

use std::future::Future;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};

use super::StoreError;

/// The error code the store's epoch guard answers with: the store lost writes or restarted empty.
const RESET_CODE: &str = "FERRYRESET";

/// The error codes of the master check that opens every script behind sentinels: nothing was
/// done, and another server may be master.
const NOT_MASTER_CODES: [&str; 2] = ["FERRYNOTMASTER", "FERRYFEW"];

/// Runs one redis call under the store's timeout and gives its failure a [`StoreError`] type.
pub(super) async fn bounded<T>(
    op: &'static str,
    after: Duration,
    call: impl Future<Output = RedisResult<T>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(after, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(classify(op, after, &error)),
        Err(_elapsed) => Err(StoreError::Timeout { op, after }),
    }
}

/// The [`StoreError`] a failed call to redis is.
pub(super) fn classify(op: &'static str, after: Duration, error: &RedisError) -> StoreError {
    if error.is_timeout() {
        return StoreError::Timeout { op, after };
    }
    if error.code() == Some(RESET_CODE) {
        return StoreError::Reset {
            reason: error.detail().unwrap_or("the guard refused").to_owned(),
        };
    }
    if let Some(code) = error.code().filter(|code| NOT_MASTER_CODES.contains(code)) {
        return StoreError::Unavailable {
            reason: format!(
                "{op}: {code} {}; behind sentinels the next call asks them for the master again",
                error.detail().unwrap_or_default()
            ),
        };
    }
    let unreachable = error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
        || matches!(
            error.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
            )
        );
    if unreachable {
        StoreError::Unavailable {
            reason: format!("{op}: {error}"),
        }
    } else {
        StoreError::Rejected {
            op,
            reason: error.to_string(),
        }
    }
}
