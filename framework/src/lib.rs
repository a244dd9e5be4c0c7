//! Ferry: host game servers whose live rooms and players move between hosts while they run.

pub mod ids;
pub mod store;
