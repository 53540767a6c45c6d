mod helpers;
mod ingest;
mod lifecycle;
mod razorpay;
mod schemes;
mod signature;
mod stripe;
