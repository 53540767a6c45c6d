//! The transactional outbox: rows written in the ingest transaction, to be
//! delivered at least once to the user's own systems, each with a stable id.

mod drainer;
pub mod handoff;
mod pipeline;
mod recorder;
pub mod retry;
pub mod store;
pub mod worker;

// The read side, for the console and metrics.
pub use handoff::{Waker, leasing};
pub use store::{Depth, Listed, browse, depth, retry_dead};
pub use store::{Message, enqueue, enqueue_one, notify};
pub use worker::{Drainer, DrainerSettings, give_back};

/// The channel the ingest transaction notifies when it writes outbox rows.
pub const CHANNEL: &str = "webhookd_outbox";
