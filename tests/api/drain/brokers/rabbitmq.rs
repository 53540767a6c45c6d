//! The `amqp://` sink against the machine's RabbitMQ (127.0.0.1:5672,
//! guest/guest; `scripts/test.sh` starts it). Each test has its own
//! exchange and queue, named afresh each run; every test here holds
//! [`exclusive`] (a lock in this process and a file lock across
//! processes), because one of them restarts the broker.

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use sqlx::PgPool;
use tokio::sync::Mutex;
use webhookd::clock::Clock;
use webhookd::sinks::Problem;

use super::{
    Consumed, assert_delivered_after_retries, assert_exactly, drain_all, drain_within, drainer,
    drainer_paced, last_error, seed, seed_sized, sink, states,
};

/// Held by every test here, with a file lock: one of them restarts the
/// broker.
static BROKER: Mutex<()> = Mutex::const_new(());

/// The broker to this test alone, until dropped.
struct Exclusive {
    _guard: tokio::sync::MutexGuard<'static, ()>,
    _file: std::fs::File,
}

async fn exclusive() -> Exclusive {
    let guard = BROKER.lock().await;
    let file = tokio::task::spawn_blocking(|| {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join("webhookd-tests-rabbitmq.lock");
        let file = std::fs::File::create(path).unwrap();
        // SAFETY: flock on a descriptor this function owns.
        assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
        file
    })
    .await
    .unwrap();
    Exclusive {
        _guard: guard,
        _file: file,
    }
}

pub const URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// An exchange and a durable queue of the test's own.
struct Route {
    exchange: String,
    queue: String,
}

impl Route {
    fn new(name: &str) -> Route {
        // Unique across runs: a queue a failed run left holds its messages.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let unique = format!("webhookd_test_{name}_{}_{nanos}", std::process::id());
        Route {
            exchange: unique.clone(),
            queue: unique,
        }
    }

    /// Declares the exchange; with `bound`, a queue bound to every topic.
    async fn declare(&self, bound: bool) {
        self.declare_bound(bound.then_some("#")).await;
    }

