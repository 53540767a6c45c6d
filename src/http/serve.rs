//! The accept loop: HTTP/1.1 connections served by hyper with a deadline
//! on every request head, a bound on its size, and a cap on how many
//! connections are open at once.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long the loop waits after an accept error (say, out of descriptors)
/// before it accepts again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A repeated warning (accept errors, refused connections) is logged at
/// most this often, with how many happened since.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Files the process holds besides client connections and the pooled
/// database connections: the listener, the drainer's LISTEN connection,
/// log output, resolver and TLS files.
pub const RESERVED_FILES: u64 = 64;

#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Deadline for a request head, counted from when hyper starts waiting
    /// for it (after each response too: the idle keep-alive timeout).
    pub header_read_timeout: Duration,
    /// Longest a write may wait for the client to read (no progress at all).
    pub write_timeout: Duration,
    /// Largest request head; larger ones get 431. Also the read buffer's cap.
    pub max_header_bytes: usize,
    /// Most connections open at once (already held below the file limit).
    pub max_connections: usize,
    /// Whether handlers are told who connected (`ConnectInfo`: the
    /// console's failure buckets). Off on the public listener, where no
    /// handler asks and each connection would pay for it.
    pub with_peer_address: bool,
}

/// Serves `router` on `listener` until `shutdown` is cancelled; then stops
/// accepting, asks every open connection to close once its request in
/// flight is answered, and waits for them for at most `grace`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let http = http1(&limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let mut accept_errors = Throttle::new(WARN_EVERY);
    let mut refusals = Throttle::new(WARN_EVERY);
    while let Some(stream) = accept(&listener, &shutdown, &mut accept_errors).await {
        // Full: close the new connection at once rather than queue it, so
        // that those already open are served and clients retry.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Some(refused) = refusals.tick(Instant::now()) {
                tracing::warn!(
                    refused,
                    max_connections = limits.max_connections,
                    "connection limit reached: closing new connections"
                );
            }
            drop(stream);
            continue;
        };
        // Handlers may ask who connected (the console's failure buckets).
        let peer = limits
            .with_peer_address
            .then(|| stream.peer_addr().ok())
            .flatten();
        let service = match peer {
            Some(peer) => router.clone().layer(Extension(ConnectInfo(peer))),
            None => router.clone(),
        };
        let connection = http.serve_connection(
            TokioIo::new(WriteTimeout::new(stream, limits.write_timeout)),
            TowerToHyperService::new(service),
        );
        connections.spawn(serve_connection(connection, shutdown.clone(), slot));
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(grace, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "in-flight requests outlived the shutdown grace period"
        );
    }
}

/// HTTP/1.1 with the deadline and the size bound on every request head.
fn http1(limits: &ConnectionLimits) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_header_size(limits.max_header_bytes)
        // hyper's smallest allowed buffer is 8 KiB.
        .max_buf_size(limits.max_header_bytes.max(8192));
    http
}

/// The next connection, or `None` once `shutdown` is cancelled. A failed
/// accept of the listener itself (say, out of descriptors) is logged,
/// throttled by `errors`, and tried again after [`ACCEPT_BACKOFF`].
async fn accept(
    listener: &TcpListener,
    shutdown: &CancellationToken,
    errors: &mut Throttle,
) -> Option<TcpStream> {
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => return None,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => return Some(stream),
            // The client gave up before we accepted: nothing to do.
            Err(error) if is_connection_error(&error) => {}
            Err(error) => {
                if let Some(errors) = errors.tick(Instant::now()) {
                    tracing::error!(%error, errors, "cannot accept connections; retrying");
                }
                tokio::select! {
                    () = shutdown.cancelled() => return None,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                }
            }
        }
    }
}

type Connection = http1::Connection<TokioIo<WriteTimeout>, TowerToHyperService<Router>>;

