//! The event the ingest engine applies, and the sealed [`VerifiedEvent`]
//! that only signature verification makes.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::owners::Rule;

use super::{
    Scope, SignatureError, UNKNOWN_TYPE, is_identifier, parse_object, payload, paypal, razorpay,
    stripe,
};

/// Whose effects table applies to an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Stripe,
    Razorpay,
    Paypal,
    /// A configured generic source: verified, deduped, forwarded.
    Source,
}

/// How an event reached webhookd: the `received_via` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A delivery to `POST /webhooks/{provider}`, its signature checked.
    Webhook,
    /// Listed by the provider's API over TLS with our key (`webhookd sweep`).
    Sweep,
    /// Recorded without effects by `webhookd import`.
    Import,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Webhook => "webhook",
            Via::Sweep => "sweep",
            Via::Import => "import",
        }
    }
}

/// An event's parsed envelope and the exact bytes it was read from: what
/// the ingest engine applies. It comes from one of three named paths:
/// - a delivery whose signature checked out ([`VerifiedEvent`], the only
///   way the webhook routes reach the engine);
/// - a provider's API listing, read over TLS with our key (the sweep's
///   `listed_event` of [`stripe`] and [`razorpay`]);
/// - a row this service verified and stored itself ([`Event::from_stored`]:
///   deferred events, replays; tests and benches build theirs this way).
///
/// Only `providers` builds one.
#[derive(Debug, Clone)]
pub struct Event {
    pub(super) provider: Arc<str>,
    pub(super) kind: Kind,
    pub(super) event_id: String,
    pub(super) event_type: String,
    pub(super) created: Option<i64>,
    pub(super) object: Value,
    pub(super) raw: Bytes,
    /// What to store instead of `raw` when `raw` cannot be stored as is.
    pub(super) stored: Option<String>,
    pub(super) via: Via,
    /// Stripe's `livemode`: whether the event is a live one (`None` when
    /// the envelope does not say, or the scheme has no modes).
    pub(super) livemode: Option<bool>,
    /// Stripe's `account`: the connected account whose event it is (`None`
    /// for the platform's own; an account that is not a string is kept as
    /// an empty one, present but unlisted).
    pub(super) account: Option<String>,
    /// Stripe's `api_version`: the API version a snapshot event's object is
    /// rendered in (`None` when the envelope does not say).
    pub(super) api_version: Option<String>,
    /// Why its source's [`Scope`] does not take it ([`Event::within`]):
    /// it is then recorded `rejected` with this reason, touching nothing.
    pub(super) refusal: Option<String>,
    /// The endpoint that received it and what that endpoint does with its
    /// events ([`Receiver`]): every mounted source stamps its deliveries.
    /// `None`: it came through no endpoint (a sweep found it; a test built
    /// it), and is judged as its provider's built-in source's.
    pub(super) receiver: Option<Arc<Receiver>>,
    /// A Stripe thin event's reference to what it is about, and what was
    /// fetched for it (`None` for every other event).
    pub(super) thin: Option<Box<Thin>>,
    /// Whether its object was refreshed from the API on a tie
    /// ([`Event::refreshed`]); `None`: it was not tried.
    pub(super) refreshed: Option<Refreshed>,
}

/// What came of refreshing a subscription event's object on a tie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// Its object is the subscription as Stripe's API served it now.
    Current,
    /// The API could not give it: the event applies as delivered, and this
    /// is why.
    Failed(String),
}

/// A Stripe thin event (`object: "v2.core.event"`): its payload names what
/// it is about, without its data, which is fetched from Stripe's API
/// before its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thin {
    /// `related_object`: the API resource the event is about.
    pub related: Option<Related>,
    /// `context`: whose the event is (a connected account), sent back as
    /// `Stripe-Context` when fetching.
    pub context: Option<String>,
    pub fetched: Fetched,
}

/// A thin event's `related_object`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    pub id: String,
    /// The object's type (`payment_intent`).
    pub kind: String,
    /// Where Stripe's API serves it (`/v1/payment_intents/pi_…`).
    pub url: String,
}

/// What was fetched for a thin event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// Nothing yet: its data is not known.
    Not,
    /// Its object ([`Event::object`]): the related object when the event is
    /// of a v1 type webhookd applies, else the event as Stripe's API
    /// serves it.
    Found,
    /// It could not be fetched for good: the reason it is rejected with.
    Refused(String),
}

