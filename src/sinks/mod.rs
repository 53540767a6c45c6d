//! Where outbox rows go: `log` (the default, for development) or `http` (a
//! signed POST to the user's app). A sink says what happened; the drainer
//! decides when to try again.

pub mod http;
pub mod log;

use std::time::Duration;

use crate::outbox::store::Leased;

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
    /// Will never succeed as is (any other 4xx): dead-letter now.
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
    pub async fn deliver(&self, message: &Leased) -> Delivery {
        match self {
            Sink::Log(sink) => sink.deliver(message),
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
