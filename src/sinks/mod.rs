//! Where outbox rows go: `log` (the default, for development) or `http` (a
//! signed POST to the user's app). A sink says what happened; the drainer
//! decides when to try again.

pub mod http;
pub mod log;
pub mod retry_after;

use std::time::Duration;

/// One leased outbox row, as a sink delivers it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The outbox id: the `webhook-id`, stable across retries.
    pub id: i64,
    pub topic: String,
    pub provider: String,
    pub event_id: String,
    /// The type of the event that wrote the row, while that event is kept.
    pub event_type: Option<String>,
    /// The payload as JSON text, as Postgres writes `jsonb` (never parsed
    /// here: it goes into the request body as it is).
    pub payload: String,
    /// This attempt's number.
    pub attempts: i32,
    /// RFC 3339, UTC.
    pub created_at: String,
}

/// The result of one delivery attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Delivered,
    /// Worth another try (5xx, 408, 429, timeout, connection error), after
    /// `retry_after` if the sink asked for a delay.
    Retry {
        error: String,
        retry_after: Option<Duration>,
    },
    /// Will never succeed as is (any other 4xx, a body over the sink's
    /// limit): dead-letter now.
    Permanent {
        error: String,
    },
}

#[derive(Debug, Clone)]
pub enum Sink {
    Log(log::LogSink),
    Http(Box<http::HttpSink>),
}

impl Sink {
    /// Takes the message by value so that its payload is freed as soon as
    /// the request body is built.
    pub async fn deliver(&self, message: Message) -> Delivery {
        match self {
            Sink::Log(sink) => sink.deliver(&message),
            Sink::Http(sink) => sink.deliver(message).await,
        }
    }

    /// The longest one delivery can take.
    pub fn timeout(&self) -> Duration {
        match self {
            Sink::Log(_) => Duration::ZERO,
            Sink::Http(sink) => sink.timeout(),
        }
    }

    /// A bounded label for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Sink::Log(_) => "log",
            Sink::Http(_) => "http",
        }
    }
}
