//! The `nats://` sink against a real NATS server with JetStream: one of the
//! test's own (`nats-server` from the machine), on a free port with its
//! store in a scratch directory, so a test may kill and restart it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use sqlx::PgPool;
use webhookd::clock::Clock;
use webhookd::sinks::Problem;

use super::{
    Consumed, assert_delivered_after_retries, assert_exactly, drain_all, drain_within, drainer,
    last_error, seed, seed_sized, sink, states,
};

/// A `nats-server -js` of the test's own.
pub struct NatsServer {
    pub port: u16,
    store: PathBuf,
    auth: Option<(String, String)>,
    child: Option<Child>,
}

impl NatsServer {
    pub async fn start() -> NatsServer {
        Self::start_with(None).await
    }

    /// One that takes only `user` and `password`.
    pub async fn start_with(auth: Option<(&str, &str)>) -> NatsServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store =
            std::env::temp_dir().join(format!("webhookd-nats-{port}-{}", std::process::id()));
        let mut server = NatsServer {
            port,
            store,
            auth: auth.map(|(user, password)| (user.to_owned(), password.to_owned())),
            child: None,
        };
        server.run().await;
        server
    }

    async fn run(&mut self) {
        let mut command = Command::new(nats_server());
        command
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((user, password)) = &self.auth {
            command.args(["--user", user, "--pass", password]);
        }
        self.child = Some(
            command
                .spawn()
                .expect("nats-server runs (scripts/test.sh installs it)"),
        );
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("nats-server did not listen on {}", self.port);
    }

    /// Kills the server outright (nothing flushed, connections cut).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Kills it, then starts it again on the same port and store after
    /// `down` (longer than the sink's timeout: the acks in flight are lost,
    /// not only delayed by the client's reconnect).
    pub async fn restart(&mut self, down: Duration) {
        self.kill();
        tokio::time::sleep(down).await;
        self.run().await;
    }

    pub fn url(&self, query: &str) -> String {
        format!("nats://127.0.0.1:{}{query}", self.port)
    }

    pub async fn jetstream(&self) -> jetstream::Context {
        let client = async_nats::connect(format!("127.0.0.1:{}", self.port))
            .await
            .unwrap();
        jetstream::new(client)
    }

    /// A file-backed stream capturing `subjects`.
    pub async fn stream(&self, name: &str, subjects: &[&str], max_message_size: i32) {
        self.jetstream()
            .await
            .create_stream(stream::Config {
                name: name.to_owned(),
                subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
                storage: stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                max_message_size,
                ..stream::Config::default()
            })
            .await
            .unwrap();
    }

    /// Every message the stream holds, as its consumer reads them.
    pub async fn consume(&self, name: &str) -> Vec<Consumed> {
        let js = self.jetstream().await;
        let mut stream = js.get_stream(name).await.unwrap();
        let last = stream.info().await.unwrap().state.last_sequence;
        let mut consumed = Vec::new();
        for sequence in 1..=last {
            let message = stream.get_raw_message(sequence).await.unwrap();
            let headers: Vec<(String, String)> = message
                .headers
                .iter()
                .flat_map(|(name, values)| {
                    values
                        .iter()
                        .map(move |value| (name.to_string(), value.to_string()))
                })
                .collect();
            let broker_id = headers
                .iter()
                .find(|(name, _)| name == "Nats-Msg-Id")
                .map(|(_, value)| value.clone())
                .expect("each message has its Nats-Msg-Id");
            consumed.push(Consumed {
                broker_id,
                headers,
                body: message.payload,
            });
        }
        consumed
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn nats_server() -> String {
    std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".to_owned())
}

/// How long a delivery to the broker may take.
const TIMEOUT: Duration = Duration::from_secs(2);

#[sqlx::test]
async fn two_thousand_rows_arrive_once_each_across_a_server_restart(pool: PgPool) {
    let mut server = NatsServer::start().await;
    server.stream("PAYMENTS", &["webhookd.>"], -1).await;
    let rows = seed(&pool, 2000).await;
    let (drainer, clock) = drainer(&pool, &server.url("?stream=PAYMENTS"), TIMEOUT, 1000);
    // The server is killed while deliveries are in flight, then comes back.
    drain_all(
        &pool,
        &drainer,
        &clock,
        700,
        server.restart(Duration::from_secs(3)),
    )
    .await;
    assert_delivered_after_retries(&pool, 2000).await;
    let consumed = server.consume("PAYMENTS").await;
    let copies = assert_exactly(&consumed, &rows);
    // A copy re-sent within the duplicate window is dropped by the stream.
    assert_eq!(copies, 2000, "the stream deduped on Nats-Msg-Id");
}

#[sqlx::test]
async fn a_message_the_stream_refuses_is_dead_with_the_reason_and_retry_resends_it(pool: PgPool) {
    let server = NatsServer::start().await;
    // No stream captures webhookd.>; then one whose messages are small.
    let rows = seed(&pool, 1).await;
    let id = *rows.keys().next().unwrap();
    let (drainer, clock) = drainer(&pool, &server.url(""), TIMEOUT, 5);
    assert_eq!(drainer.drain_once().await.unwrap().dead, 1);
    let error = last_error(&pool, id).await;
    assert!(error.contains("no stream found"), "{error}");
    assert!(error.contains("webhookd.wallet.credited"), "{error}");

    server.stream("SMALL", &["webhookd.>"], 64).await;
    let retried = webhookd::outbox::store::retry_dead(&pool, Some(id))
        .await
        .unwrap();
    assert_eq!(retried, vec![id]);
    // Re-queued as of the database\'s now, which has passed the test\'s clock.
    clock.advance(Duration::from_secs(60));
    assert_eq!(drainer.drain_once().await.unwrap().dead, 1);
    let error = last_error(&pool, id).await;
    assert!(
        error.to_lowercase().contains("maximum"),
        "over the stream's size: {error}"
    );

    server
        .jetstream()
        .await
        .delete_stream("SMALL")
        .await
        .unwrap();
    server.stream("PAYMENTS", &["webhookd.>"], -1).await;
    webhookd::outbox::store::retry_dead(&pool, Some(id))
        .await
        .unwrap();
    // Re-queued as of the database\'s now, which has passed the test\'s clock.
    clock.advance(Duration::from_secs(60));
    assert_eq!(drainer.drain_once().await.unwrap().delivered, 1);
    assert_exactly(&server.consume("PAYMENTS").await, &rows);
}

#[sqlx::test]
async fn a_server_down_is_retried_and_everything_arrives_when_it_is_back(pool: PgPool) {
    let mut server = NatsServer::start().await;
    server.stream("PAYMENTS", &["webhookd.>"], -1).await;
    server.kill();
    let rows = seed(&pool, 20).await;
    let (drainer, clock) = drainer(&pool, &server.url("?stream=PAYMENTS"), TIMEOUT, 1000);
    let drained = drainer.drain_once().await.unwrap();
    assert_eq!((drained.retried, drained.dead), (20, 0), "down is not dead");
    let error = last_error(&pool, *rows.keys().next().unwrap()).await;
    assert!(
        error.starts_with("could not connect (127.0.0.1:"),
        "{error}"
    );
    server.restart(Duration::ZERO).await;
    drain_all(&pool, &drainer, &clock, 0, async {}).await;
    assert_eq!(states(&pool).await, (20, 0, 0));
    assert_exactly(&server.consume("PAYMENTS").await, &rows);
}

#[tokio::test]
async fn start_up_says_plainly_what_is_wrong_with_a_nats_sink() {
    let server = NatsServer::start_with(Some(("app", "right"))).await;
    let check = |url: String| async move { sink(&url, TIMEOUT, Clock::System).check().await };
    let wrong = check(format!("nats://app:wrong@127.0.0.1:{}", server.port)).await;
    assert!(
        matches!(&wrong, Err(Problem::Wrong(said)) if said.contains("refused the credentials") && !said.contains("wrong")),
        "{wrong:?}"
    );
    let right = format!("nats://app:right@127.0.0.1:{}", server.port);
    assert_eq!(check(right.clone()).await, Ok(()));
    let missing = check(format!("{right}?stream=NOPE")).await;
    assert!(
        matches!(&missing, Err(Problem::Wrong(said)) if said.contains("the stream NOPE does not exist")),
        "{missing:?}"
    );
    let port = server.port;
    drop(server);
    let down = check(format!("nats://127.0.0.1:{port}")).await;
    assert!(matches!(down, Err(Problem::Unreachable(_))), "{down:?}");
}

#[sqlx::test]
async fn memory_stays_within_the_byte_bound_publishing_to_a_stream(pool: PgPool) {
    let server = NatsServer::start().await;
    server.stream("PAYMENTS", &["webhookd.>"], -1).await;
    // Rows of 400 KiB (under NATS's 1 MiB max_payload); two fit the bound.
    let rows = seed_sized(&pool, 40, 400 * 1024).await;
    let bound = 1024 * 1024;
    let peak = drain_within(&pool, &server.url("?stream=PAYMENTS"), rows.len(), bound).await;
    assert!(peak <= bound, "held {peak} bytes at once, over {bound}");
    assert!(peak > 400 * 1024, "more than one row at a time: {peak}");
    assert_exactly(&server.consume("PAYMENTS").await, &rows);
}
