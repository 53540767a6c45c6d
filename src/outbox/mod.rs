//! The transactional outbox: rows written in the ingest transaction, to be
//! delivered at least once to the user's own systems, each with a stable id.

mod drainer;
pub mod handoff;
mod pipeline;
mod recorder;
pub mod retry;
pub mod store;
mod topics;
pub mod worker;

// The read side, for the console and metrics.
pub use handoff::{Lease, Waker, Wakers, leasing};
pub use store::{Depth, Listed, browse, depth, depth_by_sink, retry_dead};
pub use store::{Message, enqueue, enqueue_one, notify};
pub use topics::{DEFAULT_SINK, Topics};
pub use worker::{Drainer, DrainerSettings, give_back, give_back_all};

/// The channel the ingest transaction notifies when it writes outbox rows.
pub const CHANNEL: &str = "webhookd_outbox";
