mod helpers;
mod ingest;
mod lifecycle;
mod outbox;
mod razorpay;
mod schemes;
mod signature;
mod stripe;
