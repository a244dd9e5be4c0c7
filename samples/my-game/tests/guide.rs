//! docs/production.md shows this crate as it is: its Rust blocks are the crate's files, and its
//! node config is one the host library takes.

use std::path::Path;

use ferry_tests::docs::code_blocks;

const GUIDE: &str = include_str!("../../../docs/production.md");

#[test]
fn the_guides_rust_blocks_are_this_crates_files() {
    let lib = include_str!("../src/lib.rs");
    let room = lib
        .split_once("/// The production guide's code blocks")
        .map(|(room, _)| room.trim_end())
        .expect("the guide module closes lib.rs");
    let rust = code_blocks(GUIDE, "rust");
    assert_eq!(rust, [format!("{room}\n")], "the room is src/lib.rs");
    let main = code_blocks(GUIDE, "rust,no_run");
    assert_eq!(
        main,
        [include_str!("../src/main.rs")],
        "the host is src/main.rs"
    );
}

#[test]
fn the_guides_node_config_is_valid_with_the_per_node_keys_from_the_environment() {
    let configs: Vec<&str> = code_blocks(GUIDE, "toml")
        .into_iter()
        .filter(|block| !block.contains("[package]"))
        .collect();
    assert_eq!(configs.len(), 1);
    let env = |var: &str| match var {
        "FERRY_ID" => Some("p1".to_owned()),
        "FERRY_MESH_LISTEN" => Some("10.0.0.11:7000".to_owned()),
        _ => None,
    };
    let settings = ferry_host::config::parse_with_env(
        Path::new("node.toml"),
        Path::new("/etc/my-game"),
        configs[0],
        env,
    )
    .unwrap_or_else(|e| panic!("the guide's config is refused: {e}"));
    assert_eq!(settings.id.as_str(), "p1");
    assert_eq!(settings.mesh_listen.to_string(), "10.0.0.11:7000");
    assert!(settings.admin_token.is_some());
    assert!(settings.admin_tls);
    assert_eq!(settings.log_format, ferry_host::logs::LogFormat::Json);
}

/// The names under `[dependencies]` in a Cargo.toml text, in order.
fn dependencies(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[dependencies]")
        .skip(1)
        .take_while(|line| !line.trim().starts_with('['))
        .filter_map(|line| line.split(['=', '.', ' ']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_guides_cargo_toml_asks_for_what_this_crate_uses() {
    let guide = code_blocks(GUIDE, "toml")
        .into_iter()
        .find(|block| block.contains("[package]"))
        .expect("the guide shows a Cargo.toml");
    assert!(guide.contains("name = \"my-game\""), "{guide}");
    assert_eq!(
        dependencies(guide),
        dependencies(include_str!("../Cargo.toml")),
        "the guide's dependencies are this crate's"
    );
    let minor = env!("CARGO_PKG_VERSION")
        .rsplit_once('.')
        .map(|(minor, _)| minor);
    let wanted = format!("ferry = \"{}\"", minor.expect("a semver version"));
    assert!(
        guide.contains(&wanted),
        "the guide asks for {wanted}: {guide}"
    );
}
