//! The real binary: `migrate`, `serve`, and a clean exit on SIGTERM.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use sqlx::PgPool;
use webhookd::db::MIGRATOR;
use webhookd::providers::stripe::signature_header;
use webhookd::telemetry;

use crate::helpers::{SECRET, now, payment_intent_succeeded};

pub(crate) fn database_url(pool: &PgPool) -> String {
    let options = pool.connect_options();
    format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options
            .get_database()
            .expect("the test database has a name"),
    )
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[sqlx::test]
async fn migrations_are_idempotent(pool: PgPool) {
    MIGRATOR.run(&pool).await.unwrap();
    MIGRATOR.run(&pool).await.unwrap();
    assert!(webhookd::db::migrations_applied(&pool).await.unwrap());
}

/// The real binary, serving on a free port.
pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    /// Read as the server writes them, so a full pipe never blocks it.
    logs: Vec<std::thread::JoinHandle<String>>,
}

/// A test that fails midway leaves no server running.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut logs = Vec::new();
        let _ = pipe.read_to_end(&mut logs);
        String::from_utf8_lossy(&logs).into_owned()
    })
}

impl Server {
    async fn start(database_url: &str) -> Server {
        Server::start_with(database_url, &[]).await
    }

    pub(crate) async fn start_with(database_url: &str, env: &[(&str, &str)]) -> Server {
        let port = free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_webhookd"));
        // The test's own OTEL_* variables would send the server's spans away.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command
            .envs(env.iter().copied())
            .env("DATABASE_URL", database_url)
            .env("WEBHOOKD_LISTEN", format!("127.0.0.1:{port}"))
            .env("WEBHOOKD_ADMIN_LISTEN", "127.0.0.1:0")
            .env("STRIPE_WEBHOOK_SECRET", SECRET)
            .env("WEBHOOKD_LOG_FORMAT", "json");
        Server::spawn(command, port).await
    }

