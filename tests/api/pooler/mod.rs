//! webhookd behind a transaction pooler: configured as one, and not.

pub mod bouncer;
pub mod detect;
pub mod transaction;
