//! Publishes each message to NATS JetStream (`nats://[user:pass@]host:port
//! ?stream=S&subject_prefix=P`, `tls://` for TLS), on subject `P.<topic>`
//! (`P` defaults to `webhookd`), with `Nats-Msg-Id` = the outbox id, so the
//! stream drops a redelivered copy within its duplicate window. It never
//! creates a stream: with `stream=`, a publish the stream does not capture
//! is refused (`Nats-Expected-Stream`). A message is delivered only when the
//! stream's ack arrives:
//! - no stream for the subject, the wrong stream, a message over the
//!   server's or the stream's size limit: permanent, dead-lettered with the
//!   reason;
//! - the server down or unreachable, the connection lost before the ack, no
//!   ack within the sink's timeout, the stream full: retried.
//!
//! The body and headers are those of an HTTP delivery ([`super::envelope`]),
//! with `Content-Type: application/json`. One client serves every delivery;
//! once connected, it reconnects by itself. Credentials never leave the
//! client: errors and `Debug` say only the host.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::context::{
    GetStreamByNameErrorKind, GetStreamErrorKind, PublishErrorKind,
};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, ErrorCode};
use async_nats::{ConnectErrorKind, ConnectOptions};
use tokio::sync::Mutex;

use super::envelope::{Envelope, Sealer};
use super::{Delivery, Message, Problem};

/// The subject prefix when the URL names none.
pub const DEFAULT_SUBJECT_PREFIX: &str = "webhookd";

/// Commands the client queues to send; its default (2,048) could hold as
/// many bodies while a connection stalls.
const CLIENT_CAPACITY: usize = 128;

#[derive(Clone)]
pub struct NatsSink {
    /// `host:port` (or `tls://host:port`), as the client takes it.
    server: String,
    user: Option<(String, String)>,
    token: Option<String>,
    stream: Option<String>,
    prefix: String,
    sealer: Sealer,
    timeout: Duration,
    context: Arc<Mutex<Option<jetstream::Context>>>,
}

