//! The guide's pages as tests read them: the code blocks of one language, to check against the
//! code that reads them.

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

/// A line of a command's output with its figures taken out (`12`, `3.1`, `652 us`, `1.0 ms`
/// become `#`) and its spacing collapsed: what stays the same from one run to the next, to
/// compare the docs' sample output with a real run's.
pub fn without_figures(line: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    for word in line.split_whitespace() {
        let bare = word
            .trim_start_matches('(')
            .trim_end_matches([')', ',', ';']);
        let figure = !bare.is_empty() && bare.chars().all(|c| c.is_ascii_digit() || c == '.');
        let after_figure = words.last().is_some_and(|last| last.contains('#'));
        let unit = matches!(bare, "us" | "ms" | "s" | "B" | "KiB" | "MiB") && after_figure;
        match (figure, unit) {
            (true, _) => words.push(word.replace(bare, "#")),
            // A unit after a figure is part of it: `652 us` and `1.0 ms` read alike.
            (false, true) => {
                if let Some(last) = words.last_mut() {
                    last.push_str(&word.replace(bare, ""));
                }
            }
            _ => words.push(word.to_owned()),
        }
    }
    words.join(" ")
}
