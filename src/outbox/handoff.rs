//! Rows this process writes, leased to its own drainer at insert and
//! handed to it in memory after the commit: no lease statement, and no
//! read back of what this process wrote a millisecond earlier.
//!
//! - The ingest transaction runs inside [`leasing`]: each outbox row it
//!   writes is inserted with its first attempt started (`attempts = 1`,
//!   `locked_until` = now + the lease), and what the drainer needs to
//!   deliver it is kept aside. A savepoint rolled back forgets its rows
//!   ([`mark`], [`forget_since`]).
//! - After the commit the engine hands them over ([`Waker::hand`]); the
//!   drainer takes them ([`Waker::take`]) as it would a lease's rows, and
//!   records their outcomes against `(id, 1)` as for any row.
//! - What it cannot hold (the rows waiting here and those it holds add up
//!   to its byte budget, so its memory bound stays what it was) is given
//!   back as `released` by its next record statement: due at once, the
//!   attempt not spent, leased by the usual statement.
//! - A process that dies holding handed rows leaves them leased; the lease
//!   expires and any drainer takes them, as after any crash.
//!
//! Only a drainer that runs continuously in this process, with unordered
//! delivery, takes handed rows ([`Waker::accept`]): rows of one ordering
//! key must wait for older ones, which only the lease statement sees.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use tokio::time::Instant;

use crate::sinks::Message;

/// A row written leased to this process, and when: its lease runs from
/// its insert, however long it then waits to be delivered.
#[derive(Debug, Clone)]
pub struct Written {
    pub message: Message,
    pub at: Instant,
}

/// Wakes a drainer of this process at once, e.g. after ingest committed
/// outbox rows: cheaper and sooner than a notification through Postgres;
/// and, while that drainer [`accepts`](Waker::accept) them, carries the
/// rows leased to it at insert. Cheap to clone; a wake while the drainer
/// is busy is kept for later.
#[derive(Debug, Clone, Default)]
pub struct Waker(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    notify: Notify,
    /// Rows may be due that only a lease finds: set by [`Waker::wake`],
    /// never by [`Waker::hand`].
    lease_wanted: AtomicBool,
    handed: Mutex<Handed>,
}

#[derive(Debug, Default)]
struct Handed {
    /// The lease (seconds) rows are inserted with; `None`: the drainer
    /// takes no handed rows now.
    lease_secs: Option<f64>,
    /// Most payload bytes waiting here and held by the drainer together:
    /// its byte budget, so the handoff adds nothing to its memory bound.
    max_bytes: u64,
    /// Payload bytes the drainer holds (queued or in flight).
    drainer_bytes: u64,
    rows: VecDeque<Written>,
    bytes: u64,
    /// `(id, attempts)` of rows handed beyond `max_bytes`: to give back.
    overflow: Vec<(i64, i32)>,
}

/// What the drainer takes at once: rows to deliver, and rows to give back
/// unstarted.
#[derive(Debug, Default)]
pub struct Taken {
    pub rows: Vec<Written>,
    pub given_back: Vec<(i64, i32)>,
}

impl Waker {
    /// Wakes the drainer to lease: rows were written that it was not
    /// handed.
    pub fn wake(&self) {
        self.0.lease_wanted.store(true, Ordering::Release);
        self.0.notify.notify_one();
    }

    /// Whether a wake asked for a lease since the last call.
    pub(super) fn lease_wanted(&self) -> bool {
        self.0.lease_wanted.swap(false, Ordering::AcqRel)
    }

    /// Wakes when [`Waker::wake`] is called (or was, while nobody waited).
    pub(super) async fn woken(&self) {
        self.0.notify.notified().await;
    }

    /// The lease the rows this process writes are inserted with, while its
    /// drainer accepts them.
    pub fn lease_secs(&self) -> Option<f64> {
        self.lock().lease_secs
    }

    /// The drainer takes handed rows from now on (`Some(lease)`), holding at
    /// most `max_bytes` of payload here, or no longer (`None`).
    pub(super) fn accept(&self, lease_secs: Option<f64>, max_bytes: u64) {
        let mut handed = self.lock();
        handed.lease_secs = lease_secs;
        handed.max_bytes = max_bytes;
    }

    /// Hands `rows`, committed and leased to this process, to its drainer,
    /// and wakes it to take them (not to lease).
    pub fn hand(&self, rows: Vec<Written>) {
        if rows.is_empty() {
            return;
        }
        {
            let mut handed = self.lock();
            for row in rows {
                let bytes = row.message.payload.len() as u64;
                let held = handed.bytes + handed.drainer_bytes;
                // A row larger than the budget waits alone, as a lease takes it.
                let alone = held == 0;
                if held + bytes > handed.max_bytes && !alone {
                    handed.overflow.push((row.message.id, row.message.attempts));
                    continue;
                }
                handed.bytes += bytes;
                handed.rows.push_back(row);
            }
        }
        self.0.notify.notify_one();
    }

