//! A mounted verifier, bound to the source it is mounted as: each event it
//! verifies carries that source ([`super::Event::received_by`]), so that what the
//! source does with its events (record only, its owner rule) and its name
//! (the `source` column) travel with the event.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::HeaderMap;

use super::{Receiver, SignatureError, VerifiedEvent, Verify, verified};

#[derive(Debug)]
pub(super) struct Received {
    verifier: Box<dyn Verify>,
    receiver: Arc<Receiver>,
}

impl Received {
    pub(super) fn new(verifier: Box<dyn Verify>, receiver: Arc<Receiver>) -> Self {
        Received { verifier, receiver }
    }
}

impl Verify for Received {
    fn prepare<'a>(
        &'a self,
        headers: &'a HeaderMap,
        now: i64,
    ) -> BoxFuture<'a, Result<(), SignatureError>> {
        self.verifier.prepare(headers, now)
    }

    fn verify(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        now: i64,
    ) -> Result<VerifiedEvent, SignatureError> {
        let delivery = self.verifier.verify(headers, body, now)?;
        let secret = delivery.secret_index();
        let event = delivery
            .into_event()
            .received_by(Some(self.receiver.clone()));
        Ok(verified(event, secret))
    }
}