impl std::fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSink")
            .field("server", &self.server)
            .field("stream", &self.stream)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl NatsSink {
    /// Reads the URL (nothing connects until the first delivery or
    /// [`NatsSink::check`]); seals each message with `sealer`.
    pub fn new(url: &str, sealer: Sealer, timeout: Duration) -> anyhow::Result<Self> {
        let parsed =
            reqwest::Url::parse(url).map_err(|_| anyhow::anyhow!("the sink's URL is not a URL"))?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "nats" | "tls"),
            "a NATS sink's URL must be nats:// or tls://"
        );
        let host = parsed
            .host_str()
            .filter(|host| !host.is_empty())
            .ok_or_else(|| anyhow::anyhow!("the NATS sink's URL names no host"))?;
        let port = parsed.port().unwrap_or(4222);
        let server = match parsed.scheme() {
            "tls" => format!("tls://{host}:{port}"),
            _ => format!("{host}:{port}"),
        };
        let decoded = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8_lossy()
                .into_owned()
        };
        let (user, token) = match (parsed.username(), parsed.password()) {
            ("", _) => (None, None),
            (token, None) => (None, Some(decoded(token))),
            (user, Some(password)) => (Some((decoded(user), decoded(password))), None),
        };
        let mut stream = None;
        let mut prefix = DEFAULT_SUBJECT_PREFIX.to_owned();
        for (key, value) in parsed.query_pairs() {
            match &*key {
                "stream" => stream = Some(value.into_owned()),
                "subject_prefix" => prefix = value.into_owned(),
                other => anyhow::bail!(
                    "the NATS sink's URL has an unknown option {other:?} (it takes stream and subject_prefix)"
                ),
            }
        }
        anyhow::ensure!(
            !prefix.is_empty()
                && prefix
                    .split('.')
                    .all(|part| !part.is_empty() && !part.contains(['*', '>', ' '])),
            "the NATS sink's subject_prefix must be tokens joined by dots, without wildcards"
        );
        Ok(NatsSink {
            server,
            user,
            token,
            stream,
            prefix,
            sealer,
            timeout,
            context: Arc::default(),
        })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The subject a topic is published on.
    pub fn subject(&self, topic: &str) -> String {
        format!("{}.{topic}", self.prefix)
    }

    pub async fn deliver(&self, message: Message) -> Delivery {
        let late = || format!("no ack from {}", self.server);
        self.sealer
            .send_within(message, self.timeout, late, |sealed| self.publish(sealed))
            .await
    }

    async fn publish(&self, sealed: Envelope) -> Delivery {
        let context = match self.context().await {
            Ok(context) => context,
            Err(error) => {
                return retry(super::with_causes(
                    format!("could not connect ({})", self.server),
                    &error,
                ));
            }
        };
        if context.client().connection_state() != async_nats::connection::State::Connected {
            // Not queued meanwhile: the client would hold every body until
            // it reconnects.
            return retry(format!("not connected to {} (reconnecting)", self.server));
        }
        let mut publish = PublishMessage::build()
            .message_id(&sealed.id)
            .header("Content-Type", "application/json");
        for (name, value) in sealed.headers() {
            publish = publish.header(name, value.as_str());
        }
        if let Some(stream) = &self.stream {
            publish = publish.expected_stream(stream);
        }
        let subject = self.subject(&sealed.topic);
        let acked = match context
            .send_publish(subject.clone(), publish.payload(sealed.body.into()))
            .await
        {
            Ok(ack) => ack.await,
            Err(error) => Err(error),
        };
        match acked {
            Ok(_) => Delivery::Delivered,
            Err(error) => {
                let said = super::with_causes(format!("{subject} on {}", self.server), &error);
                if refused_for_good(&context, &error, &subject).await {
                    Delivery::Permanent { error: said }
                } else {
                    retry(said)
                }
            }
        }
    }

    /// The JetStream context, connecting the first time (the client
    /// reconnects by itself after that).
    async fn context(&self) -> Result<jetstream::Context, async_nats::ConnectError> {
        let mut context = self.context.lock().await;
        if let Some(open) = context.as_ref() {
            return Ok(open.clone());
        }
        let client = self.options().connect(&self.server).await?;
        let mut open = jetstream::new(client);
        open.set_timeout(self.timeout);
        *context = Some(open.clone());
        Ok(open)
    }

    fn options(&self) -> ConnectOptions {
        let options = match (&self.user, &self.token) {
            (Some((user, password)), _) => {
                ConnectOptions::with_user_and_password(user.clone(), password.clone())
            }
            (None, Some(token)) => ConnectOptions::with_token(token.clone()),
            (None, None) => ConnectOptions::new(),
        };
        options
            .name("webhookd")
            .connection_timeout(self.timeout)
            .max_reconnects(None)
            // Few commands queued: a publish is not sent while disconnected.
            .client_capacity(CLIENT_CAPACITY)
    }

    /// Connects and checks the stream exists, for start-up and `config
    /// check`: what is wrong, in words.
    pub async fn check(&self) -> Result<(), Problem> {
        let attempt = async {
            let client = self
                .options()
                .connect(&self.server)
                .await
                .map_err(|error| {
                    let said =
                        super::with_causes(format!("could not connect ({})", self.server), &error);
                    match error.kind() {
                        ConnectErrorKind::AuthorizationViolation
                        | ConnectErrorKind::Authentication => Problem::Wrong(format!(
                            "{said}: the server refused the credentials in the sink's URL"
                        )),
                        ConnectErrorKind::ServerParse | ConnectErrorKind::Tls => {
                            Problem::Wrong(said)
                        }
                        _ => Problem::Unreachable(said),
                    }
                })?;
            let Some(stream) = &self.stream else {
                return Ok(());
            };
            let mut context = jetstream::new(client);
            context.set_timeout(self.timeout);
            let info = context.get_stream(stream).await.map_err(|error| {
                if let GetStreamErrorKind::JetStream(refused) = error.kind()
                    && refused.error_code() == ErrorCode::STREAM_NOT_FOUND
                {
                    Problem::Wrong(format!(
                        "the stream {stream} does not exist on {} (webhookd never creates one)",
                        self.server
                    ))
                } else {
                    Problem::Unreachable(super::with_causes(
                        format!("could not read the stream {stream} on {}", self.server),
                        &error,
                    ))
                }
            })?;
            let subjects = &info.cached_info().config.subjects;
            let probe = self.subject("wallet.credited");
            if !subjects
                .iter()
                .any(|pattern| subject_matches(pattern, &probe))
            {
                return Err(Problem::Wrong(format!(
                    "the stream {stream} does not capture {} (its subjects: {}): add {}.> to them",
                    probe,
                    subjects.join(", "),
                    self.prefix
                )));
            }
            Ok(())
        };
        match tokio::time::timeout(self.timeout * 2, attempt).await {
            Ok(checked) => checked,
            Err(_) => Err(Problem::Unreachable(format!(
                "{} did not answer within {:?}",
                self.server,
                self.timeout * 2
            ))),
        }
    }
}

