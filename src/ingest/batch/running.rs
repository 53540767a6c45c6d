//! The keys of the batches running their statements, so that batches run
//! at once only when they share none: a later event never overtakes an
//! earlier one of its key. An event whose key a running batch holds waits,
//! and every event behind it that shares a key with it waits too.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use super::Job;
use crate::ingest::engine;

/// Keys held by running batches, counted.
#[derive(Debug, Default)]
pub(super) struct Running {
    keys: Mutex<HashMap<String, usize>>,
    /// Woken when a batch lets its keys go.
    freed: Notify,
}

/// A running batch's hold on its keys, let go when dropped.
pub(super) struct Held {
    running: Arc<Running>,
    keys: Vec<String>,
}

impl Drop for Held {
    fn drop(&mut self) {
        {
            let mut held = self.running.lock();
            for key in &self.keys {
                if let Some(count) = held.get_mut(key) {
                    *count -= 1;
                    if *count == 0 {
                        held.remove(key);
                    }
                }
            }
        }
        self.running.freed.notify_waiters();
    }
}

impl Running {
    /// Takes from the front of `queued`, in order, at most `max` jobs that
    /// share no key with a running batch nor with a job left waiting ahead
    /// of them, and holds their keys.
    pub(super) fn take(
        self: &Arc<Self>,
        queued: &mut VecDeque<Job>,
        max: usize,
    ) -> (Vec<Job>, Held) {
        let mut held = self.lock();
        let mut blocked: HashSet<String> = HashSet::new();
        let mut batch = Vec::new();
        let mut keys = Vec::new();
        let mut left = VecDeque::with_capacity(queued.len());
        while let Some(job) = queued.pop_front() {
            if batch.len() >= max {
                left.push_back(job);
                left.extend(queued.drain(..));
                break;
            }
            let job_keys: Vec<String> = engine::shared_keys(&job.unit).collect();
            let waits = job_keys
                .iter()
                .any(|key| held.contains_key(key) || blocked.contains(key));
            if waits {
                blocked.extend(job_keys);
                left.push_back(job);
            } else {
                keys.extend(job_keys);
                batch.push(job);
            }
        }
        *queued = left;
        keys.sort_unstable();
        keys.dedup();
        for key in &keys {
            *held.entry(key.clone()).or_default() += 1;
        }
        drop(held);
        let hold = Held {
            running: self.clone(),
            keys,
        };
        (batch, hold)
    }

    /// Waits until a running batch lets its keys go; call
    /// [`Running::freed`] before looking, so that none is missed.
    pub(super) fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
