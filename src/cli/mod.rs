//! Operator commands. They call the same library entry points as the server.

pub mod outbox;
