//! Sweeps of the providers' APIs for events that never arrived, against
//! fakes of those APIs (`crate::fakes`).

pub mod bounds;
pub mod connect;
pub mod paypal;
pub mod paypal_refusals;
pub mod preemption;
pub mod properties;
pub mod razorpay;
pub mod sources;
pub mod stripe;
