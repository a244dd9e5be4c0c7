//! The game's node: the host library runs the counter rooms as a production node, configured by
//! `--config FILE` and `FERRY_<KEY>` variables, until SIGTERM drains it.

fn main() -> std::process::ExitCode {
    ferry_host::host::main(my_game::registry)
}