    /// Declares the exchange and, with `binding`, a queue bound by it.
    async fn declare_bound(&self, binding: Option<&str>) {
        let channel = channel().await;
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        if let Some(binding) = binding {
            channel
                .queue_declare(
                    self.queue.as_str().into(),
                    QueueDeclareOptions {
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .unwrap();
            channel
                .queue_bind(
                    self.queue.as_str().into(),
                    self.exchange.as_str().into(),
                    binding.into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
        }
    }

    fn url(&self) -> String {
        format!("{URL}?exchange={}", self.exchange)
    }

    /// Every message in the queue, taken off it.
    async fn consume(&self) -> Vec<Consumed> {
        let channel = channel().await;
        let mut consumed = Vec::new();
        while let Some(got) = channel
            .basic_get(self.queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let properties = &got.delivery.properties;
            assert_eq!(properties.delivery_mode(), &Some(2), "persistent");
            let headers = properties
                .headers()
                .as_ref()
                .expect("the webhook-* headers")
                .inner()
                .iter()
                .map(|(name, value)| {
                    let AMQPValue::LongString(value) = value else {
                        panic!("header {name} is not a string: {value:?}");
                    };
                    (name.to_string(), value.to_string())
                })
                .collect();
            consumed.push(Consumed {
                broker_id: properties
                    .message_id()
                    .as_ref()
                    .expect("message_id")
                    .to_string(),
                headers,
                body: got.delivery.data.clone().into(),
            });
        }
        consumed
    }

    async fn delete(&self) {
        let channel = channel().await;
        let _ = channel
            .queue_delete(self.queue.as_str().into(), QueueDeleteOptions::default())
            .await;
        let _ = channel
            .exchange_delete(
                self.exchange.as_str().into(),
                ExchangeDeleteOptions::default(),
            )
            .await;
    }
}

async fn channel() -> Channel {
    let connection = Connection::connect(URL, ConnectionProperties::default())
        .await
        .expect("RabbitMQ runs on 127.0.0.1:5672 (scripts/test.sh starts it)");
    connection.create_channel().await.unwrap()
}

/// Stops the broker's application and starts it again: every connection
/// is cut from the broker's side; durable queues and persistent messages
/// survive.
async fn restart_broker() {
    for step in ["stop_app", "start_app"] {
        let status = tokio::task::spawn_blocking(move || {
            // `sudo -n rabbitmqctl` where the tests do not run as root.
            let command =
                std::env::var("WEBHOOKD_RABBITMQCTL").unwrap_or_else(|_| "rabbitmqctl".to_owned());
            let mut words = command.split_whitespace();
            std::process::Command::new(words.next().expect("a command"))
                .args(words)
                .arg(step)
                .stdout(std::process::Stdio::null())
                .status()
        })
        .await
        .unwrap()
        .expect("rabbitmqctl runs");
        assert!(status.success(), "rabbitmqctl {step}");
    }
    for _ in 0..400 {
        if Connection::connect(URL, ConnectionProperties::default())
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("RabbitMQ did not come back");
}

/// How long a delivery to the broker may take.
const TIMEOUT: Duration = Duration::from_secs(5);

#[sqlx::test]
async fn two_thousand_rows_arrive_across_a_broker_restart(pool: PgPool) {
    let _broker = exclusive().await;
    let route = Route::new("restart");
    route.declare(true).await;
    let rows = seed(&pool, 2000).await;
    // One publish at a time: rabbitmqctl takes a second or two to act, and
    // the rows must not all be through by then.
    let (drainer, clock) = drainer_paced(&pool, &route.url(), TIMEOUT, 1000, 1);
    drain_all(&pool, &drainer, &clock, 300, restart_broker()).await;
    assert_delivered_after_retries(&pool, 2000).await;
    // At least once: a message confirmed late may arrive twice, with one id.
    let consumed = route.consume().await;
    let copies = assert_exactly(&consumed, &rows);
    assert!(copies >= 2000);
    route.delete().await;
}

#[sqlx::test]
async fn an_unroutable_message_is_dead_with_the_reason_and_retry_resends_it(pool: PgPool) {
    let _broker = exclusive().await;
    let route = Route::new("unroutable");
    route.declare(false).await;
    let rows = seed(&pool, 1).await;
    let id = *rows.keys().next().unwrap();
    let (drainer, clock) = drainer(&pool, &route.url(), TIMEOUT, 5);
    assert_eq!(drainer.drain_once().await.unwrap().dead, 1);
    let error = last_error(&pool, id).await;
    assert!(error.contains("NO_ROUTE"), "{error}");
    assert!(error.contains("wallet.credited"), "{error}");

    route.declare(true).await;
    webhookd::outbox::store::retry_dead(&pool, Some(id))
        .await
        .unwrap();
    // Re-queued as of the database\'s now, which has passed the test\'s clock.
    clock.advance(Duration::from_secs(60));
    assert_eq!(drainer.drain_once().await.unwrap().delivered, 1);
    assert_exactly(&route.consume().await, &rows);

    // An exchange that does not exist is refused for good too.
    let missing = Route::new("missing");
    let rows = seed(&pool, 1).await;
    let id = *rows.keys().next().unwrap();
    let (to_missing, _) = super::drainer(&pool, &missing.url(), TIMEOUT, 5);
    assert_eq!(to_missing.drain_once().await.unwrap().dead, 1);
    let error = last_error(&pool, id).await;
    assert!(error.contains("NOT_FOUND"), "{error}");
    assert!(!error.contains("guest:guest"), "{error}");
    route.delete().await;
}

#[sqlx::test]
async fn a_broker_unreachable_is_retried_not_dead(pool: PgPool) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rows = seed(&pool, 3).await;
    let url = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let (drainer, _) = drainer(&pool, &url, TIMEOUT, 5);
    let drained = drainer.drain_once().await.unwrap();
    assert_eq!((drained.retried, drained.dead), (3, 0));
    let error = last_error(&pool, *rows.keys().next().unwrap()).await;
    assert!(
        error.starts_with("could not connect (127.0.0.1)"),
        "{error}"
    );
    assert!(!error.contains("guest"), "{error}");
}

#[tokio::test]
async fn start_up_says_plainly_what_is_wrong_with_an_amqp_sink() {
    let _broker = exclusive().await;
    let check = |url: String| async move { sink(&url, TIMEOUT, Clock::System).check().await };
    let wrong = check("amqp://guest:nope@127.0.0.1:5672/%2f".to_owned()).await;
    assert!(
        matches!(&wrong, Err(Problem::Wrong(said)) if said.contains("refused the user and password") && !said.contains("nope")),
        "{wrong:?}"
    );
    assert_eq!(
        check(URL.to_owned()).await,
        Ok(()),
        "amq.topic is on every vhost"
    );
    let missing = check(format!("{URL}?exchange=webhookd_no_such_exchange")).await;
    assert!(
        matches!(&missing, Err(Problem::Wrong(said)) if said.contains("the exchange webhookd_no_such_exchange does not exist")),
        "{missing:?}"
    );
}

/// The binary itself: `config check` and `serve` with credentials RabbitMQ
/// refuses say so and stop; with a broker that cannot be reached, `config
/// check` only warns.
#[tokio::test]
async fn config_check_and_serve_refuse_credentials_the_broker_refuses() {
    let _broker = exclusive().await;
    let run = |args: &'static [&'static str], url: String| async move {
        tokio::task::spawn_blocking(move || {
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_webhookd"))
                .env_clear()
                .env("DATABASE_URL", "postgres://app@127.0.0.1:1/webhookd")
                .env("WEBHOOKD_SINK_URL", url)
                .args(args)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr);
            (output.status.code(), said)
        })
        .await
        .unwrap()
    };
    let wrong = "amqp://guest:not-the-password@127.0.0.1:5672/%2f".to_owned();
    let (code, said) = run(&["config", "check"], wrong.clone()).await;
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("WEBHOOKD_SINK_URL: could not connect (127.0.0.1)"),
        "{said}"
    );
    assert!(
        said.contains("RabbitMQ refused the user and password"),
        "{said}"
    );
    assert!(!said.contains("not-the-password"), "{said}");
    // serve stops before it touches the database (none listens on port 1).
    let (code, said) = run(&["serve"], wrong).await;
    assert_ne!(code, Some(0), "{said}");
    assert!(
        said.contains("RabbitMQ refused the user and password"),
        "{said}"
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let (code, said) = run(&["config", "check"], down).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.starts_with("warning: WEBHOOKD_SINK_URL: could not connect"),
        "{said}"
    );
    assert!(said.ends_with("ok\n"), "{said}");
}