    /// Takes at most `rows` handed rows whose payloads add up to at most
    /// `bytes` (the first one whatever its size when `oversized`), and
    /// every row to give back.
    pub(super) fn take(&self, rows: usize, bytes: u64, oversized: bool) -> Taken {
        let mut handed = self.lock();
        let mut taken = Taken {
            rows: Vec::new(),
            given_back: std::mem::take(&mut handed.overflow),
        };
        let mut room = bytes;
        while let Some(row) = handed.rows.front()
            && taken.rows.len() < rows
        {
            let size = row.message.payload.len() as u64;
            if size > room && !(oversized && taken.rows.is_empty()) {
                break;
            }
            room = room.saturating_sub(size);
            handed.bytes -= size;
            taken.rows.extend(handed.rows.pop_front());
        }
        taken
    }

    /// The drainer now holds `bytes` of payload.
    pub(super) fn drainer_holds(&self, bytes: u64) {
        self.lock().drainer_bytes = bytes;
    }

    /// Whether rows wait to be taken or given back.
    pub(super) fn has_handed(&self) -> bool {
        let handed = self.lock();
        !handed.rows.is_empty() || !handed.overflow.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Handed> {
        self.0.handed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The drainers of this process, one a sink, by the sink's name: what
/// ingest wakes after its commit. Rows are handed over in memory only when
/// the process drains one sink; with several, each drainer leases its own.
#[derive(Debug, Clone, Default)]
pub struct Wakers(Arc<[(String, Waker)]>);

impl Wakers {
    pub fn new(wakers: Vec<(String, Waker)>) -> Self {
        Wakers(wakers.into())
    }

    /// Each drainer's waker.
    pub fn each(&self) -> impl Iterator<Item = &Waker> {
        self.0.iter().map(|(_, waker)| waker)
    }

    /// How the rows a transaction writes are leased to this process: to its
    /// one drainer, while that drainer accepts them.
    pub fn lease(&self) -> Option<Lease> {
        match &*self.0 {
            [(sink, waker)] => waker.lease_secs().map(|secs| Lease {
                secs,
                sink: sink.clone(),
            }),
            _ => None,
        }
    }

    /// After a commit: hands `rows` (written with [`Wakers::lease`]) to the
    /// drainer of their sink, and wakes every other drainer to lease.
    pub fn hand(&self, lease: Option<&Lease>, rows: Vec<Written>) {
        let mut rows = Some(rows);
        for (sink, waker) in self.0.iter() {
            if lease.is_some_and(|lease| lease.sink == *sink)
                && let Some(rows) = rows.take()
            {
                // Written leased to it (or nothing written): no lease to run.
                waker.hand(rows);
            } else {
                waker.wake();
            }
        }
    }
}

tokio::task_local! {
    static LEASING: Leasing;
}

/// The rows one transaction writes leased to this process.
struct Leasing {
    lease: Lease,
    rows: RefCell<Vec<Written>>,
}

/// How the rows of one sink are written leased to this process's drainer
/// of that sink.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub secs: f64,
    pub sink: String,
}

/// Runs `transaction` so that the outbox rows it writes for `lease`'s sink
/// are leased to this process at insert (`None`: as usual, not leased):
/// its output, and what to hand to that sink's drainer once it committed.
pub async fn leasing<T>(
    lease: Option<Lease>,
    transaction: impl Future<Output = T>,
) -> (T, Vec<Written>) {
    let Some(lease) = lease else {
        return (transaction.await, Vec::new());
    };
    let leasing = Leasing {
        lease,
        rows: RefCell::default(),
    };
    let (output, leasing) = LEASING
        .scope(leasing, async move {
            let output = transaction.await;
            (output, LEASING.with(|l| l.rows.take()))
        })
        .await;
    (output, leasing)
}

/// The lease rows written now are inserted with, inside [`leasing`].
pub(super) fn lease() -> Option<Lease> {
    LEASING.try_with(|l| l.lease.clone()).ok()
}

/// Keeps `rows`, just written leased, for the drainer.
pub(super) fn keep(rows: Vec<Message>) {
    let at = Instant::now();
    let written = rows.into_iter().map(|message| Written { message, at });
    let _ = LEASING.try_with(|l| l.rows.borrow_mut().extend(written));
}

/// How many rows are kept so far (a savepoint's start), inside [`leasing`].
pub fn mark() -> Option<usize> {
    LEASING.try_with(|l| l.rows.borrow().len()).ok()
}

/// Forgets the rows kept since `mark`: the savepoint that wrote them rolled
/// back.
pub fn forget_since(mark: Option<usize>) {
    if let Some(mark) = mark {
        let _ = LEASING.try_with(|l| l.rows.borrow_mut().truncate(mark));
    }
}
