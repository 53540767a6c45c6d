//! In-process fakes of the providers' APIs, over real HTTP on a free port.

pub mod paypal;
pub mod razorpay;
pub mod server;
pub mod stripe;