/// A configured source as the events it receives carry it: its name (the
/// `source` column), whether it only records, and its owner rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receiver {
    pub name: String,
    /// `WEBHOOKD_SOURCE_<NAME>_EFFECTS=record`: verified, deduped, stored
    /// and forwarded as `source.<name>`; no effect applied.
    pub record_only: bool,
    /// `WEBHOOKD_SOURCE_<NAME>_OWNER`; `None`: the scheme's default.
    pub owner: Option<Rule>,
    /// `WEBHOOKD_SOURCE_<NAME>_INVOICE_CREDITS=true`: a paid invoice also
    /// credits its owner by `amount_paid` (Stripe).
    pub invoice_credits: bool,
    /// `WEBHOOKD_SOURCE_<NAME>_API_VERSION` (Stripe): the API version its
    /// endpoint is pinned to; `None`: none expected.
    pub api_version: Option<String>,
}

impl Event {
    /// The provider (or generic source) name: the `provider` column.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn event_id(&self) -> &str {
        &self.event_id
    }

    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The event's own time (Unix seconds), as the provider stamped it.
    pub fn created(&self) -> Option<i64> {
        self.created
    }

    /// What the event is about: Stripe's `data.object`, Razorpay's `payload`
    /// (its entities by name), a generic source's whole body.
    pub fn object(&self) -> &Value {
        &self.object
    }

    /// How the event reached us.
    pub fn via(&self) -> Via {
        self.via
    }

    /// The same event, recorded as arriving `via` (an API listing's event
    /// imported rather than applied, say).
    pub fn arrived_via(self, via: Via) -> Self {
        Event { via, ..self }
    }

    /// The connected account whose event it is (Stripe Connect's
    /// `account`, a thin event's `context`); `None`: the platform's own.
    pub fn account(&self) -> Option<&str> {
        self.account
            .as_deref()
            .filter(|account| !account.is_empty())
    }

    /// The API version its object is rendered in (Stripe's `api_version`).
    pub fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }

    /// Why its source does not take it, when it does not: the reason it is
    /// recorded `rejected` with, without effects.
    pub fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    /// The same event, judged by `scope` (its mode and account): see
    /// [`Event::refusal`]. A refusal it carries already (an account sweep's,
    /// [`Event::listed_for`]) stands.
    pub fn within(self, scope: &Scope) -> Self {
        let refusal = self
            .refusal
            .or_else(|| scope.refusal(self.livemode, self.account.as_deref()));
        Event { refusal, ..self }
    }

    /// The event, as listed by a sweep of connected account `account`'s
    /// events (with `Stripe-Account`): it is that account's. An event that
    /// names another account is refused (the sweep skips it, recording
    /// nothing): an answer for another account than the one asked is not
    /// to be believed.
    pub fn listed_for(self, account: &str) -> Self {
        match self.account.as_deref() {
            None => Event {
                account: Some(account.to_owned()),
                ..self
            },
            Some(own) if own == account => self,
            Some(_) => Event {
                refusal: Some(format!(
                    "listed for connected account {account} but of another account"
                )),
                ..self
            },
        }
    }

    /// The same event, as received by `receiver` (a configured source).
    pub fn received_by(self, receiver: Option<Arc<Receiver>>) -> Self {
        Event { receiver, ..self }
    }

    /// The source that received it (its name: `stripe` for the built-in
    /// one, `connected` for `WEBHOOKD_SOURCE_CONNECTED_*`); `None` when it
    /// came through no endpoint ([`Event::received_by`]).
    pub fn source(&self) -> Option<&str> {
        self.receiver.as_ref().map(|r| r.name.as_str())
    }

    /// The source configuration it carries ([`Event::received_by`]).
    pub fn receiver(&self) -> Option<&Arc<Receiver>> {
        self.receiver.as_ref()
    }

    /// Whether its source only records its events (forwards them, applies
    /// nothing).
    pub fn record_only(&self) -> bool {
        self.receiver.as_ref().is_some_and(|r| r.record_only)
    }

    /// Whether a paid invoice credits its owner ([`Receiver::invoice_credits`]).
    pub fn invoice_credits(&self) -> bool {
        self.receiver.as_ref().is_some_and(|r| r.invoice_credits)
    }

    /// Where its owner is written: its source's rule, else its scheme's
    /// default.
    pub fn owner_rule(&self) -> &Rule {
        match self.receiver.as_ref().and_then(|r| r.owner.as_ref()) {
            Some(rule) => rule,
            None => match self.kind {
                Kind::Stripe => Rule::stripe_default(),
                Kind::Paypal => Rule::paypal_default(),
                Kind::Razorpay | Kind::Source => Rule::metadata_default(),
            },
        }
    }

    /// A Stripe thin event's reference and what was fetched for it.
    pub fn thin(&self) -> Option<&Thin> {
        self.thin.as_deref()
    }

    /// The thin event, its data fetched from Stripe's API (over TLS, with
    /// our key): `object` is its object from now on, and it is stored
    /// under the payload's `data.object`, where a snapshot event carries
    /// its object, so that a release or a replay applies what was fetched.
    /// Any other event is returned as it is.
    pub fn fetched(mut self, object: Value) -> Self {
        let Some(thin) = self.thin.as_deref_mut() else {
            return self;
        };
        thin.fetched = Fetched::Found;
        if let Ok(Value::Object(mut payload)) = serde_json::from_str(self.stored_payload()) {
            payload.insert("data".into(), serde_json::json!({ "object": object }));
            self.stored = Some(Value::Object(payload).to_string());
        }
        self.object = object;
        self
    }

    /// The event, its object refreshed from Stripe's API on a tie (over
    /// TLS, with our key): with `Ok(object)`, `object` is what applies (its
    /// stored payload stays what was delivered); with `Err(reason)` it
    /// applies as delivered, the reason noted.
    pub fn refreshed(mut self, refreshed: Result<Value, String>) -> Self {
        self.refreshed = Some(match refreshed {
            Ok(object) => {
                self.object = object;
                Refreshed::Current
            }
            Err(reason) => Refreshed::Failed(reason),
        });
        self
    }

    /// Whether its object was refreshed on a tie, and how that went.
    pub fn refresh(&self) -> Option<&Refreshed> {
        self.refreshed.as_ref()
    }

    /// The thin event, whose data could not be fetched for good (or not
    /// at all: no API key): it is recorded `rejected` with `reason`.
    pub fn not_fetched(mut self, reason: String) -> Self {
        if let Some(thin) = self.thin.as_deref_mut() {
            thin.fetched = Fetched::Refused(reason);
        }
        self
    }

    /// The exact bytes that were verified.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The payload to keep for audit and replay: the verified bytes, unless
    /// Postgres `jsonb` cannot hold them as sent (a NUL character, a number
    /// `numeric` cannot hold); then serde_json's reading of them, with each
    /// NUL replaced by U+FFFD ([`normalised`]).
    pub fn stored_payload(&self) -> &str {
        match &self.stored {
            Some(stored) => stored,
            // Every event is built from a body `parse_object` read as UTF-8.
            None => std::str::from_utf8(&self.raw).expect("an event's body is UTF-8"),
        }
    }
}

