//! Structured logs: JSON in containers, pretty in a terminal; `RUST_LOG`
//! overrides the default filter. Text from the network reaches a log line
//! only through [`bounded`].

use std::borrow::Cow;

use tracing_subscriber::EnvFilter;

const DEFAULT_FILTER: &str = "info,sqlx=warn";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Where log lines go: a service logs to stdout; a command whose stdout is
/// its answer (a JSON line, a listing) logs to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTo {
    Stdout,
    Stderr,
}

pub fn init(format: LogFormat, to: LogTo) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let writer = match to {
        LogTo::Stdout => tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stdout),
        LogTo::Stderr => tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
    // Already initialised (tests): keep the first subscriber.
    let _ = result;
}

/// Most bytes of one network-supplied field (a path, a header value) that a
/// log line carries.
pub const MAX_LOGGED_BYTES: usize = 256;

/// Most bytes of an error's cause chain in a log line: a database error's
/// message may quote the value it refused.
pub const MAX_LOGGED_ERROR_BYTES: usize = 2048;

/// `text` as a log field: at most [`MAX_LOGGED_BYTES`] (cut at a character
/// boundary), then `…(N bytes)` giving the full length when it was cut.
pub fn bounded(text: &str) -> Cow<'_, str> {
    bounded_to(text, MAX_LOGGED_BYTES)
}

/// `text` cut to at most `limit` bytes, marked as [`bounded`] marks it.
pub fn bounded_to(text: &str, limit: usize) -> Cow<'_, str> {
    if text.len() <= limit {
        return Cow::Borrowed(text);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…({} bytes)", &text[..end], text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_fields_are_cut_and_marked_short_ones_kept() {
        assert_eq!(bounded("/webhooks/stripe"), "/webhooks/stripe");
        let long = format!("/webhooks/{}", "A".repeat(30_000));
        let logged = bounded(&long);
        assert!(logged.len() < MAX_LOGGED_BYTES + 20, "{}", logged.len());
        assert!(logged.ends_with("…(30010 bytes)"), "{logged}");
        // Never inside a character.
        let wide = "é".repeat(200);
        assert!(bounded(&wide).starts_with(&"é".repeat(128)));
    }
}
