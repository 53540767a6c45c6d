//! The ingest transaction, alone and in batches (group commit), and what it
//! does with poison, arbitrary values and a database that is not ready;
//! each event decoded once on the way.

pub mod arbitrary;
pub mod batch;
pub mod batch_mixed;
pub mod claim;
pub mod decoded_once;
pub mod parity;
pub mod poison;
pub mod running;
pub mod schedule;
pub mod transaction;
pub mod unavailable;
