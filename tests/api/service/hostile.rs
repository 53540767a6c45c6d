//! Hostile clients on a raw socket: bodies announced larger than the limit,
//! bodies that never finish, garbage where HTTP should be, connections that
//! send nothing or send slowly, oversized heads, too many connections. The
//! server must answer (or hang up) on its own, write nothing, and keep
//! serving.

use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use webhookd::clock::Clock;
use webhookd::providers::stripe::signature_header;

use crate::helpers::{SECRET, TestApp, now, payment_intent_succeeded, spawn_app_with};

/// Generous: only a server that never answers exceeds it.
const PATIENCE: Duration = Duration::from_secs(20);

async fn connect(app: &TestApp) -> TcpStream {
    let address = app.address.trim_start_matches("http://");
    TcpStream::connect(address)
        .await
        .expect("the server accepts")
}

/// Reads until the server closes the connection or `PATIENCE` runs out, and
/// returns the status line ("" if the server hung up without answering).
async fn status_line(stream: &mut TcpStream) -> String {
    let mut response = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    response.extend_from_slice(&buffer[..n]);
                    if response.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("the server answers or hangs up on its own");
    String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn request_head(content_length: usize) -> String {
    format!(
        "POST /webhooks/stripe HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         stripe-signature: t=1,v1=00\r\ncontent-length: {content_length}\r\n\r\n"
    )
}

#[sqlx::test]
async fn a_body_announced_over_the_limit_is_refused_before_it_is_sent(pool: PgPool) {
    let app = spawn_app_with(pool, Clock::System, |_| {}).await;
    let mut stream = connect(&app).await;
    // 1 GiB announced, not a byte of it sent: only a server that refuses
    // on the header alone answers.
    stream
        .write_all(request_head(1 << 30).as_bytes())
        .await
        .unwrap();
    assert_eq!(
        status_line(&mut stream).await,
        "HTTP/1.1 413 Payload Too Large"
    );
    app.assert_nothing_written().await;
}

#[sqlx::test]
async fn a_chunked_body_over_the_limit_is_cut_off_while_streaming(pool: PgPool) {
    let app = spawn_app_with(pool, Clock::System, |s| s.max_body_bytes = 4096).await;
    let mut stream = connect(&app).await;
    stream
        .write_all(
            b"POST /webhooks/stripe HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
              stripe-signature: t=1,v1=00\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .await
        .unwrap();
    // Chunks past the limit, and the body never ends.
    let chunk = format!("400\r\n{}\r\n", "x".repeat(0x400));
    for _ in 0..8 {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    assert_eq!(
        status_line(&mut stream).await,
        "HTTP/1.1 413 Payload Too Large"
    );
    app.assert_nothing_written().await;
}

#[sqlx::test]
async fn a_body_that_never_finishes_is_cut_off_by_the_request_timeout(pool: PgPool) {
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.request_timeout = Duration::from_millis(300);
    })
    .await;
    let mut stream = connect(&app).await;
    stream
        .write_all(format!("{}{{\"id\":", request_head(1000)).as_bytes())
        .await
        .unwrap();
    // The rest of the body never comes.
    assert_eq!(
        status_line(&mut stream).await,
        "HTTP/1.1 503 Service Unavailable"
    );
    app.assert_nothing_written().await;

    // The server still serves everyone else.
    let body = payment_intent_succeeded("evt_after", "pi_after", "user_1", 100);
    app.deliver(&body, "processed").await;
}

#[sqlx::test]
async fn garbage_instead_of_http_gets_no_answer_and_harms_nothing(pool: PgPool) {
    let app = spawn_app_with(pool, Clock::System, |_| {}).await;
    for garbage in [
        &b"\x00\xff\xfe\r\n\r\n"[..],
        b"POST /webhooks/stripe HTTP/1.1\r\nstripe-signature: \x01\x02\r\n\r\n",
        b"POST /webhooks/stripe HTTP/9.9\r\n\r\n",
        b"GET /../../etc/passwd HTTP/1.1\r\nhost: x\r\n\r\n",
    ] {
        let mut stream = connect(&app).await;
        stream.write_all(garbage).await.unwrap();
        let status = status_line(&mut stream).await;
        assert!(
            status.is_empty() || status.starts_with("HTTP/1.1 4"),
            "{garbage:?} got {status:?}"
        );
    }
    app.assert_nothing_written().await;
    let body = payment_intent_succeeded("evt_after", "pi_after", "user_1", 100);
    app.deliver(&body, "processed").await;
}

/// Reads until the server closes the connection (end of file or reset), or
/// panics after `PATIENCE`; returns what the server sent.
async fn until_closed(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("the server closes the connection on its own");
    received
}

/// A Stripe delivery of `body`, signed now, its head grown by an extra
/// header of `padding` bytes.
fn signed_delivery(body: &str, padding: usize) -> Vec<u8> {
    let signature = signature_header(SECRET, now(), body.as_bytes());
    format!(
        "POST /webhooks/stripe HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         stripe-signature: {signature}\r\ncontent-length: {}\r\nx-padding: {}\r\n\r\n{body}",
        body.len(),
        "a".repeat(padding),
    )
    .into_bytes()
}

#[sqlx::test]
async fn silent_connections_and_a_slow_loris_are_closed_by_the_header_timeout_while_a_delivery_is_served(
    pool: PgPool,
) {
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.connections.header_read_timeout = Duration::from_secs(1);
    })
    .await;
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(connect(&app).await);
    }
    // A byte of a head that never ends, every 200 ms.
    let (mut slow_reader, mut slow_writer) = connect(&app).await.into_split();
    let slow_loris = tokio::spawn(async move {
        let head = b"POST /webhooks/stripe HTTP/1.1\r\nhost: localhost\r\nx-padding: ";
        for byte in head.iter().chain(std::iter::repeat(&b'a')) {
            if slow_writer.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });

    let body = payment_intent_succeeded("evt_hostile", "pi_hostile", "user_1", 700);
    app.deliver(&body, "processed").await;
    assert_eq!(app.balance("user_1", "USD").await, Some(700));

    until_closed(&mut slow_reader).await;
    slow_loris.abort();
    for mut stream in silent {
        until_closed(&mut stream).await;
    }
    app.assert_consistent().await;
}

