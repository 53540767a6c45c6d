mod helpers;
mod ingest;
mod lifecycle;
mod signature;
mod stripe;
