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
    // Paths are the config file's directory's, so nothing needs root to try it.
    assert_eq!(
        settings.admin_token,
        Some(ferry_host::config::AdminToken::File(
            Path::new("/etc/my-game/admin.token").to_owned()
        ))
    );
    let gateway = settings.sessions.as_ref().expect("a gateway");
    assert!(
        gateway.websocket.is_some(),
        "a WebSocket listener for browsers"
    );
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

/// This repository's root, where a studio's checkout of it is `../ferry`.
fn repository() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The package name of the crate at `dir`, read from its Cargo.toml.
fn package_name(dir: &Path) -> String {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("no Cargo.toml in {}: {e}", dir.display()));
    let manifest: toml::Table = manifest.parse().expect("a TOML manifest");
    manifest["package"]["name"]
        .as_str()
        .expect("a package name")
        .to_owned()
}

/// Checks that a dependency entry of the guide takes `name` from the checkout the guide has
/// cloned beside the studio's crate, and returns the entry.
fn from_the_checkout<'a>(dependencies: &'a toml::Table, name: &str) -> &'a toml::Table {
    let entry = dependencies[name]
        .as_table()
        .unwrap_or_else(|| panic!("{name} is no crates.io version (it is not published there)"));
    let path = entry["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} comes from a path: {entry:?}"));
    let inside = path
        .strip_prefix("../ferry/")
        .unwrap_or_else(|| panic!("{name}'s path {path} is in the checkout `../ferry`"));
    assert_eq!(
        package_name(&repository().join(inside)),
        name,
        "{path} holds the crate {name}"
    );
    entry
}

#[test]
fn the_guides_cargo_toml_takes_ferry_from_a_checkout_as_this_crate_uses_it() {
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
    let manifest: toml::Table = guide.parse().expect("the guide's Cargo.toml is TOML");
    let deps = manifest["dependencies"].as_table().expect("[dependencies]");
    from_the_checkout(deps, "ferry");
    from_the_checkout(deps, "ferry-host");
    assert!(
        GUIDE.contains("not on crates.io"),
        "the guide says why it takes a checkout"
    );

    // The otlp line of section 3: the same crate, with a feature it has.
    let otlp = GUIDE
        .split('`')
        .find(|span| span.starts_with("ferry-host = {") && span.contains("otlp"))
        .expect("the guide shows the otlp dependency line");
    let line: toml::Table = otlp.parse().expect("the otlp line is TOML");
    let entry = from_the_checkout(&line, "ferry-host");
    assert_eq!(entry["features"].as_array().map(Vec::len), Some(1));
    assert_eq!(entry["features"][0].as_str(), Some("otlp"));
    let host: toml::Table = std::fs::read_to_string(repository().join("framework/host/Cargo.toml"))
        .expect("ferry-host's manifest")
        .parse()
        .expect("TOML");
    assert!(
        host["features"].get("otlp").is_some(),
        "ferry-host has otlp"
    );
}

#[test]
fn the_guides_install_command_installs_the_ferry_command_at_the_tested_versions() {
    let install = GUIDE
        .split('`')
        .find(|span| span.starts_with("cargo install --locked --path ferry/"))
        .expect("the guide says how to install the ferry command, with --locked");
    let path = install.trim_start_matches("cargo install --locked --path ferry/");
    let manifest: toml::Table = std::fs::read_to_string(repository().join(path).join("Cargo.toml"))
        .expect("the installed crate's manifest")
        .parse()
        .expect("TOML");
    let bins = manifest["bin"].as_array().expect("binaries");
    assert!(
        bins.iter().any(|bin| bin["name"].as_str() == Some("ferry")),
        "{install} installs `ferry`"
    );
    // Every build and install the guide shows uses the lock file's versions.
    for span in GUIDE
        .split('`')
        .filter(|span| span.starts_with("cargo install"))
    {
        assert!(span.contains("--locked"), "{span}");
    }
    assert!(
        !GUIDE.contains("<the Ferry repository>"),
        "the guide names no address that does not exist"
    );
}
