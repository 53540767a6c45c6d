//! Hostile clients on a raw socket: bodies announced larger than the limit,
//! bodies that never finish, garbage where HTTP should be. The server must
//! answer (or hang up) on its own, write nothing, and keep serving.

use std::time::Duration;

use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use webhookd::clock::Clock;

use crate::helpers::{TestApp, payment_intent_succeeded, spawn_app_with};

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
