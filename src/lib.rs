//! webhookd: receives payment-provider webhooks, verifies them on their raw
//! bytes, and applies each event exactly once in one Postgres transaction.

pub mod api;
pub mod arrivals;
pub mod cli;
pub mod clock;
pub mod config;
pub mod db;
pub mod doctor;
pub mod effects;
pub mod erasure;
pub mod events;
pub mod fetch;
pub mod http;
pub mod ingest;
pub mod invoices;
pub mod ledger;
pub mod money;
pub mod outbox;
pub mod owners;
pub mod payments;
pub mod providers;
pub mod secrets;
pub mod sinks;
pub mod startup;
pub mod story;
pub mod subscriptions;
pub mod sweep;
pub mod telemetry;
