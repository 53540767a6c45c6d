//! The ingest transaction, alone and in batches (group commit), and what it
//! does with poison, arbitrary values and a database that is not ready.

pub mod arbitrary;
pub mod batch;
pub mod batch_mixed;
pub mod parity;
pub mod poison;
pub mod transaction;
pub mod unavailable;
