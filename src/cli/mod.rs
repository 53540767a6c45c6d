//! Operator commands. They call the same library entry points as the server
//! and write to the given output, so tests can read what they print. Each
//! command's arguments are defined beside it; [`args`] is the parser.

pub mod args;
pub mod config;
pub mod dispatch;
pub mod doctor;
pub mod drill;
pub mod erase;
pub mod events;
pub mod explain;
mod import_file;
pub mod outbox;
pub mod prune;
pub mod reconcile;
pub mod retention;
pub mod send;
pub mod sweep;

use std::borrow::Cow;
use std::io::Write;
use std::time::Duration;

pub use args::{Cli, Command, read};

use crate::telemetry;

/// Most bytes of one id, name or URL from a user or the network that a
/// command prints.
pub const MAX_SHOWN_BYTES: usize = telemetry::MAX_LOGGED_BYTES;

/// Most bytes of free text from the network (an error, a detail, a line of
/// a timeline) that a command prints.
pub const MAX_SHOWN_TEXT_BYTES: usize = 4096;

/// `text` as a command prints it: control characters and bidirectional
/// overrides escaped (`\u{1b}`), so that what a user typed or the network
/// sent cannot move the cursor, recolour or clear the terminal, or disguise
/// itself; then cut to `limit` bytes and marked, as log fields are
/// ([`telemetry::bounded_to`]).
pub fn shown(text: &str, limit: usize) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return telemetry::bounded_to(text, limit);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(telemetry::bounded_to(&escaped, limit).into_owned())
}

/// An id or a name, as [`shown`] within [`MAX_SHOWN_BYTES`].
pub fn id(text: &str) -> Cow<'_, str> {
    shown(text, MAX_SHOWN_BYTES)
}

/// `value` as one JSON line whose strings escape, besides what JSON must,
/// the control characters and overrides that [`shown`] escapes (`\u009b`),
/// so that the line stays valid JSON and safe on a terminal.
pub fn json_line(value: &impl serde::Serialize) -> serde_json::Result<String> {
    let line = serde_json::to_string(value)?;
    if !line.chars().any(needs_escape) {
        return Ok(line);
    }
    // JSON itself escapes the C0 controls: the rest can only be in strings.
    let mut escaped = String::with_capacity(line.len() + 16);
    for c in line.chars() {
        if needs_escape(c) {
            escaped.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            escaped.push(c);
        }
    }
    Ok(escaped)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `webhookd healthcheck [URL]`: Ok when URL answers 2xx within 5 s.
pub async fn healthcheck(url: &str, out: &mut impl Write) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let status = client
        .get(url)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{} did not answer: {}", id(url), e.without_url()))?
        .status();
    anyhow::ensure!(status.is_success(), "{} answered {status}", id(url));
    writeln!(out, "ok: {status}")?;
    Ok(())
}

/// The exit status of a configuration that cannot be used (as clap's for a
/// command line it refuses).
pub const EXIT_CONFIGURATION: u8 = 2;

/// The exit status of a command (or of `serve`), after saying what failed
/// on stderr, on one line: 2 for a configuration that cannot be used
/// ([`crate::config::Invalid`]), else 1. The error is written whole (each
/// cause after a colon) but never its backtrace, which an error's Debug
/// form adds when `RUST_BACKTRACE` is set. Never a printing macro: they
/// panic when stderr is closed.
pub fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Whoever read the answer stopped reading (`| head`): nothing to say.
        Err(error) if closed_output(&error) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            let message = format!("{error:#}").replace('\n', " ");
            tracing::error!(error = %message, "webhookd failed");
            let _ = writeln!(std::io::stderr(), "webhookd: {message}");
            let invalid = (error.chain()).any(|cause| cause.is::<crate::config::Invalid>());
            match invalid {
                true => std::process::ExitCode::from(EXIT_CONFIGURATION),
                false => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// Whether `error` is a write to an output nobody reads any more.
fn closed_output(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_text_is_cut() {
        assert_eq!(id("evt_1"), "evt_1");
        assert_eq!(id("évènement"), "évènement");
        assert_eq!(
            id("evt_\u{1b}[2J\u{7}\r\n\u{9b}31m"),
            "evt_\\u{1b}[2J\\u{7}\\r\\n\\u{9b}31m"
        );
        assert_eq!(id("abc\u{202e}fed"), "abc\\u{202e}fed");
        let escapes = "\u{1b}".repeat(1000);
        let long = id(&escapes);
        assert!(long.len() < MAX_SHOWN_BYTES + 20, "{}", long.len());
        assert!(long.ends_with("…(6000 bytes)"), "{long}");
        assert!(!long.contains('\u{1b}'));
        assert_eq!(
            shown(&"x".repeat(5000), 4096).len(),
            4096 + "…(5000 bytes)".len()
        );
    }

    #[test]
    fn json_lines_stay_json_with_every_control_character_escaped() {
        let value = serde_json::json!({"event_id": "evt_\u{1b}\u{9b}\u{7f}\u{202e}é"});
        let line = json_line(&value).unwrap();
        assert_eq!(line, r#"{"event_id":"evt_\u001b\u009b\u007f\u202eé"}"#);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&line).unwrap(),
            value
        );
    }
}
