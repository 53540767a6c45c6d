//! The operator's commands, their effects asserted in the database.

pub mod commands;
pub mod reconcile_against;
