//! Structured logs: JSON in containers, pretty in a terminal; `RUST_LOG`
//! overrides the default filter. Text from the network reaches a log line
//! only through [`bounded`]. Spans also go to an OpenTelemetry collector when
//! one is configured ([`traces`]).

mod traces;

use std::borrow::Cow;
use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// lapin's warnings are off: it logs a returned message whole (body and
/// signature); the sink records why it was returned instead.
const DEFAULT_FILTER: &str = "info,sqlx=warn,lapin=error";

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

/// Installs the subscriber. Writing a log line never panics, whatever became
/// of the output: the service's lines go through [`LogPipe`] and never
/// block it; a command's go straight to stderr ([`Quiet`]), in order with
/// what it prints.
pub fn init(format: LogFormat, to: LogTo) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let writer = match to {
        LogTo::Stdout => BoxMakeWriter::new(LogPipe::start()),
        LogTo::Stderr => BoxMakeWriter::new(|| Quiet(std::io::stderr())),
    };
    let logs = tracing_subscriber::fmt::layer().with_writer(writer);
    let logs = match format {
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .boxed(),
        LogFormat::Pretty => logs.boxed(),
    };
    let (spans, no_spans) = match traces::layer() {
        Ok(spans) => (spans, None),
        Err(reason) => (None, Some(reason)),
    };
    let result = tracing_subscriber::registry()
        .with(filter)
        .with(logs)
        .with(spans)
        .try_init();
    // Already initialised (tests): keep the first subscriber.
    if let (Ok(()), Some(reason)) = (result, no_spans) {
        tracing::warn!(
            reason,
            "traces are off: the OTLP exporter could not be built"
        );
    }
}

/// Log lines dropped since start: the output was closed, or did not keep
/// up (its reader stopped reading). `webhookd_log_lines_dropped_total`.
pub fn log_lines_dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// At exit: exports the spans still queued, waiting at most
/// [`SPAN_FLUSH_LIMIT`], then waits at most `limit` for the queued lines of
/// the service to be written (a stalled collector or output must not hold
/// the process).
pub fn flush(limit: Duration) {
    traces::shutdown(SPAN_FLUSH_LIMIT);
    let Some(lines) = PIPE.get() else {
        return;
    };
    let (done, flushed) = std::sync::mpsc::channel();
    if lines.try_send(Queued::Flush(done)).is_ok() {
        let _ = flushed.recv_timeout(limit);
    }
}

/// Longest [`flush`] waits for the collector to take the last spans.
pub const SPAN_FLUSH_LIMIT: Duration = Duration::from_secs(5);

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The service's queue, for [`flush`].
static PIPE: OnceLock<SyncSender<Queued>> = OnceLock::new();

/// Lines queued for the output at most; a line past that is dropped.
const QUEUED_LINES: usize = 4096;

enum Queued {
    Line(Vec<u8>),
    /// Answered once every line queued before it was written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// The service's log output behind a queue: each line is handed to a thread
/// of its own that writes it to stdout, so a full pipe (a reader that
/// stopped reading) blocks only that thread and a closed one (`| head`, a
/// collector that went away) fails only its writes. Lines the queue cannot
/// take are dropped and counted ([`log_lines_dropped`]); nothing the service
/// does waits for its logs.
#[derive(Clone)]
struct LogPipe {
    lines: SyncSender<Queued>,
}

impl LogPipe {
    fn start() -> Self {
        let (lines, queued) = sync_channel::<Queued>(QUEUED_LINES);
        // Without its thread every line is dropped (and counted).
        let _ = std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || write_out(&queued));
        let _ = PIPE.set(lines.clone());
        LogPipe { lines }
    }
}

/// Writes queued lines until every sender is gone. A line whose write fails
/// (a closed output) is dropped and counted; the next one is tried all the
/// same.
fn write_out(queued: &Receiver<Queued>) {
    let mut stdout = std::io::stdout();
    for item in queued {
        match item {
            Queued::Line(line) => {
                if stdout
                    .write_all(&line)
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                }
            }
            Queued::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// One log line being formatted; queued when the formatter is done with it.
struct Line {
    bytes: Vec<u8>,
    lines: SyncSender<Queued>,
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.bytes.is_empty() {
            return;
        }
        let line = Queued::Line(std::mem::take(&mut self.bytes));
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.lines.try_send(line)
        {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogPipe {
    type Writer = Line;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            bytes: Vec::with_capacity(256),
            lines: self.lines.clone(),
        }
    }
}

/// A writer whose failures are dropped lines, never errors: the formatter
/// reports a failed write on stderr with a macro that panics when stderr is
/// closed.
struct Quiet<W>(W);

impl<W: Write> Write for Quiet<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.write_all(buf).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
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
