//! What each provider's events do to the tables, in any order, and which
//! accounts' and modes' money they may touch.

pub mod checkout;
pub mod paypal;
pub mod properties;
pub mod razorpay;
pub mod scope;
pub mod stripe;
pub mod thin;
pub mod ties;
