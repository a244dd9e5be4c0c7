//! The docs checked against the code: every `ferry` command line in their shell blocks parses as
//! the real CLI does, and their other code blocks can be found by language for the modules' tests.

use clap::Parser;

/// The pages whose shell blocks show `ferry` commands.
const PAGES: [(&str, &str); 4] = [
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
];

/// The bodies of the code blocks of one language in a page.
pub fn code_blocks<'a>(page: &'a str, language: &str) -> Vec<&'a str> {
    let fence = format!("```{language}\n");
    let mut found = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```").expect("closed block");
        found.push(&body[..end]);
        rest = &body[end + 3..];
    }
    found
}

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