    /// `command` (the binary, configured to serve on `port`), once ready.
    pub(crate) async fn spawn(mut command: Command, port: u16) -> Server {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = vec![
            read_all(child.stdout.take().unwrap()),
            read_all(child.stderr.take().unwrap()),
        ];
        let server = Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
            logs,
        };
        // Wait (bounded) until it answers: start-up, not a correctness sleep.
        for _ in 0..400 {
            let response = server
                .client
                .get(format!("{}/readyz", server.base))
                .send()
                .await;
            if response.is_ok_and(|r| r.status() == StatusCode::OK) {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the server did not become ready");
    }

    pub(crate) fn post(
        &self,
        body: String,
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> + use<> {
        self.client
            .post(format!("{}/webhooks/stripe", self.base))
            .header(
                "stripe-signature",
                signature_header(SECRET, now(), body.as_bytes()),
            )
            .body(body)
            .send()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// Waits for the process to exit; its status and everything it logged.
    pub(crate) async fn wait(mut self) -> (ExitStatus, String) {
        tokio::task::spawn_blocking(move || {
            let status = self.child.wait().unwrap();
            let logs = std::mem::take(&mut self.logs)
                .into_iter()
                .map(|l| l.join().unwrap())
                .collect();
            (status, logs)
        })
        .await
        .unwrap()
    }
}

/// Waits (bounded) until a webhookd connection waits on a row lock.
async fn until_blocked_on_a_lock(pool: &PgPool, failure: &str) {
    for _ in 0..400 {
        let blocked: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where application_name = 'webhookd' and wait_event_type = 'Lock'
               and datname = current_database()",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if blocked > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{failure}");
}

pub(crate) async fn balance(pool: &PgPool, user_id: &str) -> Option<i64> {
    sqlx::query_scalar("select balance_minor from wallets where user_id = $1")
        .bind(user_id)
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn the_binary_migrates_serves_and_stops_cleanly_on_sigterm(pool: PgPool) {
    let url = database_url(&pool);
    let migrate = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .arg("migrate")
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(webhookd::db::migrations_applied(&pool).await.unwrap());

    let server = Server::start(&url).await;
    let body = payment_intent_succeeded("evt_bin", "pi_bin", "user_bin", 4200);
    let response = server.post(body).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(balance(&pool, "user_bin").await, Some(4200));
    for n in 0..2 {
        let body =
            payment_intent_succeeded(&format!("evt_bin{n}"), &format!("pi_bin{n}"), "user_bin", 1);
        assert_eq!(server.post(body).await.unwrap().status(), StatusCode::OK);
    }

    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "exit status {status:?}; logs:\n{logs}");
    // The deliveries' tally is written by the time the process exits.
    let arrived: i64 = sqlx::query_scalar(
        "select coalesce(sum(deliveries), 0)::bigint from source_arrivals where source = 'stripe'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(arrived, 3);
    // The ids that reach the user's systems start from the clock: none a
    // database restored from a backup handed out before.
    let (outbox, entry): (i64, i64) =
        sqlx::query_as("select (select min(id) from outbox), (select min(id) from wallet_entries)")
            .fetch_one(&pool)
            .await
            .unwrap();
    let an_hour_ago_us = (crate::helpers::now() - 3_600) * 1_000_000;
    assert!(
        outbox > an_hour_ago_us && entry > an_hour_ago_us,
        "{outbox} {entry}"
    );
    assert!(
        logs.contains("\"event_id\":\"evt_bin\""),
        "every webhook is logged with its event id:\n{logs}"
    );
    assert!(!logs.contains(SECRET), "the secret reached the logs");
}

#[sqlx::test]
async fn a_server_killed_mid_transaction_leaves_nothing_and_the_retry_applies(pool: PgPool) {
    let url = database_url(&pool);
    let server = Server::start(&url).await;
    let first = payment_intent_succeeded("evt_before", "pi_before", "user_crash", 100);
    assert_eq!(server.post(first).await.unwrap().status(), StatusCode::OK);

    // Hold the wallet row: the next delivery stops inside its transaction,
    // after its claim and its ledger entry, waiting for the wallet update.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("select 1 from wallets where user_id = 'user_crash' for update")
        .execute(&mut *holder)
        .await
        .unwrap();
    let second = payment_intent_succeeded("evt_crash", "pi_crash", "user_crash", 50);
    let in_flight = tokio::spawn(server.post(second.clone()));
    until_blocked_on_a_lock(&pool, "the delivery never reached the wallet update").await;

    server.signal("-KILL");
    let (status, _) = server.wait().await;
    assert!(!status.success());
    assert!(
        in_flight.await.unwrap().is_err(),
        "a killed server answered"
    );
    holder.rollback().await.unwrap();

    // Postgres rolls the orphaned transaction back once its backend notices
    // the client is gone; wait for that backend to end.
    let mut gone = false;
    for _ in 0..400 {
        let backends: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where application_name = 'webhookd' and datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if backends == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(gone, "the killed server's connections outlived it");
    let events: Vec<String> = sqlx::query_scalar("select event_id from processed_events")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        events,
        ["evt_before"],
        "neither the claim nor its effects survive"
    );
    assert_eq!(balance(&pool, "user_crash").await, Some(100));

    // The provider retries against a new process: applied exactly once.
    let restarted = Server::start(&url).await;
    let response = restarted.post(second).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let answer: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answer["outcome"], "processed");
    assert_eq!(balance(&pool, "user_crash").await, Some(150));
    let entries: i64 = sqlx::query_scalar("select count(*) from wallet_entries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(entries, 2);
    restarted.signal("-TERM");
    assert!(restarted.wait().await.0.success());
}

/// Every secret the server below is configured with.
const SECRETS: [(&str, &str); 4] = [
    ("RAZORPAY_WEBHOOK_SECRET", "rzp_secret_that_must_not_leak"),
    ("WEBHOOKD_SOURCE_GH_SECRET", "gh_secret_that_must_not_leak"),
    (
        "WEBHOOKD_SINK_SECRET",
        "whsec_c2luay1zZWNyZXQtdGhhdC1tdXN0LW5vdC1sZWFr",
    ),
    (
        "WEBHOOKD_SINK_URL",
        "http://127.0.0.1:1/hooks?token=sink_token_that_must_not_leak",
    ),
];

#[sqlx::test]
async fn sigterm_mid_request_finishes_it_commits_and_exits_cleanly_and_no_secret_is_logged(
    pool: PgPool,
) {
    // The test server trusts local connections, so the password is never
    // checked; it must not be logged all the same.
    let url = database_url(&pool).replacen(
        "://postgres@",
        "://postgres:db_password_that_must_not_leak@",
        1,
    );
    assert!(url.contains("db_password_that_must_not_leak"), "{url}");
    let mut env = SECRETS.to_vec();
    env.extend([
        ("WEBHOOKD_SOURCE_GH_SCHEME", "github"),
        ("RUST_LOG", "debug"),
    ]);
    let server = Server::start_with(&url, &env).await;
    let first = payment_intent_succeeded("evt_warm", "pi_warm", "user_term", 100);
    assert_eq!(server.post(first).await.unwrap().status(), StatusCode::OK);
    // Refused deliveries log too: make sure they do so without secrets.
    let forged = server
        .client
        .post(format!("{}/webhooks/razorpay", server.base))
        .header("x-razorpay-signature", "0".repeat(64))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::BAD_REQUEST);

    // Hold the wallet so the next request stops inside its transaction.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("select 1 from wallets where user_id = 'user_term' for update")
        .execute(&mut *holder)
        .await
        .unwrap();
    let in_flight = tokio::spawn(server.post(payment_intent_succeeded(
        "evt_term",
        "pi_term",
        "user_term",
        50,
    )));
    until_blocked_on_a_lock(&pool, "the request never reached the wallet update").await;

    server.signal("-TERM");
    holder.rollback().await.unwrap();
    let response = in_flight.await.unwrap().unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the in-flight request is finished"
    );
    let (status, logs) = server.wait().await;
    assert!(status.success(), "exit status {status:?}; logs:\n{logs}");
    assert_eq!(
        balance(&pool, "user_term").await,
        Some(150),
        "and its event committed"
    );

    assert!(logs.contains("evt_term"), "the webhook was logged:\n{logs}");
    for (name, secret) in SECRETS
        .iter()
        .chain([("STRIPE_WEBHOOK_SECRET", SECRET)].iter())
        .chain([("DATABASE_URL", "db_password_that_must_not_leak")].iter())
    {
        assert!(!logs.contains(secret), "{name} reached the logs");
    }
}

#[sqlx::test]
async fn no_field_from_the_network_reaches_a_log_line_unbounded(pool: PgPool) {
    let server = Server::start_with(&database_url(&pool), &[("RUST_LOG", "debug")]).await;
    let long = |c: &str| c.repeat(30_000);
    // A path, a request id and a method of 30,000 characters each.
    let path = server
        .client
        .post(format!("{}/webhooks/{}", server.base, long("A")))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(path.status(), StatusCode::NOT_FOUND);
    let request_id = server
        .client
        .get(format!("{}/healthz", server.base))
        .header("x-request-id", long("B"))
        .send()
        .await
        .unwrap();
    assert_eq!(request_id.status(), StatusCode::OK);
    let method = reqwest::Method::from_bytes(long("C").as_bytes()).unwrap();
    let method = server
        .client
        .request(method, format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert!(method.status().is_client_error(), "{}", method.status());
    // And a signed event whose long id is refused by the effects.
    let event = payment_intent_succeeded("evt_long", &format!("pi_{}", long("D")), "user_1", 1);
    let rejected: serde_json::Value = server.post(event).await.unwrap().json().await.unwrap();
    assert_eq!(rejected["outcome"], "rejected");

    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "exit status {status:?}");
    assert!(
        logs.contains("…(30010 bytes)"),
        "the path is logged, cut:\n{logs}"
    );
    for c in ["A", "B", "C", "D"] {
        let run = c.repeat(telemetry::MAX_LOGGED_BYTES + 1);
        assert!(
            logs.lines().all(|line| !line.contains(&run)),
            "more than {} {c}s reached one log line",
            telemetry::MAX_LOGGED_BYTES
        );
    }
}

/// One request to the fake OpenTelemetry collector.
struct Export {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// A fake OTLP/HTTP collector on `listener`: every request it gets, on any
/// path, is sent to the receiver as soon as its body is read, before it is
/// answered (200 with an empty message, a valid export response).
fn collector(listener: tokio::net::TcpListener) -> tokio::sync::mpsc::UnboundedReceiver<Export> {
    let (sender, exports) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let sender = sender.clone();
        async move {
            let path = request.uri().path().to_owned();
            let content_type = request
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap_or_default()
                .to_vec();
            let _ = sender.send(Export {
                path,
                content_type,
                body,
            });
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    exports
}

/// A length-delimited protobuf field (`tag` is field number and wire type 2).
fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![tag, u8::try_from(bytes.len()).unwrap()];
    out.extend_from_slice(bytes);
    out
}

/// A `KeyValue` attribute with a string value, as OTLP encodes it.
fn string_attribute(key: &str, value: &str) -> Vec<u8> {
    let any_value = field(0x0a, value.as_bytes());
    [field(0x0a, key.as_bytes()), field(0x12, &any_value)].concat()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[sqlx::test]
async fn spans_reach_an_otlp_collector_and_are_flushed_on_sigterm(pool: PgPool) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let mut exports = collector(listener);
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
    let server = Server::start_with(&database_url(&pool), &env).await;
    let body = payment_intent_succeeded("evt_otlp", "pi_otlp", "user_otlp", 100);
    assert_eq!(server.post(body).await.unwrap().status(), StatusCode::OK);

    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "exit status {status:?}; logs:\n{logs}");
    // The spans were exported at the latest while the process exited; the
    // wait is bounded all the same.
    let first = tokio::time::timeout(Duration::from_secs(10), exports.recv())
        .await
        .expect("no export reached the collector")
        .unwrap();
    let mut received = vec![first];
    while let Ok(export) = exports.try_recv() {
        received.push(export);
    }
    for export in &received {
        assert_eq!(export.path, "/v1/traces");
        assert_eq!(export.content_type, "application/x-protobuf");
    }
    let bodies = received
        .iter()
        .flat_map(|e| e.body.clone())
        .collect::<Vec<_>>();
    // Span.name is field 5; the resource and span attributes are KeyValues.
    assert!(
        contains(&bodies, &field(0x2a, b"request")),
        "the request span"
    );
    assert!(
        contains(&bodies, &field(0x2a, b"webhook")),
        "the webhook span"
    );
    for (key, value) in [
        ("service.name", "webhookd"),
        ("provider", "stripe"),
        ("event_id", "evt_otlp"),
        ("outcome", "processed"),
    ] {
        let attribute = string_attribute(key, value);
        assert!(contains(&bodies, &attribute), "{key}={value}");
    }
    assert!(
        contains(&bodies, b"webhook processed"),
        "the webhook's log line, as a span event"
    );
    assert!(
        !contains(&bodies, SECRET.as_bytes()),
        "the secret was exported"
    );
}

#[sqlx::test]
async fn without_an_endpoint_no_span_leaves_the_process(pool: PgPool) {
    // The SDK's default endpoint (localhost:4318): where an exporter built
    // without one would send. Skipped when something else holds the port.
    let Ok(listener) = tokio::net::TcpListener::bind("127.0.0.1:4318").await else {
        eprintln!("skipped: 127.0.0.1:4318 is in use");
        return;
    };
    let mut exports = collector(listener);
    // No OTEL_* variable reaches the server (`Server::start_with`).
    let server = Server::start(&database_url(&pool)).await;
    let body = payment_intent_succeeded("evt_no_otlp", "pi_no_otlp", "user_no_otlp", 100);
    assert_eq!(server.post(body).await.unwrap().status(), StatusCode::OK);
    server.signal("-TERM");
    let (status, logs) = server.wait().await;
    assert!(status.success(), "exit status {status:?}; logs:\n{logs}");
    // An exporter would have sent its spans before the process ended (it
    // flushes them at exit), and the collector queues a request before
    // answering it: whatever was sent is in the channel by now.
    assert!(
        exports.try_recv().is_err(),
        "a request reached the collector"
    );
}

#[sqlx::test]
async fn a_collector_that_never_answers_holds_neither_deliveries_nor_the_exit(pool: PgPool) {
    // Connections are queued by the kernel and never accepted: each export
    // waits until it gives up.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", stalled.local_addr().unwrap());
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
    let server = Server::start_with(&database_url(&pool), &env).await;
    for n in 0..3 {
        let body = payment_intent_succeeded(&format!("evt_st{n}"), "pi_st", "user_st", 100);
        assert_eq!(server.post(body).await.unwrap().status(), StatusCode::OK);
    }
    server.signal("-TERM");
    // The last spans are waited for at most telemetry::SPAN_FLUSH_LIMIT.
    let limit = telemetry::SPAN_FLUSH_LIMIT + Duration::from_secs(10);
    let (status, logs) = tokio::time::timeout(limit, server.wait())
        .await
        .expect("the exit waited on the collector");
    assert!(status.success(), "exit status {status:?}; logs:\n{logs}");
    assert!(
        !logs.contains(&endpoint),
        "the endpoint was logged:\n{logs}"
    );
}