/// A delivery whose signature was checked on its exact raw bytes, its
/// envelope parsed afterwards. Only [`Verify::verify`] makes one: nothing
/// else in the crate, and nothing outside it, can.
#[derive(Debug, Clone)]
pub struct VerifiedEvent(Event, usize);

impl VerifiedEvent {
    pub fn into_event(self) -> Event {
        self.0
    }

    /// [`Event::fetched`] of the verified event.
    pub fn fetched(self, object: Value) -> Self {
        VerifiedEvent(self.0.fetched(object), self.1)
    }

    /// [`Event::refreshed`] of the verified event.
    pub fn refreshed(self, refreshed: Result<Value, String>) -> Self {
        VerifiedEvent(self.0.refreshed(refreshed), self.1)
    }

    /// [`Event::not_fetched`] of the verified event.
    pub fn not_fetched(self, reason: String) -> Self {
        VerifiedEvent(self.0.not_fetched(reason), self.1)
    }

    /// Which of the source's secrets (PayPal: webhook ids) signed it, by
    /// position in its list: an old secret of a rotation that no delivery
    /// uses any more can be known unused, and removed.
    pub fn secret_index(&self) -> usize {
        self.1
    }
}

impl std::ops::Deref for VerifiedEvent {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.0
    }
}

/// Seals a delivery that the secret at `secret_index` of its source's
/// list verified; the schemes' `verify` call it last.
pub(super) fn verified(event: Event, secret_index: usize) -> VerifiedEvent {
    VerifiedEvent(event, secret_index)
}

/// The id a delivery of a payment scheme names its event by, unless it
/// lies in webhookd's own namespace ([`is_own_id`]): nobody can pre-empt
/// an id that webhookd makes up for what a sweep recovers.
pub(super) fn delivered_id(event_id: &str) -> Result<&str, SignatureError> {
    if is_own_id(event_id) {
        return Err(SignatureError::InvalidPayload(
            "an event id in webhookd's own namespace (it contains ':')",
        ));
    }
    Ok(event_id)
}