/// Serves `connection` to its end, holding its `slot` until then; once
/// `shutdown` is cancelled, it closes after its request in flight.
async fn serve_connection(
    connection: Connection,
    shutdown: CancellationToken,
    slot: OwnedSemaphorePermit,
) {
    let _slot = slot;
    let mut connection = pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    // Timeouts, oversized heads, clients hanging up: routine.
    if let Err(error) = served {
        tracing::debug!(%error, "connection closed");
    }
}

/// Errors of one connection, not of the listener: Linux's accept(2) also
/// passes on the network errors of the new connection.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::NetworkDown
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::HostUnreachable
    ) || error.raw_os_error() == Some(libc::EPROTO)
}

/// A connection whose writes fail once one has waited `timeout` without
/// any progress: a client that stops reading cannot hold its connection
/// (and its slot) by leaving the server's responses unread. The deadline
/// starts when a write first has to wait and is cleared by any progress.
struct WriteTimeout {
    stream: TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteTimeout {
    fn new(stream: TcpStream, timeout: Duration) -> Self {
        WriteTimeout {
            stream,
            timeout,
            stalled: None,
        }
    }

    /// Passes `poll` on, unless it has waited past the timeout.
    fn guard<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteTimeout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteTimeout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.guard(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_flush(cx);
        this.guard(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.guard(cx, poll)
    }
}

/// Says when to log a repeated event: its first occurrence, then at most
/// once per interval.
struct Throttle {
    every: Duration,
    last: Option<Instant>,
    unlogged: u64,
}

impl Throttle {
    fn new(every: Duration) -> Self {
        Throttle {
            every,
            last: None,
            unlogged: 0,
        }
    }

    /// Counts one event at `now`; when it is time to log, returns how many
    /// happened since the last log, this one included.
    fn tick(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.every)
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// Raises the soft limit on open files to the hard limit, logging both, and
/// returns the soft limit in force (`None` if it cannot be read). Not being
/// allowed to raise it is only a warning.
pub fn raise_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only to the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let error = io::Error::last_os_error();
        tracing::warn!(%error, "cannot read the open-file limit");
        return None;
    }
    let (soft, hard): (u64, u64) = (limit.rlim_cur, limit.rlim_max);
    if soft >= hard {
        tracing::info!(soft, hard, "open-file limit already at its hard limit");
        return Some(soft);
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        let error = io::Error::last_os_error();
        tracing::warn!(%error, soft, hard, "cannot raise the open-file limit; keeping it");
        return Some(soft);
    }
    tracing::info!(
        old_soft = soft,
        new_soft = hard,
        hard,
        "raised the open-file limit"
    );
    Some(hard)
}

/// The connection cap in force: the configured one, held below the
/// open-file limit less `reserved` descriptors (at least one connection).
pub fn effective_max_connections(configured: u64, open_files: Option<u64>, reserved: u64) -> u64 {
    match open_files {
        Some(limit) => configured.min(limit.saturating_sub(reserved)).max(1),
        None => configured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_stays_below_the_file_limit_and_never_grows() {
        assert_eq!(effective_max_connections(4096, Some(1024), 80), 944);
        assert_eq!(effective_max_connections(4, Some(1024), 80), 4);
        assert_eq!(effective_max_connections(4096, Some(1 << 20), 80), 4096);
        assert_eq!(effective_max_connections(4096, None, 80), 4096);
        assert_eq!(effective_max_connections(4096, Some(50), 80), 1);
    }

    #[test]
    fn a_repeated_warning_is_logged_first_then_once_per_interval() {
        let start = Instant::now();
        let mut throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.tick(start), Some(1));
        assert_eq!(throttle.tick(start + Duration::from_secs(1)), None);
        assert_eq!(throttle.tick(start + Duration::from_secs(2)), None);
        assert_eq!(throttle.tick(start + Duration::from_secs(10)), Some(3));
        assert_eq!(throttle.tick(start + Duration::from_secs(11)), None);
    }
}
