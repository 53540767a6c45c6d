//! The transactional outbox: rows written in the ingest transaction, to be
//! delivered at least once to the user's own systems, each with a stable id.

pub mod store;

pub use store::enqueue;

/// The channel the ingest transaction notifies when it writes outbox rows.
pub const CHANNEL: &str = "webhookd_outbox";
