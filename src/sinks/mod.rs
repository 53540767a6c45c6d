//! Where outbox rows go, chosen by the URL's scheme: `log` (the default,
//! for development), `http(s)` (a signed POST to the user's app), `amqp(s)`
//! (a RabbitMQ exchange) or `nats`/`tls` (a NATS JetStream stream). Each
//! sends the same body and headers ([`envelope`]). A sink says what
//! happened; the drainer decides when to try again.

pub mod amqp;
pub mod envelope;
pub mod http;
pub mod log;
pub mod nats;
pub mod retry_after;

use std::time::Duration;

use crate::clock::Clock;
use crate::telemetry;

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
    Amqp(Box<amqp::AmqpSink>),
    Nats(Box<nats::NatsSink>),
}

/// What a sink's settings say, for [`Sink::from_url`].
#[derive(Debug, Clone, Copy)]
pub struct SinkSettings {
    /// The longest one delivery takes (`WEBHOOKD_SINK_TIMEOUT`).
    pub timeout: Duration,
    /// `WEBHOOKD_SINK_MAX_BODY_BYTES`.
    pub max_body_bytes: u64,
}

/// An HTTP sink's URL without the secret its deliveries are signed with.
#[derive(Debug, thiserror::Error)]
#[error("an HTTP sink needs its secret")]
pub struct NeedsSecret;

/// A sink reached ([`Sink::reach`]): what answered, and whether the
/// answer was a server error (a proxy whose receiver is down, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    pub said: String,
    pub troubled: bool,
}

/// What is wrong with a sink, found by [`Sink::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The settings are wrong (credentials refused, no such exchange or
    /// stream): start-up and `config check` fail.
    Wrong(String),
    /// It cannot be reached now: deliveries wait and retry, readiness is
    /// unaffected.
    Unreachable(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Wrong(said) | Problem::Unreachable(said) => f.write_str(said),
        }
    }
}

impl Sink {
    /// The sink `url` names by its scheme, signing under `secret` (which an
    /// HTTP sink requires). Nothing connects yet.
    pub fn from_url(
        url: &str,
        secret: Option<&str>,
        settings: SinkSettings,
        clock: Clock,
    ) -> anyhow::Result<Sink> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        let SinkSettings {
            timeout,
            max_body_bytes,
        } = settings;
        Ok(match scheme {
            Some("http" | "https") => {
                let secret = secret.ok_or(NeedsSecret)?;
                Sink::Http(Box::new(
                    http::HttpSink::new(url, secret, timeout, clock)?
                        .with_max_body_bytes(max_body_bytes),
                ))
            }
            Some("amqp" | "amqps") => Sink::Amqp(Box::new(amqp::AmqpSink::new(
                url,
                envelope::Sealer::new(secret, clock, max_body_bytes)?,
                timeout,
            )?)),
            Some("nats" | "tls") => Sink::Nats(Box::new(nats::NatsSink::new(
                url,
                envelope::Sealer::new(secret, clock, max_body_bytes)?,
                timeout,
            )?)),
            _ if url == "log" => Sink::Log(log::LogSink),
            _ => anyhow::bail!(
                "the sink's URL must be http(s)://, amqp(s)://, nats:// (or tls://), or log"
            ),
        })
    }

    /// Whether a broker sink's broker takes its credentials and has its
    /// exchange or stream; an HTTP or log sink is not checked here.
    pub async fn check(&self) -> Result<(), Problem> {
        match self {
            Sink::Log(_) | Sink::Http(_) => Ok(()),
            Sink::Amqp(sink) => sink.check().await,
            Sink::Nats(sink) => sink.check().await,
        }
    }

    /// Whether the sink can be delivered to now, and what said so: an HTTP
    /// receiver answers a `HEAD` (a 5xx is an answer, and a sign of
    /// trouble behind it), a broker takes the credentials and has the
    /// exchange or stream; the log always can.
    pub async fn reach(&self) -> Result<Reached, Problem> {
        let fine = |said: &str| Reached {
            said: said.to_owned(),
            troubled: false,
        };
        match self {
            Sink::Log(_) => Ok(fine("deliveries are written to the log")),
            Sink::Http(sink) => (sink.reach().await).map(|status| Reached {
                said: format!("the receiver answered HEAD with {status}"),
                troubled: status >= 500,
            }),
            Sink::Amqp(_) | Sink::Nats(_) => (self.check().await)
                .map(|()| fine("the broker took the credentials and has the destination")),
        }
    }

    /// Takes the message by value so that its payload is freed as soon as
    /// the request body is built.
    pub async fn deliver(&self, message: Message) -> Delivery {
        match self {
            Sink::Log(sink) => sink.deliver(&message),
            Sink::Http(sink) => sink.deliver(message).await,
            Sink::Amqp(sink) => sink.deliver(message).await,
            Sink::Nats(sink) => sink.deliver(message).await,
        }
    }

    /// The longest one delivery can take.
    pub fn timeout(&self) -> Duration {
        match self {
            Sink::Log(_) => Duration::ZERO,
            Sink::Http(sink) => sink.timeout(),
            Sink::Amqp(sink) => sink.timeout(),
            Sink::Nats(sink) => sink.timeout(),
        }
    }

    /// A bounded label for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Sink::Log(_) => "log",
            Sink::Http(_) => "http",
            Sink::Amqp(_) => "amqp",
            Sink::Nats(_) => "nats",
        }
    }
}

/// `text`, then what `error` and each of its causes say (a cause that
/// repeats its error's words is left out), at most
/// [`telemetry::MAX_LOGGED_ERROR_BYTES`].
pub fn with_causes(mut text: String, error: &dyn std::error::Error) -> String {
    let mut cause: Option<&dyn std::error::Error> = Some(error);
    while let Some(current) = cause {
        let said = current.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = current.source();
    }
    telemetry::bounded_to(&text, telemetry::MAX_LOGGED_ERROR_BYTES).into_owned()
}