#[sqlx::test]
async fn an_idle_keep_alive_connection_is_closed_by_the_header_timeout(pool: PgPool) {
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.connections.header_read_timeout = Duration::from_secs(1);
    })
    .await;
    let mut stream = connect(&app).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    // One answer, kept alive; then nothing more is asked.
    let received = String::from_utf8_lossy(&until_closed(&mut stream).await).to_lowercase();
    assert!(received.starts_with("http/1.1 200 ok"), "{received}");
    assert!(!received.contains("connection: close"), "{received}");
    assert_eq!(received.matches("http/1.1").count(), 1, "{received}");
}

#[sqlx::test]
async fn a_request_head_over_the_limit_gets_431_and_writes_nothing_and_one_under_it_is_served(
    pool: PgPool,
) {
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.connections.max_header_bytes = 16 * 1024;
    })
    .await;
    let body = payment_intent_succeeded("evt_head", "pi_head", "user_1", 500);

    let mut stream = connect(&app).await;
    // The server may hang up before it has read it all.
    let _ = stream.write_all(&signed_delivery(&body, 20 * 1024)).await;
    assert_eq!(
        status_line(&mut stream).await,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    app.assert_nothing_written().await;

    let mut stream = connect(&app).await;
    stream
        .write_all(&signed_delivery(&body, 12 * 1024))
        .await
        .unwrap();
    assert_eq!(status_line(&mut stream).await, "HTTP/1.1 200 OK");
    assert_eq!(app.balance("user_1", "USD").await, Some(500));
}

#[sqlx::test]
async fn the_connection_cap_closes_the_excess_at_once_and_recovers_when_connections_close(
    pool: PgPool,
) {
    // A header timeout far beyond PATIENCE: only the cap can close them.
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.connections.max_connections = 4;
        s.connections.header_read_timeout = Duration::from_secs(600);
    })
    .await;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(connect(&app).await);
    }
    let body = payment_intent_succeeded("evt_capped", "pi_capped", "user_1", 300);
    let mut fifth = connect(&app).await;
    // The server may have closed it already.
    let _ = fifth.write_all(&signed_delivery(&body, 0)).await;
    let received = until_closed(&mut fifth).await;
    assert!(
        received.is_empty(),
        "{}",
        String::from_utf8_lossy(&received)
    );
    app.assert_nothing_written().await;

    // Their slots free up once the server sees them closed: retry until then.
    drop(silent);
    until_a_slot_delivers(&app, &body, "no slot came free").await;
    assert_eq!(app.balance("user_1", "USD").await, Some(300));
}

#[sqlx::test]
async fn a_client_that_never_reads_its_responses_loses_its_connection_to_the_write_timeout(
    pool: PgPool,
) {
    // One slot, and a header timeout far beyond PATIENCE: only the write
    // timeout can take the slot back from a client that stops reading.
    let app = spawn_app_with(pool, Clock::System, |s| {
        s.connections.max_connections = 1;
        s.connections.header_read_timeout = Duration::from_secs(600);
        s.connections.write_timeout = Duration::from_secs(1);
    })
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let address = app.address.trim_start_matches("http://").parse().unwrap();
    let mut stalled = socket.connect(address).await.unwrap();
    // Pipelined requests for far more response bytes than the buffers
    // hold, and never a read.
    let requests = "GET /metrics HTTP/1.1\r\nhost: localhost\r\n\r\n".repeat(2000);
    let writer = tokio::spawn(async move {
        let _ = stalled.write_all(requests.as_bytes()).await;
        stalled
    });

    let body = payment_intent_succeeded("evt_after_stall", "pi_after_stall", "user_1", 400);
    until_a_slot_delivers(&app, &body, "the stalled client kept its slot").await;
    assert_eq!(app.balance("user_1", "USD").await, Some(400));
    drop(writer);
}

/// Delivers `body` on a new connection, again every 50 ms while the server
/// closes them unanswered (no slot is free), until it is answered 200;
/// fails with `stuck` after PATIENCE.
async fn until_a_slot_delivers(app: &TestApp, body: &str, stuck: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut stream = connect(app).await;
        let _ = stream.write_all(&signed_delivery(body, 0)).await;
        let status = status_line(&mut stream).await;
        if status == "HTTP/1.1 200 OK" {
            break;
        }
        assert!(status.is_empty(), "{status}");
        assert!(Instant::now() < deadline, "{stuck}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
