//! The docs checked against the code: every `ferry` command line in their shell blocks parses as
//! the real CLI does, and the runbook's JSON, factories and metrics are the node's.

use clap::Parser;
use ferry_host::admin::wire::{self, ShutdownReport, StatusBody, UnitCreated};
use ferry_tests::docs::code_blocks;

/// The pages whose shell blocks show `ferry` commands.
const PAGES: [(&str, &str); 5] = [
    ("README.md", include_str!("../../README.md")),
    (
        "docs/getting-started.md",
        include_str!("../../docs/getting-started.md"),
    ),
    ("docs/demo.md", include_str!("../../docs/demo.md")),
    (
        "docs/operations.md",
        include_str!("../../docs/operations.md"),
    ),
    (
        "docs/production.md",
        include_str!("../../docs/production.md"),
    ),
];

#[test]
fn every_ferry_command_in_the_docs_parses() {
    for (name, page) in PAGES {
        let mut commands = 0;
        for block in code_blocks(page, "sh") {
            for line in block.lines().filter(|l| l.starts_with("ferry ")) {
                let words = line
                    .split('#')
                    .next()
                    .unwrap_or_default()
                    .split_whitespace();
                if let Err(error) = crate::Cli::try_parse_from(words) {
                    panic!("{name}: `{line}` does not parse: {error}");
                }
                commands += 1;
            }
        }
        assert!(commands > 0, "{name} shows no ferry command");
    }
}

const RUNBOOK: &str = include_str!("../../docs/operations.md");

/// The bodies of the runbook's code blocks of one language.
fn blocks(language: &str) -> Vec<&'static str> {
    code_blocks(RUNBOOK, language)
}

#[test]
fn the_runbooks_json_is_what_the_endpoint_takes_and_answers() {
    let examples = blocks("json");
    assert_eq!(examples.len(), 7);
    for example in examples {
        let fits = serde_json::from_str::<StatusBody>(example).is_ok()
            || serde_json::from_str::<ShutdownReport>(example).is_ok()
            || serde_json::from_str::<wire::UnitRequest>(example).is_ok()
            || serde_json::from_str::<UnitCreated>(example).is_ok()
            || serde_json::from_str::<wire::Resumed>(example).is_ok()
            || serde_json::from_str::<wire::RelocateRequest>(example)
                .is_ok_and(|r| r.options().is_ok())
            || serde_json::from_str::<wire::ShutdownRequest>(example).is_ok();
        assert!(fits, "the runbook's JSON fits no route: {example}");
    }
}

#[test]
fn the_factories_the_runbook_names_are_those_every_node_registers() {
    let (_, after) = RUNBOOK
        .split_once("registers every\nsample: ")
        .expect("the runbook lists the factories of `ferry node`");
    let (list, _) = after.split_once(')').expect("the list ends");
    let named: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
    assert_eq!(named.len(), 8, "{named:?}");
    let registry = crate::bots::games::registry(crate::bots::games::StandbyChoice::None);
    for name in named {
        assert!(registry.info(name).is_some(), "{name} is not registered");
    }
}

#[test]
fn every_metric_in_the_runbook_is_recorded() {
    let sources = [
        include_str!("../../framework/host/src/admin/server.rs"),
        include_str!("../../framework/src/node/source.rs"),
        include_str!("../../framework/src/node/lane/mod.rs"),
        include_str!("../../framework/src/mesh/link.rs"),
        include_str!("../../framework/src/node/losses.rs"),
        include_str!("../../framework/src/node/routing.rs"),
    ];
    let named: Vec<&str> = RUNBOOK
        .split('`')
        .filter(|word| word.starts_with("ferry_") && !word.contains(' '))
        .collect();
    assert!(named.len() >= 14, "{named:?}");
    for metric in named {
        let quoted = format!("\"{metric}\"");
        assert!(
            sources.iter().any(|s| s.contains(&quoted)),
            "{metric} is in the runbook but recorded nowhere"
        );
    }
}

#[test]
fn every_metric_in_the_runbook_has_help_text_and_no_other() {
    let mut named: Vec<&str> = RUNBOOK
        .lines()
        .filter_map(|line| line.strip_prefix("| `ferry_"))
        .filter_map(|rest| rest.split_once('`').map(|(name, _)| name))
        .collect();
    let mut described: Vec<&str> = ferry_host::metrics::METRICS
        .iter()
        .map(|(_, name, _)| name.trim_start_matches("ferry_"))
        .collect();
    named.sort_unstable();
    described.sort_unstable();
    assert_eq!(
        named, described,
        "the runbook's table is the metrics the host describes"
    );
}

/// The lines of the docs that show what `ferry drain` and `ferry shutdown` print once they
/// succeeded: in text blocks, or in backquotes (where `(...)` stands for the rest of the line).
fn shown_results(page: &str) -> Vec<String> {
    let mut lines: Vec<String> = code_blocks(page, "text")
        .into_iter()
        .flat_map(str::lines)
        .map(str::to_owned)
        .collect();
    lines.extend(page.split('`').skip(1).step_by(2).map(str::to_owned));
    lines
        .into_iter()
        .filter(|line| line.starts_with("relocated: ") || line.starts_with("stopped: "))
        .filter(|line| line != "relocated: ...")
        .collect()
}

#[test]
fn the_drain_and_shutdown_results_the_docs_show_are_what_the_commands_print() {
    use ferry_tests::docs::without_figures;
    let report = |moved| wire::DrainReport {
        outcome: wire::Outcome::Relocated,
        reason: None,
        moved,
        bytes: 2460,
        stayed: Vec::new(),
        undecided: Vec::new(),
        elapsed_ms: 96,
        drained_peers: Vec::new(),
    };
    let printed = [
        crate::drain_cmd::relocated("127.0.0.1:7100", &report(6)),
        crate::drain_cmd::relocated("127.0.0.1:7100", &report(0)),
        crate::shutdown_cmd::stopped("127.0.0.1:7100", 6),
        crate::shutdown_cmd::stopped("127.0.0.1:7100", 0),
    ]
    .map(|line| without_figures(&line.replace("127.0.0.1:7100", "ADDR")));
    let mut shown = 0;
    for (name, page) in PAGES {
        for line in shown_results(page) {
            let line = line.trim_end_matches(" (...)");
            let addr = line
                .split_whitespace()
                .find(|w| w.contains(':') && w.contains('.'));
            let line = without_figures(&addr.map_or(line.to_owned(), |a| line.replace(a, "ADDR")));
            assert!(
                printed.iter().any(|p| p.starts_with(&line)),
                "{name} shows `{line}`, which no command prints: {printed:#?}"
            );
            shown += 1;
        }
    }
    assert!(shown >= 3, "the docs show the commands' results");
}
