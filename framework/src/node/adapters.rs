//! The state adapters' own deltas, as pre-copy's seal asks for them ([`Deltas`]): reached by a
//! cell's factory type name, each call contained as the lane contains adapter code, since a
//! panic there must end neither the move nor the node.

use std::panic::{AssertUnwindSafe, catch_unwind};

use ferry_core::relocation::precopy::Deltas;

use super::handle::NodeCore;
use super::lane::panic_text;
use crate::unit::factory::AdapterError;

impl Deltas for NodeCore {
    fn delta(&self, factory: &str, base: &[u8], now: &[u8]) -> Option<Vec<u8>> {
        let found = self.factory(factory)?;
        catch_unwind(AssertUnwindSafe(|| found.delta(base, now))).unwrap_or_else(|panic| {
            let panic = panic_text(&*panic);
            tracing::warn!(factory, %panic, "a state adapter's delta panicked; its blocks are compared instead");
            None
        })
    }

    fn apply(&self, factory: &str, base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
        let found = self
            .factory(factory)
            .ok_or_else(|| format!("no factory {factory:?} is registered here"))?;
        catch_unwind(AssertUnwindSafe(|| found.apply_delta(base, delta)))
            .unwrap_or_else(|panic| {
                Err(AdapterError(format!(
                    "its apply_delta panicked: {}",
                    panic_text(&*panic)
                )))
            })
            .map_err(|error| format!("factory {factory:?}: {error}"))
    }
}
