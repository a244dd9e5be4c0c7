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
