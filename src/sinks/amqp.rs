//! Publishes each message to a RabbitMQ exchange (`amqp://` or `amqps://`
//! `user:pass@host:port/vhost?exchange=E`, default `amq.topic`), the topic
//! as routing key: persistent, `mandatory`, on a channel in confirm mode.
//! A message is delivered only when the broker's confirm arrives:
//! - a message returned unroutable (no queue bound for its topic), a body
//!   the broker refuses (over its size limit) or an exchange that does not
//!   exist: permanent, dead-lettered with the broker's reason;
//! - a nack, a lost connection before the confirm, a broker down or
//!   unreachable, no confirm within the sink's timeout: retried, with the
//!   same `message_id` (the outbox id) for the consumer to dedupe on.
//!
//! The body and headers are those of an HTTP delivery ([`super::envelope`]):
//! `message_id` is the outbox id, the `webhook-*` headers are in the
//! message's header table, `content_type` is `application/json`.
//!
//! One connection serves every delivery, each on a confirming channel of
//! its own with no other publish in flight, so that a return or a confirm is
//! never taken for another message's, and a message the broker refuses
//! (which closes its channel) fails no other. A message returned for
//! another id is retried. A connection RabbitMQ blocks (a resource alarm)
//! is retried at once, without queueing the body; after a timeout the
//! connection is dropped, with whatever it still had queued, and the next
//! delivery opens another. Credentials never leave the URL given to the
//! client: errors and `Debug` say only the host.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use tokio::sync::Mutex;

use super::envelope::{Envelope, Sealer};
use super::{Delivery, Message, Problem};

/// The exchange when the URL names none: every RabbitMQ vhost has it.
pub const DEFAULT_EXCHANGE: &str = "amq.topic";

#[derive(Clone)]
pub struct AmqpSink {
    /// The URL as the client takes it (credentials included, `exchange`
    /// removed).
    uri: Arc<str>,
    host: String,
    exchange: String,
    sealer: Sealer,
    timeout: Duration,
    link: Arc<Mutex<Option<Link>>>,
    /// A delivery timed out: the connection is dropped before the next.
    stale: Arc<AtomicBool>,
    /// Connections opened so far: each one's `Link::generation`.
    opened: Arc<AtomicU64>,
}

/// The open connection and its confirming channels with nothing in flight.
struct Link {
    connection: Connection,
    /// Which connection of this sink's this is: a channel goes back only
    /// to the connection it came from.
    generation: u64,
    idle: Vec<Channel>,
}

