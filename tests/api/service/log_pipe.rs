//! Whatever becomes of the log output (closed, full, gone before start-up),
//! the service serves, SIGTERM stops it within the grace period with status
//! 0, and commands whose output is closed exit quietly.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use sqlx::PgPool;

use crate::service::lifecycle::{database_url, free_port};

const GRACE: &str = "5s";

/// A server process, killed if the test fails before it stopped.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `webhookd serve` with its stdout and stderr on pipes the test holds.
fn serve(database_url: &str, port: u16) -> (Running, ChildStdout, ChildStderr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .env("DATABASE_URL", database_url)
        .env("WEBHOOKD_LISTEN", format!("127.0.0.1:{port}"))
        .env("WEBHOOKD_ADMIN_LISTEN", "127.0.0.1:0")
        .env("STRIPE_WEBHOOK_SECRET", "whsec_log_pipe")
        .env("WEBHOOKD_SHUTDOWN_GRACE", GRACE)
        .env("WEBHOOKD_LOG_FORMAT", "json")
        // Plenty of lines: enough to fill a pipe nobody reads.
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    (Running(Some(child)), stdout, stderr)
}

/// Reads `stdout` until the "listening" line; returns the reader, which the
/// caller then stops reading (or drops).
fn until_listening(stdout: ChildStdout) -> BufReader<ChildStdout> {
    let mut lines = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            lines.read_line(&mut line).unwrap() > 0,
            "the output ended before the server listened"
        );
        if line.contains("\"listening\"") {
            return lines;
        }
    }
}

/// Polls `url` (bounded) until it answers 200: start-up, not a
/// correctness sleep.
async fn until_ok(client: &reqwest::Client, url: &str) {
    for _ in 0..400 {
        if client
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{url} never answered 200");
}

/// Sends SIGTERM and waits for the exit, failing past the grace period and
/// a margin.
async fn terminate(mut running: Running) -> ExitStatus {
    let mut child = running.0.take().expect("running");
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let started = Instant::now();
    tokio::task::spawn_blocking(move || {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if started.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("still running 15 s after SIGTERM (grace {GRACE})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap()
}

fn dropped(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("webhookd_log_lines_dropped_total "))
        .expect("the metric is exported")
        .trim()
        .parse()
        .unwrap()
}

#[sqlx::test]
async fn sigterm_stops_the_server_after_its_log_output_closed(pool: PgPool) {
    let port = free_port();
    let (child, stdout, stderr) = serve(&database_url(&pool), port);
    drop(until_listening(stdout));
    drop(stderr);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..20 {
        let health = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
    }
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    let metrics = client.get(format!("{base}/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(dropped(&metrics) > 0, "lines were logged after the close");
    // The drainer of this process (of the sink `default`) reports its
    // statements and memory.
    for name in [
        "webhookd_outbox_lease_statements_total",
        "webhookd_outbox_record_statements_total",
        "webhookd_outbox_abandoned_total",
        "webhookd_outbox_held_bytes",
        "webhookd_outbox_peak_held_bytes",
    ] {
        let series = format!("{name}{{sink=\"default\"}} ");
        let exported = metrics.lines().any(|l| l.starts_with(&series));
        assert!(exported, "{name}");
    }
    let status = terminate(child).await;
    assert!(status.success(), "{status:?}");
}

#[sqlx::test]
async fn sigterm_stops_the_server_whose_log_reader_stopped_reading(pool: PgPool) {
    let port = free_port();
    let (child, stdout, stderr) = serve(&database_url(&pool), port);
    // Held open and never read again: the pipe fills up.
    let _stalled = (until_listening(stdout), stderr);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    // Far more than the pipe (64 KiB) and the queue in front of it (4,096
    // lines) hold: every request logs lines.
    let url = format!("{base}/readyz");
    for _ in 0..40 {
        let answers =
            futures_util::future::join_all((0..50).map(|_| client.get(&url).send())).await;
        for answer in answers {
            assert_eq!(answer.unwrap().status(), StatusCode::OK);
        }
    }
    let metrics = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert!(
        dropped(&metrics.text().await.unwrap()) > 0,
        "the stalled output dropped lines"
    );
    let status = terminate(child).await;
    assert!(status.success(), "{status:?}");
}

#[sqlx::test]
async fn a_server_whose_log_output_closed_before_start_up_serves_and_stops(pool: PgPool) {
    let port = free_port();
    let (child, stdout, stderr) = serve(&database_url(&pool), port);
    drop((stdout, stderr));
    let client = reqwest::Client::new();
    until_ok(&client, &format!("http://127.0.0.1:{port}/readyz")).await;
    let status = terminate(child).await;
    assert!(status.success(), "{status:?}");
}

#[sqlx::test]
async fn a_command_whose_output_is_closed_exits_quietly(pool: PgPool) {
    // Far more output than a pipe holds, so writes fail once it is closed.
    sqlx::query(
        "insert into processed_events (provider, event_id, event_type, outcome, payload)
         select 'stripe', 'evt_head_' || g, 'payment_intent.succeeded', 'processed', '{}'
         from generate_series(1, 20000) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_webhookd"))
        .env("DATABASE_URL", database_url(&pool))
        .args(["events", "list", "--limit", "20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -1`: one line, then the reader goes away.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("evt_head_"), "{first}");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status:?}: {stderr}");
}
