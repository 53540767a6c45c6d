//! The operator's commands, their effects asserted in the database.

pub mod checkout;
pub mod commands;
pub mod config_file;
pub mod doctor;
pub mod erase;
pub mod partitions;
pub mod reconcile_against;
pub mod restore;
