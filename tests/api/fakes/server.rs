//! What every fake shares: an axum server on a free port that stops when
//! the fake is dropped, its state (`S`, the fake's own) behind a watch
//! channel so held requests can wait, scripted failures, the requests it
//! answered (`R`, each fake's own record), and pages held half way.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A running fake; its server stops when this is dropped. The fake's own
/// calls are an `impl` of its `FakeServer<S, R>`; the shared ones are its
/// [`Handle`]'s.
pub struct FakeServer<S, R> {
    address: SocketAddr,
    handle: Handle<S, R>,
    shutdown: CancellationToken,
}

/// The state a fake's handlers share with its test.
pub struct Handle<S, R>(Arc<watch::Sender<Shared<S, R>>>);

struct Shared<S, R> {
    fake: S,
    /// Status and `Retry-After` of each failure yet to answer.
    failures: VecDeque<(u16, Option<u64>)>,
    requests: Vec<R>,
    /// Pages served, the count at which to start holding, requests held now.
    served: usize,
    pause_at: Option<usize>,
    held: usize,
}

impl<S, R> Clone for Handle<S, R> {
    fn clone(&self) -> Self {
        Handle(self.0.clone())
    }
}

impl<S, R> FakeServer<S, R>
where
    S: Send + Sync + 'static,
    R: Send + Sync + 'static,
{
    /// Serves `routes` on a free port of 127.0.0.1 with `fake` as the state.
    pub async fn serve(fake: S, routes: Router<Handle<S, R>>) -> FakeServer<S, R> {
        let handle = Handle(Arc::new(watch::Sender::new(Shared {
            fake,
            failures: VecDeque::new(),
            requests: Vec::new(),
            served: 0,
            pause_at: None,
            held: 0,
        })));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (address, shutdown) = (listener.local_addr().unwrap(), CancellationToken::new());
        let server = axum::serve(listener, routes.with_state(handle.clone()));
        let stop = shutdown.clone().cancelled_owned();
        tokio::spawn(server.with_graceful_shutdown(stop).into_future());
        FakeServer {
            address,
            handle,
            shutdown,
        }
    }
}

impl<S, R> FakeServer<S, R> {
    /// `http://127.0.0.1:PORT`, the API base.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl<S, R> Deref for FakeServer<S, R> {
    type Target = Handle<S, R>;

    fn deref(&self) -> &Handle<S, R> {
        &self.handle
    }
}

impl<S, R> Drop for FakeServer<S, R> {
    fn drop(&mut self) {
        self.handle.release();
        self.shutdown.cancel();
    }
}

impl<S, R> Handle<S, R> {
    /// What `f` reads of the fake's state.
    pub fn read<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&self.0.borrow().fake)
    }

    /// Changes the fake's state (waking held requests).
    pub fn modify<T>(&self, f: impl FnOnce(&mut S) -> T) -> T {
        let mut out = None;
        self.0.send_modify(|s| out = Some(f(&mut s.fake)));
        out.unwrap()
    }

    /// Answers the next `times` requests that ask (each fake says which),
    /// before any other check, with `status` (and `Retry-After:
    /// retry_after` if given). Calls queue up.
    pub fn fail_next(&self, status: u16, times: usize, retry_after: Option<u64>) {
        let failures = std::iter::repeat_n((status, retry_after), times);
        self.0.send_modify(|s| s.failures.extend(failures));
    }

    /// The next scripted failure, if any: for a handler to answer with.
    pub fn next_failure(&self) -> Option<(u16, Option<u64>)> {
        let mut failure = None;
        self.0.send_modify(|s| failure = s.failures.pop_front());
        failure
    }

    /// Keeps one answered request.
    pub fn record(&self, request: R) {
        self.0.send_modify(|s| s.requests.push(request));
    }

    /// Every request answered so far, oldest first (a held one once answered).
    pub fn requests(&self) -> Vec<R>
    where
        R: Clone,
    {
        self.0.borrow().requests.clone()
    }

    /// Pages served so far.
    pub fn served(&self) -> usize {
        self.0.borrow().served
    }

    /// Once `pages` more pages (from now) have been served, holds further
    /// pages in [`admit`](Self::admit) until [`release`](Self::release).
    pub fn pause_after(&self, pages: usize) {
        self.0.send_modify(|s| s.pause_at = Some(s.served + pages));
    }

    /// Lets held requests go and stops holding new ones.
    pub fn release(&self) {
        self.0.send_modify(|s| s.pause_at = None);
    }

    /// Waits until a request is held (one whose client gave up still counts).
    pub async fn paused(&self) {
        let mut state = self.0.subscribe();
        state.wait_for(|s| s.held > 0).await.unwrap();
    }

    /// Waits while pages are being held, then counts one page served, and
    /// gives the count.
    pub async fn admit(&self) -> usize {
        let (mut changes, mut held) = (self.0.subscribe(), false);
        loop {
            let (mut admitted, mut served) = (false, 0);
            self.0.send_if_modified(|s| {
                admitted = s.pause_at.is_none_or(|at| s.served < at);
                s.served += usize::from(admitted);
                s.held = s.held + usize::from(!admitted && !held) - usize::from(admitted && held);
                served = s.served;
                !admitted && !held
            });
            if admitted {
                return served;
            }
            held = true;
            changes.changed().await.unwrap();
        }
    }
}

/// An HTTP status and the JSON body sent with it.
pub type Failure = (u16, Value);

/// `body` with `status`, as JSON.
pub fn respond((status, body): Failure) -> Response {
    (StatusCode::from_u16(status).unwrap(), Json(body)).into_response()
}

/// `response` with `Retry-After: retry_after`, if given.
pub fn with_retry_after(mut response: Response, retry_after: Option<u64>) -> Response {
    let retry_after = retry_after.map(|seconds| (header::RETRY_AFTER, seconds.into()));
    response.headers_mut().extend(retry_after);
    response
}

/// Splits a raw query into percent-decoded pairs (`+` is a space).
pub fn parse_query(raw: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let (mut out, mut i) = (vec![], 0);
        while let Some(&byte) = s.as_bytes().get(i) {
            let hex = s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16));
            let (byte, width) = match (byte, hex) {
                (b'%', Some(Ok(decoded))) => (decoded, 3),
                (b'+', _) => (b' ', 1),
                _ => (byte, 1),
            };
            out.push(byte);
            i += width;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let pairs = raw.split('&').filter(|pair| !pair.is_empty());
    let pairs = pairs.map(|pair| pair.split_once('=').unwrap_or((pair, "")));
    pairs.map(|(k, v)| (decode(k), decode(v))).collect()
}
