//! Opens the bots' rooms on running `ferry node` processes through their admin endpoints
//! (`POST /units`): room `R` of every game on endpoint number `R` modulo their count, and each
//! player created on the node of its room and joined to it.

use super::games::RoomPlan;
use ferry_host::admin::wire::{UnitKind, UnitRequest};
use ferry_host::admin::{AdminClient, ClientError};

/// Creates every room of `plans` with its players, spread over `admins`; stops at the first
/// refusal (a room that exists already, a node that does not serve).
pub async fn open(admins: &[AdminClient], plans: &[RoomPlan]) -> Result<(), ClientError> {
    if admins.is_empty() {
        return Ok(());
    }
    for plan in plans {
        let admin = &admins[plan.number % admins.len()];
        let room = UnitRequest {
            kind: UnitKind::Spot,
            factory: plan.game.room_factory().to_owned(),
            id: plan.room.to_string(),
            join: None,
        };
        admin.create_unit(&room).await?;
        for player in &plan.players {
            let player = UnitRequest {
                kind: UnitKind::Actor,
                factory: plan.game.player_factory().to_owned(),
                id: player.to_string(),
                join: Some(plan.room.to_string()),
            };
            admin.create_unit(&player).await?;
        }
    }
    Ok(())
}
