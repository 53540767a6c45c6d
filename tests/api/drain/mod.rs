//! The outbox drainer: deliveries to a user's app, their retries, order,
//! memory and pipelining, to brokers, and what the commands print of them.

pub mod brokers;
pub mod cli;
pub mod handoff;
pub mod memory;
pub mod order;
pub mod outbox;
pub mod pipeline;
pub mod retry;
pub mod sink;
pub mod sinks;
