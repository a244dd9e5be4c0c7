//! The process's log: to stderr, filtered by `RUST_LOG` (default `warn`), as text for a person
//! or as JSON, one object a line, for a log collector.

use serde::Deserialize;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text per event; colours only at a terminal.
    #[default]
    Text,
    /// One JSON object per event and line: `timestamp`, `level`, `target`, `fields` and the
    /// spans it happened in.
    Json,
}

impl LogFormat {
    /// The format's name in the config.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Installs the process's log subscriber. A second call (a subscriber is already installed)
/// changes nothing.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        // Colour codes only for a person at a terminal, not in log files and journals.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    // Err: the application installed its own subscriber first, which it is free to do.
    drop(installed);
}