#[sqlx::test]
async fn memory_stays_within_the_byte_bound_publishing_to_an_exchange(pool: PgPool) {
    let _broker = exclusive().await;
    let route = Route::new("memory");
    route.declare(true).await;
    // Rows of 2 MiB; two fit the bound, a third does not.
    let rows = seed_sized(&pool, 30, 2 * 1024 * 1024).await;
    let bound = 5 * 1024 * 1024;
    let peak = drain_within(&pool, &route.url(), rows.len(), bound).await;
    assert!(peak <= bound, "held {peak} bytes at once, over {bound}");
    assert!(
        peak > 2 * 1024 * 1024,
        "more than one row at a time: {peak}"
    );
    assert_exactly(&route.consume().await, &rows);
    route.delete().await;
}

/// Deliveries in flight at once, some returned unroutable: each return is
/// matched to its own message, so exactly the unroutable rows are dead and
/// every routed one is delivered.
#[sqlx::test]
async fn concurrent_returns_are_each_matched_to_their_own_message(pool: PgPool) {
    let _broker = exclusive().await;
    let route = Route::new("returns");
    route.declare_bound(Some("wallet.*")).await;
    let topics: Vec<(i64, String)> = sqlx::query_as(
        "insert into outbox (topic, dedupe_key, provider, event_id, payload)
         select case when g % 3 = 0 then 'payment.failed' else 'wallet.credited' end,
                'stripe:' || gen_random_uuid(), 'stripe', 'evt_' || g, jsonb_build_object('n', g)
         from generate_series(1, 120) g
         returning id, topic",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let (drainer, clock) = drainer(&pool, &route.url(), TIMEOUT, 5);
    drain_all(&pool, &drainer, &clock, 0, async {}).await;
    let dead: std::collections::BTreeSet<i64> =
        sqlx::query_scalar("select id from outbox where dead_at is not null")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let unroutable: std::collections::BTreeSet<i64> = topics
        .iter()
        .filter(|(_, topic)| topic == "payment.failed")
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(dead, unroutable, "exactly the unroutable rows are dead");
    assert_eq!(states(&pool).await, (80, 40, 0));
    let routed: std::collections::BTreeMap<i64, i64> = sqlx::query_as(
        "select id, (payload->>'n')::int8 from outbox where topic = 'wallet.credited'",
    )
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_exactly(&route.consume().await, &routed);
    route.delete().await;
}
