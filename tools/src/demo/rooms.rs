//! Opens the sample game rooms of the demo and the bench: the rooms of each game spread over the
//! given nodes in turn, room 0 of every game on the first (the one the demo drains), each with its
//! player Actors joined.

use ferry::{InvalidId, Node, UnitError};

use crate::bots::games::{self, GameKind};

/// Opens `rooms` rooms of every game with `players` players each; returns each player Actor
/// with its game, ready for a bot to bind.
pub async fn open<E: From<UnitError> + From<InvalidId>>(
    nodes: &[Node],
    rooms: usize,
    players: usize,
) -> Result<Vec<(GameKind, ferry::ActorId)>, E> {
    let mut opened = Vec::new();
    for plan in games::lineup(&GameKind::ALL, 0..rooms, players)? {
        let node = &nodes[plan.number % nodes.len()];
        node.create_spot_on(node.id(), plan.game.room_factory(), &plan.room)
            .await?;
        for player in plan.players {
            node.create_actor(plan.game.player_factory(), &player)
                .await?;
            node.join(&player, &plan.room).await?;
            opened.push((plan.game, player));
        }
    }
    Ok(opened)
}
