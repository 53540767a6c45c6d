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
//! One connection and one channel serve every delivery at once; a lost one
//! is opened again by the next delivery. Credentials never leave the URL
//! given to the client: errors and `Debug` say only the host.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
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
}

/// The open connection and its confirming channel.
struct Link {
    connection: Connection,
    channel: Channel,
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
        if !kept.is_empty() {
            parsed.query_pairs_mut().extend_pairs(kept);
        }
        let uri: Arc<str> = parsed.as_str().into();
        uri.parse::<lapin::uri::AMQPUri>().map_err(|error| {
            anyhow::anyhow!("the AMQP sink's URL is not one RabbitMQ takes: {error}")
        })?;
        Ok(AmqpSink {
            uri,
            host,
            exchange: exchange.unwrap_or_else(|| DEFAULT_EXCHANGE.to_owned()),
            sealer,
            timeout,
            link: Arc::default(),
        })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn deliver(&self, message: Message) -> Delivery {
        let late = || format!("no confirm from {}", self.host);
        self.sealer
            .send_within(message, self.timeout, late, |sealed| self.publish(sealed))
            .await
    }

    async fn publish(&self, sealed: Envelope) -> Delivery {
        let channel = match self.channel().await {
            Ok(channel) => channel,
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
        match confirmed {
            Ok(Confirmation::Ack(None)) => Delivery::Delivered,
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
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
            Ok(Confirmation::Nack(None)) => retry(format!(
                "nacked by {}: the broker could not take it",
                self.host
            )),
            // The channel lost confirm mode: never count it delivered.
            Ok(Confirmation::NotRequested) => {
                retry("the channel is not in confirm mode".to_owned())
            }
            // A refused message closes the channel, a lost connection both:
            // the next delivery opens them again.
            Err(error) => match refusal(&error) {
                Some(Refusal::ForGood) => Delivery::Permanent {
                    error: self.describe("refused", &error),
                },
                _ => retry(self.describe("publish failed", &error)),
            },
        }
    }

    /// The open channel, opening the connection or the channel again when
    /// the last one was closed (by a refusal, a lost connection, a missed
    /// heartbeat).
    async fn channel(&self) -> Result<Channel, lapin::Error> {
        let mut link = self.link.lock().await;
        if let Some(open) = link.as_ref() {
            if open.channel.status().connected() {
                return Ok(open.channel.clone());
            }
            if open.connection.status().connected() {
                let channel = confirming(&open.connection).await?;
                link.as_mut().expect("just read").channel = channel.clone();
                return Ok(channel);
            }
        }
        *link = None;
        let connection = Connection::connect(
            &self.uri,
            ConnectionProperties::default().with_connection_name("webhookd".into()),
        )
        .await?;
        let channel = confirming(&connection).await?;
        *link = Some(Link {
            connection,
            channel: channel.clone(),
        });
        Ok(channel)
    }

    /// Connects and checks the exchange exists (a passive declare), for
    /// start-up and `config check`: what is wrong, in words.
    pub async fn check(&self) -> Result<(), Problem> {
        let attempt = async {
            let connection = Connection::connect(&self.uri, ConnectionProperties::default())
                .await
                .map_err(|error| (refusal(&error), self.describe("could not connect", &error)))?;
            let channel = connection
                .create_channel()
                .await
                .map_err(|error| (None, self.describe("could not open a channel", &error)))?;
            let declared = channel
                .exchange_declare(
                    self.exchange.as_str().into(),
                    ExchangeKind::Topic,
                    ExchangeDeclareOptions {
                        passive: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await;
            let _ = connection.close(200, "checked".into()).await;
            declared.map_err(|error| {
                (
                    Some(Refusal::ForGood),
                    format!(
                        "the exchange {} does not exist on {} ({}): declare it, or name another with ?exchange=",
                        self.exchange,
                        self.host,
                        super::with_causes(String::new(), &error).trim_start_matches(": ")
                    ),
                )
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err((Some(Refusal::Credentials), said))) => Err(Problem::Wrong(format!(
                "{said}: RabbitMQ refused the user and password in the sink's URL"
            ))),
            Ok(Err((Some(Refusal::ForGood), said))) => Err(Problem::Wrong(said)),
            Ok(Err((None, said))) => Err(Problem::Unreachable(said)),
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

/// A channel of `connection` in confirm mode.
async fn confirming(connection: &Connection) -> Result<Channel, lapin::Error> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}

/// How the broker refused, if it did.
enum Refusal {
    /// No such exchange, a message over its limit.
    ForGood,
    /// The user or password, or the user's rights on the vhost.
    Credentials,
}

/// What `error` says the broker refused, if anything.
fn refusal(error: &lapin::Error) -> Option<Refusal> {
    let lapin::ErrorKind::ProtocolError(amqp) = error.kind() else {
        return None;
    };
    match amqp.kind() {
        AMQPErrorKind::Soft(
            AMQPSoftError::NOTFOUND
            | AMQPSoftError::PRECONDITIONFAILED
            | AMQPSoftError::CONTENTTOOLARGE,
        ) => Some(Refusal::ForGood),
        AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => Some(Refusal::Credentials),
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
            "amqp://user:pa%2Fss@broker:5672/prod?heartbeat=10"
        );
        let shown = format!("{amqp:?}");
        assert!(
            shown.contains("broker") && !shown.contains("pa%2Fss"),
            "{shown}"
        );
        assert_eq!(sink("amqp://broker").unwrap().exchange, DEFAULT_EXCHANGE);
        assert!(sink("http://broker").is_err());
        assert!(
            sink("amqp://broker?heartbeat=soon").is_err(),
            "lapin's own options are checked"
        );
    }
}