fn retry(error: String) -> Delivery {
    Delivery::Retry {
        error,
        retry_after: None,
    }
}

/// Whether the server refused the message for good: no stream captures its
/// subject, another stream does, or it is over a size limit. A full stream
/// or a lost ack is worth another try, and so is "no responders" unless
/// JetStream, asked, says no stream captures `subject`: it also comes while
/// a stream's leader is being elected or the server is still starting.
async fn refused_for_good(
    context: &jetstream::Context,
    error: &jetstream::context::PublishError,
    subject: &str,
) -> bool {
    match error.kind() {
        PublishErrorKind::StreamNotFound => matches!(
            context.stream_by_subject(subject).await,
            Err(asked) if asked.kind() == GetStreamByNameErrorKind::NotFound
        ),
        PublishErrorKind::MaxPayloadExceeded => true,
        PublishErrorKind::Other => std::error::Error::source(error)
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
            .is_some_and(|refused| {
                [
                    ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
                    ErrorCode::STREAM_NOT_MATCH,
                ]
                .contains(&refused.error_code())
            }),
        _ => false,
    }
}

/// Whether a NATS subject pattern (`*` one token, `>` the rest) matches.
fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut tokens = subject.split('.');
    for wanted in pattern.split('.') {
        match (wanted, tokens.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (wanted, Some(token)) if wanted == token => {}
            _ => return false,
        }
    }
    tokens.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    fn sink(url: &str) -> anyhow::Result<NatsSink> {
        let sealer = Sealer::new(None, Clock::System, 1 << 20).unwrap();
        NatsSink::new(url, sealer, Duration::from_secs(1))
    }

    #[test]
    fn the_url_gives_server_credentials_stream_and_prefix() {
        let nats = sink("nats://app:s%40cret@broker:4333?stream=PAYMENTS&subject_prefix=pay.hooks")
            .unwrap();
        assert_eq!(nats.server, "broker:4333");
        assert_eq!(nats.user, Some(("app".into(), "s@cret".into())));
        assert_eq!(nats.stream.as_deref(), Some("PAYMENTS"));
        assert_eq!(nats.subject("wallet.credited"), "pay.hooks.wallet.credited");
        let shown = format!("{nats:?}");
        assert!(!shown.contains("cret"), "{shown}");
        let plain = sink("nats://broker").unwrap();
        assert_eq!(
            (plain.server.as_str(), plain.stream.as_deref()),
            ("broker:4222", None)
        );
        assert_eq!(plain.subject("x"), "webhookd.x");
        assert_eq!(
            sink("nats://tok@broker").unwrap().token.as_deref(),
            Some("tok")
        );
        assert_eq!(sink("tls://broker").unwrap().server, "tls://broker:4222");
        assert!(
            sink("nats://broker?streem=S").is_err(),
            "a misspelt option is refused"
        );
        assert!(sink("nats://broker?subject_prefix=a.*").is_err());
        assert!(sink("amqp://broker").is_err());
    }

    #[test]
    fn subject_patterns_match_as_nats_does() {
        assert!(subject_matches("webhookd.>", "webhookd.wallet.credited"));
        assert!(subject_matches(
            "webhookd.*.credited",
            "webhookd.wallet.credited"
        ));
        assert!(!subject_matches("webhookd.*", "webhookd.wallet.credited"));
        assert!(!subject_matches("webhookd.>", "webhookd"));
        assert!(subject_matches(
            "webhookd.wallet.credited",
            "webhookd.wallet.credited"
        ));
        assert!(!subject_matches("other.>", "webhookd.wallet.credited"));
    }
}
