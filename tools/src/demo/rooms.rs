//! Opens the sample game rooms of the demo and the bench: the rooms of each game spread over the
//! given nodes in turn, room 0 of every game on the first (the one the demo drains), each with its
//! player Actors joined.

use ferry::{InvalidId, Node, UnitError};

use crate::bots::games::GameKind;

/// Opens `rooms` rooms of every game with `players` players each; returns each player Actor
/// with its game, ready for a bot to bind.
pub async fn open<E: From<UnitError> + From<InvalidId>>(
    nodes: &[Node],
    rooms: usize,
    players: usize,
) -> Result<Vec<(GameKind, ferry::ActorId)>, E> {
    let mut opened = Vec::new();
    for game in GameKind::ALL {
        for r in 0..rooms {
            let node = &nodes[r % nodes.len()];
            let room = game.room(r)?;
            node.create_spot_on(node.id(), game.room_factory(), &room)
                .await?;
            for p in 0..players {
                let player = game.player(r, p)?;
                node.create_actor(game.player_factory(), &player).await?;
                node.join(&player, &room).await?;
                opened.push((game, player));
            }
        }
    }
    Ok(opened)
}
