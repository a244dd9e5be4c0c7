//! The process's log: to stderr, filtered by `RUST_LOG` (by default [`NODE_FILTER`] for a node:
//! what it does, such as its drains, moves and stop, and every other crate's warnings; `warn`
//! for other commands), as text for a person
//! or as JSON, one object a line, for a log collector; and, with the `otlp` feature and an
//! `otlp_endpoint`, the relocation spans (`drain`, `relocation`) exported over OTLP. The error
//! a process ends with is written in the same format ([`print_error`]).

use std::sync::OnceLock;

use serde::Deserialize;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use ferry::NodeId;

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

/// A node's log filter without `RUST_LOG`: Ferry's own events from `info` up (its start, its
/// peers, each drain and move, its stop), what operators expect to read, and the warnings of
/// everything else.
pub const NODE_FILTER: &str = "warn,ferry=info";

/// The format of the log this module installed, once it has.
static INSTALLED: OnceLock<LogFormat> = OnceLock::new();

/// What the log set-up holds while the process runs; dropping it sends the spans not yet sent.
#[must_use = "dropping it stops the span export"]
#[derive(Default)]
pub struct Logs {
    /// Held for its drop, which flushes the export.
    #[cfg(feature = "otlp")]
    _traces: Option<crate::traces::Traces>,
}

/// Why the log could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    /// `otlp_endpoint` is set, but this binary has no exporter.
    #[error(
        "`otlp_endpoint` is set, but this program was built without the `otlp` feature of \
         ferry-host; build it with that feature, or remove the key"
    )]
    NoExporter,
    /// The OTLP exporter could not be built.
    #[cfg(feature = "otlp")]
    #[error(transparent)]
    Traces(#[from] crate::traces::TracesError),
}

/// Installs the log of a node: lines of `format`, and the spans exported to `otlp_endpoint`
/// naming `node`, if it is set (a node's `log_format` and `otlp_endpoint`). A subscriber the
/// application installed first stays, and this one is not installed.
pub fn install(
    format: LogFormat,
    otlp_endpoint: Option<&str>,
    node: &NodeId,
) -> Result<Logs, LogsError> {
    #[cfg(feature = "otlp")]
    {
        let traces = match otlp_endpoint {
            Some(endpoint) => Some(crate::traces::Traces::new(endpoint, node)?),
            None => None,
        };
        let layer = traces.as_ref().map(crate::traces::Traces::layer);
        subscribe(format, NODE_FILTER, layer);
        Ok(Logs { _traces: traces })
    }
    #[cfg(not(feature = "otlp"))]
    {
        let _ = node;
        if otlp_endpoint.is_some() {
            return Err(LogsError::NoExporter);
        }
        subscribe(
            format,
            NODE_FILTER,
            None::<tracing_subscriber::layer::Identity>,
        );
        Ok(Logs::default())
    }
}

/// Installs a log of `format` alone (no span export), warnings only unless `RUST_LOG` says
/// otherwise, for commands that are no node.
pub fn init(format: LogFormat) {
    subscribe(format, "warn", None::<tracing_subscriber::layer::Identity>);
}

/// The stderr log of `format`, filtered by `RUST_LOG` or else `default`, with `extra` beside it,
/// as the process's subscriber.
fn subscribe<L>(format: LogFormat, default: &str, extra: Option<L>)
where
    L: Layer<tracing_subscriber::Registry> + Send + Sync,
{
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        // Colour codes only for a person at a terminal, not in log files and journals.
        LogFormat::Text => lines
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed(),
        LogFormat::Json => lines.json().with_ansi(false).boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(extra)
        .with(lines.with_filter(filter))
        .try_init();
    // Err: the application installed its own subscriber first, which it is free to do.
    if installed.is_ok() {
        let _ = INSTALLED.set(format);
    }
}

/// Writes the error a process ends with to stderr, as one line: `error: ...` as text, or, once
/// a JSON log is installed, as one more JSON event of it (level `ERROR`), so that a collector
/// reading one object a line reads this one too. Errors before the log is installed (a config
/// that cannot be read) are text.
pub fn print_error(error: &str) {
    let message = one_line(error);
    if INSTALLED.get() != Some(&LogFormat::Json) {
        eprintln!("error: {message}");
        return;
    }
    let mut timestamp = String::new();
    // Writing to a String cannot fail.
    let _ = SystemTime.format_time(&mut Writer::new(&mut timestamp));
    let event = serde_json::json!({
        "timestamp": timestamp,
        "level": "ERROR",
        "fields": {"message": message},
        "target": module_path!(),
    });
    eprintln!("{event}");
}

/// An error as one line: scripts and supervisors read errors line by line.
pub fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