/// Whether `event_id` is one webhookd makes up itself (a sweep's, a
/// delivery gap's, Razorpay's composite key for a delivery without
/// `x-razorpay-event-id`): each contains a `:`, and no id Stripe, Razorpay
/// or PayPal gives an event ever does (`evt_…`, `WH-…`).
pub fn is_own_id(event_id: &str) -> bool {
    event_id.contains(':')
}

/// A generic source's event: the whole verified body is its object. Its type
/// comes from a header, else (`None`) from the body's `type`, else it is
/// [`UNKNOWN_TYPE`].
pub(crate) fn source_event(
    provider: &Arc<str>,
    event_id: String,
    event_type: Option<String>,
    created: Option<i64>,
    body: &Bytes,
) -> Result<Event, SignatureError> {
    let json = parse_object(body)?;
    // The signature and the id are good: a missing type is no reason for the
    // sender to retry forever, so the event is forwarded as `unknown`.
    let event_type = match (event_type, json.fields.get("type")) {
        (Some(header), _) => header,
        (None, Some(Value::String(kind))) if is_identifier(kind) => kind.clone(),
        (None, _) => UNKNOWN_TYPE.to_owned(),
    };
    // The object is what the outbox forwards: stored, so NUL-free.
    let mut object = Value::Object(json.fields);
    if json.stored.is_some() {
        payload::scrub(&mut object);
    }
    Ok(Event {
        created,
        object,
        ..Event::delivered(
            provider.clone(),
            Kind::Source,
            event_id,
            event_type,
            body,
            json.stored,
        )
    })
}

impl Event {
    /// The event of `provider` that its envelope names `event_id` and
    /// `event_type`, read from `body` (`stored` is what to keep instead, if
    /// anything), as a delivery brings it: refused by nothing, and with no
    /// time, object, mode or account until its scheme's envelope gives them.
    pub(super) fn delivered(
        provider: Arc<str>,
        kind: Kind,
        event_id: String,
        event_type: String,
        body: &Bytes,
        stored: Option<String>,
    ) -> Event {
        Event {
            provider,
            kind,
            event_id,
            event_type,
            created: None,
            object: Value::Null,
            raw: body.clone(),
            stored,
            via: Via::Webhook,
            livemode: None,
            account: None,
            api_version: None,
            refusal: None,
            receiver: None,
            thin: None,
            refreshed: None,
        }
    }

    /// Rebuilds an event that this service verified and stored itself (a
    /// deferred event, or a replay) from its stored row. Any provider name
    /// other than the built-in ones is a generic source. The bytes are
    /// parsed, never verified: only rows this service wrote, or a test's
    /// own bodies, belong here.
    pub fn from_stored(
        provider: &str,
        event_id: &str,
        event_type: &str,
        payload: Bytes,
    ) -> Result<Event, SignatureError> {
        Event::from_stored_at(provider, event_id, event_type, payload, None)
    }

    /// [`Event::from_stored`], with the event time stored beside the row
    /// (`provider_created_at`, RFC 3339): the time of a PayPal event whose
    /// envelope carries no usable one, as its delivery's transmission time
    /// was, so that a replay orders it as its delivery did.
    pub fn from_stored_at(
        provider: &str,
        event_id: &str,
        event_type: &str,
        payload: Bytes,
        recorded_at: Option<&str>,
    ) -> Result<Event, SignatureError> {
        match provider {
            stripe::PROVIDER => stripe::parse_event(&payload),
            razorpay::PROVIDER => razorpay::parse_event(&payload, Some(event_id)),
            paypal::PROVIDER => {
                paypal::parse_event(&payload, recorded_at.and_then(paypal::parse_time))
            }
            source => source_event(
                &Arc::from(source),
                event_id.to_owned(),
                Some(event_type.to_owned()),
                None,
                &payload,
            ),
        }
    }
}

/// For this crate's tests and benches only (the `test-support` feature,
/// which a build of the service never enables): a [`VerifiedEvent`] without
/// a signature, for tests of what happens after verification (the batcher,
/// say). Tests of verification itself sign their deliveries.
#[cfg(feature = "test-support")]
pub mod testing {
    use super::{Event, VerifiedEvent};

    /// Seals `event` as if its delivery's signature had checked out.
    pub fn assume_verified(event: Event) -> VerifiedEvent {
        super::VerifiedEvent(event, 0)
    }
}
