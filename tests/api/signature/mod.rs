//! Verification of deliveries: every provider's signature scheme, PayPal's
//! certificates, and the parsers under arbitrary bytes.

pub mod fuzz;
pub mod paypal;
pub mod paypal_certs;
pub mod schemes;
pub mod sources;
pub mod stripe;