impl std::fmt::Debug for AmqpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpSink")
            .field("host", &self.host)
            .field("exchange", &self.exchange)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl AmqpSink {
    /// Reads the URL (nothing connects until the first delivery or
    /// [`AmqpSink::check`]); seals each message with `sealer`.
    pub fn new(url: &str, sealer: Sealer, timeout: Duration) -> anyhow::Result<Self> {
        let mut parsed =
            reqwest::Url::parse(url).map_err(|_| anyhow::anyhow!("the sink's URL is not a URL"))?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "amqp" | "amqps"),
            "an AMQP sink's URL must be amqp:// or amqps://"
        );
        let host = parsed.host_str().unwrap_or_default().to_owned();
        let mut exchange = None;
        let kept: Vec<(String, String)> = parsed
            .query_pairs()
            .filter_map(|(key, value)| {
                if key == "exchange" {
                    exchange = Some(value.into_owned());
                    None
                } else {
                    Some((key.into_owned(), value.into_owned()))
                }
            })
            .collect();
        parsed.set_query(None);
        if !kept.iter().any(|(key, _)| key == "connection_timeout") {
            // Milliseconds: a connect never outlives a delivery's timeout.
            let millis = timeout.as_millis().max(1).to_string();
            parsed
                .query_pairs_mut()
                .append_pair("connection_timeout", &millis);
        }
        parsed.query_pairs_mut().extend_pairs(kept);
        if parsed.query() == Some("") {
            parsed.set_query(None);
        }
        let uri: Arc<str> = parsed.as_str().into();
        uri.parse::<lapin::uri::AMQPUri>().map_err(|error| {
            // The parser may quote the URL: never its password.
            let said = match parsed.password() {
                Some(password) if !password.is_empty() => error.replace(password, "***"),
                _ => error,
            };
            anyhow::anyhow!("the AMQP sink's URL is not one RabbitMQ takes: {said}")
        })?;
        Ok(AmqpSink {
            uri,
            host,
            exchange: exchange.unwrap_or_else(|| DEFAULT_EXCHANGE.to_owned()),
            sealer,
            timeout,
            link: Arc::default(),
            stale: Arc::default(),
            opened: Arc::default(),
        })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn deliver(&self, message: Message) -> Delivery {
        let late = || {
            self.stale.store(true, Ordering::Relaxed);
            format!("no confirm from {}", self.host)
        };
        self.sealer
            .send_within(message, self.timeout, late, |sealed| self.publish(sealed))
            .await
    }

    async fn publish(&self, sealed: Envelope) -> Delivery {
        let (generation, channel) = match self.channel().await {
            Ok(Some(taken)) => taken,
            Ok(None) => {
                return retry(format!(
                    "{} blocks publishers (a resource alarm: memory or disk)",
                    self.host
                ));
            }
            Err(error) => return retry(self.describe("could not connect", &error)),
        };
        let mut headers = FieldTable::default();
        for (name, value) in sealed.headers() {
            headers.insert(name.into(), AMQPValue::LongString(value.into()));
        }
        let properties = BasicProperties::default()
            .with_message_id(sealed.id.as_str().into())
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_timestamp(u64::try_from(sealed.timestamp).unwrap_or(0))
            .with_type(sealed.topic.as_str().into())
            .with_app_id("webhookd".into())
            .with_headers(headers);
        let published = channel
            .basic_publish(
                ShortString::from(self.exchange.as_str()),
                ShortString::from(sealed.topic.as_str()),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                &sealed.body,
                properties,
            )
            .await;
        let confirmed = match published {
            Ok(confirm) => confirm.await,
            Err(error) => Err(error),
        };
        let delivery = match confirmed {
            Ok(Confirmation::Ack(None)) => Delivery::Delivered,
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)))
                if returned
                    .delivery
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|id| id.as_str())
                    == Some(sealed.id.as_str()) =>
            {
                Delivery::Permanent {
                    error: format!(
                        "returned by {}: {} {} (no queue bound to exchange {} for routing key {})",
                        self.host,
                        returned.reply_code,
                        returned.reply_text,
                        self.exchange,
                        sealed.topic
                    ),
                }
            }
            // Never counted delivered, never dead for another's reason.
            Ok(Confirmation::Ack(Some(_)) | Confirmation::Nack(Some(_))) => {
                return retry(format!("{} returned another message", self.host));
            }
            Ok(Confirmation::Nack(None)) => retry(format!(
                "nacked by {}: the broker could not take it",
                self.host
            )),
            // The channel lost confirm mode: never count it delivered.
            Ok(Confirmation::NotRequested) => {
                return retry("the channel is not in confirm mode".to_owned());
            }
            // A refused message closes its channel (and no other message is
            // in flight on it); a lost connection, every channel: the next
            // delivery opens them again.
            Err(error) => {
                return match refusal(&error) {
                    Some(Refusal::NotFound | Refusal::TooLarge) => Delivery::Permanent {
                        error: self.describe("refused", &error),
                    },
                    _ => retry(self.describe("publish failed", &error)),
                };
            }
        };
        self.put_back((generation, channel)).await;
        delivery
    }

    /// A confirming channel with nothing in flight, the connection opened
    /// (again) when there is none, it was lost, or a delivery timed out on
    /// it; `None` while RabbitMQ blocks the connection.
    async fn channel(&self) -> Result<Option<(u64, Channel)>, lapin::Error> {
        let mut link = self.link.lock().await;
        let lost = link
            .as_ref()
            .is_some_and(|open| !open.connection.status().connected());
        if (self.stale.swap(false, Ordering::Relaxed) || lost)
            && let Some(old) = link.take()
        {
            // Whatever it still had queued goes with it.
            tokio::spawn(async move {
                let _ = old.connection.close(200, "reopened".into()).await;
            });
        }
        let open = match link.as_mut() {
            Some(open) => open,
            None => link.insert(Link {
                connection: Connection::connect(
                    &self.uri,
                    ConnectionProperties::default().with_connection_name("webhookd".into()),
                )
                .await?,
                generation: self.opened.fetch_add(1, Ordering::Relaxed),
                idle: Vec::new(),
            }),
        };
        if open.connection.status().blocked() {
            return Ok(None);
        }
        while let Some(channel) = open.idle.pop() {
            if channel.status().connected() {
                return Ok(Some((open.generation, channel)));
            }
        }
        let channel = open.connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Some((open.generation, channel)))
    }

    /// Gives back a channel whose publish was settled, while the
    /// connection it came from is the one in use.
    async fn put_back(&self, (generation, channel): (u64, Channel)) {
        let mut link = self.link.lock().await;
        if let Some(open) = link.as_mut()
            && open.generation == generation
            && channel.status().connected()
        {
            open.idle.push(channel);
        }
    }

    /// Connects and checks the exchange exists (a passive declare), for
    /// start-up and `config check`: what is wrong, in words. Only what the
    /// broker says is wrong; a failure on the way is `Unreachable`.
    pub async fn check(&self) -> Result<(), Problem> {
        let attempt = async {
            let connection = Connection::connect(&self.uri, ConnectionProperties::default())
                .await
                .map_err(|error| {
                    let said = self.describe("could not connect", &error);
                    match refusal(&error) {
                        Some(Refusal::Credentials) => Problem::Wrong(format!(
                            "{said}: RabbitMQ refused the user and password in the sink's URL"
                        )),
                        Some(Refusal::NotAllowed) => Problem::Wrong(format!(
                            "{said}: the vhost in the sink's URL does not exist, or the user may not use it"
                        )),
                        _ => Problem::Unreachable(said),
                    }
                })?;
            let declared = async {
                connection
                    .create_channel()
                    .await?
                    .exchange_declare(
                        self.exchange.as_str().into(),
                        ExchangeKind::Topic,
                        ExchangeDeclareOptions {
                            passive: true,
                            ..ExchangeDeclareOptions::default()
                        },
                        FieldTable::default(),
                    )
                    .await
            }
            .await;
            let _ = connection.close(200, "checked".into()).await;
            declared.map_err(|error| match refusal(&error) {
                Some(Refusal::NotFound) => Problem::Wrong(format!(
                    "the exchange {} does not exist on {}: declare it, or name another with ?exchange=",
                    self.exchange, self.host,
                )),
                Some(Refusal::Credentials) => Problem::Wrong(format!(
                    "the user in the sink's URL may not use the exchange {} on {}",
                    self.exchange, self.host,
                )),
                _ => Problem::Unreachable(self.describe("could not check the exchange", &error)),
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(checked) => checked,
            Err(_) => Err(Problem::Unreachable(format!(
                "{} did not answer within {:?}",
                self.host, self.timeout
            ))),
        }
    }

    fn describe(&self, what: &str, error: &lapin::Error) -> String {
        super::with_causes(format!("{what} ({})", self.host), error)
    }
}

fn retry(error: String) -> Delivery {
    Delivery::Retry {
        error,
        retry_after: None,
    }
}

/// How the broker refused, if it did.
enum Refusal {
    /// No such exchange (404).
    NotFound,
    /// A message over its limit (406, 311).
    TooLarge,
    /// The user or password, or the user's rights (403).
    Credentials,
    /// No such vhost, or not the user's (530).
    NotAllowed,
}

/// What `error` says the broker refused, if anything.
fn refusal(error: &lapin::Error) -> Option<Refusal> {
    let lapin::ErrorKind::ProtocolError(amqp) = error.kind() else {
        return None;
    };
    match amqp.kind() {
        AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND) => Some(Refusal::NotFound),
        AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED | AMQPSoftError::CONTENTTOOLARGE) => {
            Some(Refusal::TooLarge)
        }
        AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => Some(Refusal::Credentials),
        AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) => Some(Refusal::NotAllowed),
        _ => None,
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    fn sink(url: &str) -> anyhow::Result<AmqpSink> {
        let sealer = Sealer::new(None, Clock::System, 1 << 20).unwrap();
        AmqpSink::new(url, sealer, Duration::from_secs(1))
    }

    #[test]
    fn the_exchange_comes_out_of_the_url_and_the_rest_stays() {
        let amqp =
            sink("amqp://user:pa%2Fss@broker:5672/prod?exchange=payments&heartbeat=10").unwrap();
        assert_eq!(amqp.exchange, "payments");
        assert_eq!(
            &*amqp.uri,
            "amqp://user:pa%2Fss@broker:5672/prod?connection_timeout=1000&heartbeat=10"
        );
        let shown = format!("{amqp:?}");
        assert!(
            shown.contains("broker") && !shown.contains("pa%2Fss"),
            "{shown}"
        );
        assert_eq!(sink("amqp://broker").unwrap().exchange, DEFAULT_EXCHANGE);
        assert!(sink("http://broker").is_err());
        let refused = sink("amqp://user:hunter2@broker?heartbeat=soon").unwrap_err();
        assert!(
            !refused.to_string().contains("hunter2"),
            "lapin's own options are checked, the password never shown: {refused}"
        );
    }
}
