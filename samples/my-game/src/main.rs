//! The game's node: the host library runs the counter rooms as a production node, with the
//! game's admin pages, configured by `--config FILE` and `FERRY_<KEY>` variables, until SIGTERM
//! drains it.

fn main() -> std::process::ExitCode {
    ferry_host::host::main_with_pages(my_game::registry, my_game::admin_pages)
}
