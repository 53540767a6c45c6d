//! Which event does what (the README's effects tables), one module per
//! provider. Effects run inside the ingest transaction and take
//! `&mut PgConnection`; they never open, commit or roll back a transaction,
//! and never lock: they run with their [`plan`]'s locks held.

mod credits;
mod money;
pub mod paypal;
pub mod plan;
pub mod razorpay;
mod refunds;
pub mod source;
pub mod stripe;

use std::future::Future;
use std::pin::Pin;

use serde_json::{Value, json};
use sqlx::PgConnection;

use crate::db;
use crate::events::{self, Outcome};
use crate::outbox;
use crate::providers::{self, Event, Kind};
use crate::subscriptions::{self, Subscription, Upserted};

/// Why an event's effects were not applied. Either way its transaction
/// rolls back and nothing of it commits.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// What cannot happen did: a bug here, never the input's fault.
    #[error("invariant broken: {0}")]
    Invariant(&'static str),
}

impl Error {
    /// The database's refusal of the data, when that is the error.
    pub fn poison(&self) -> Option<db::Poison> {
        match self {
            Error::Database(error) => db::Poison::of(error),
            Error::Invariant(_) => None,
        }
    }
}

/// The result of applying one event: its outcome and the `detail` stored with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub outcome: Outcome,
    pub detail: Value,
}

impl Applied {
    pub fn processed(detail: Value) -> Self {
        Applied {
            outcome: Outcome::Processed,
            detail,
        }
    }

    pub fn ignored(reason: &str) -> Self {
        Applied {
            outcome: Outcome::Ignored,
            detail: json!({ "reason": reason }),
        }
    }

    /// The effect's natural key belongs to another event.
    pub fn owned_by(reason: &str, owner_event_id: &str) -> Self {
        Applied {
            outcome: Outcome::Ignored,
            detail: json!({ "reason": reason, "owner_event_id": owner_event_id }),
        }
    }

    pub fn superseded(detail: Value) -> Self {
        Applied {
            outcome: Outcome::Superseded,
            detail,
        }
    }

    pub fn deferred(waits_for: &str) -> Self {
        Applied {
            outcome: Outcome::Deferred,
            detail: json!({ "waits_for": waits_for }),
        }
    }

    pub fn rejected(reason: impl Into<String>) -> Self {
        Applied {
            outcome: Outcome::Rejected,
            detail: json!({ "reason": reason.into() }),
        }
    }
}

pub use credits::apply_credits;
pub use crate::money::{MAX_AMOUNT_LEN, WITHDRAWN_STILL_SENT, currency, decimal, minor_units};
pub use money::PlainCredit;
pub use plan::{Plan, plan};

/// Applies `event`'s effects for its provider. Call with its plan's locks
/// held ([`plan`]). An event its source does not take (another mode, a
/// connected account: [`Event::refusal`]) is rejected, touching nothing.
pub async fn apply(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    if let Some(reason) = event.refusal() {
        return Ok(Applied::rejected(reason));
    }
    match event.kind() {
        Kind::Stripe => stripe::apply(conn, event).await,
        Kind::Razorpay => razorpay::apply(conn, event).await,
        Kind::Paypal => paypal::apply(conn, event).await,
        Kind::Source => source::apply(conn, event).await,
    }
}

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// Applies, oldest first, the events deferred until `waits_for` existed (in
/// the transaction that brings it), recording each one's outcome with
/// `applied_by`. Returns their event ids. Boxed, because applying an event
/// can apply the events waiting for it.
pub(crate) fn apply_waiting<'a>(
    conn: &'a mut PgConnection,
    provider: &'a str,
    waits_for: &'a str,
    by_event_id: &'a str,
) -> Boxed<'a, Vec<String>> {
    Box::pin(async move {
        let mut applied = Vec::new();
        for stored in events::take_deferred(conn, provider, waits_for).await? {
            let payload = stored.payload.into();
            let waiting = providers::Event::from_stored(
                &stored.provider,
                &stored.event_id,
                &stored.event_type,
                payload,
            );
            let mut result = match waiting {
                Ok(waiting) => apply_isolated(conn, &waiting).await?,
                Err(_) => Applied::rejected("the stored payload is no longer a readable event"),
            };
            if let Value::Object(detail) = &mut result.detail {
                detail.insert("applied_by".into(), by_event_id.into());
            }
            events::record_outcome(
                conn,
                provider,
                &stored.event_id,
                result.outcome,
                &result.detail,
            )
            .await?;
            applied.push(stored.event_id);
        }
        Ok(applied)
    })
}

/// Applies a waiting event inside a savepoint: data the database refuses
/// ([`db::Poison`]) rejects that event alone, never the one that brought
/// its dependency.
async fn apply_isolated(conn: &mut PgConnection, event: &Event) -> Result<Applied, Error> {
    let mut savepoint = sqlx::Connection::begin(&mut *conn).await?;
    match apply(&mut savepoint, event).await {
        Ok(applied) => {
            savepoint.commit().await?;
            Ok(applied)
        }
        Err(error) => match error.poison() {
            Some(poison) => {
                savepoint.rollback().await?;
                tracing::warn!(
                    provider = event.provider(),
                    event_id = event.event_id(),
                    sqlstate = %poison.sqlstate,
                    constraint = poison.constraint.as_deref(),
                    "the database refuses a waiting event's data: recorded as rejected"
                );
                Ok(Applied {
                    outcome: Outcome::Rejected,
                    detail: poison.detail(),
                })
            }
            None => Err(error),
        },
    }
}

/// The guarded subscription upsert, ordered by the event's own time, and its
/// `subscription.changed` announcement when the state changed.
async fn apply_subscription(
    conn: &mut PgConnection,
    event: &Event,
    next: Subscription,
) -> Result<Applied, Error> {
    let Some(event_time) = event.created() else {
        return Ok(Applied::rejected(
            "event has no created time to order it by",
        ));
    };
    match subscriptions::upsert(conn, &next, event_time, event.event_id()).await? {
        Upserted::Changed { previous } => {
            let user_id = next
                .user_id
                .clone()
                .or_else(|| previous.as_ref().and_then(|p| p.user_id.clone()));
            let payload = json!({
                "subscription_id": next.subscription_id,
                "customer_id": next.customer_id,
                "user_id": user_id,
                "status": next.status,
                "previous_status": previous.as_ref().map(|p| &p.status),
                "plan_id": next.plan_id,
                "current_period_end": next.current_period_end,
            });
            // Its lock key is also the order its announcements keep.
            let key = plan::subscription_key(event.provider(), &next.subscription_id);
            let message = outbox::Message {
                topic: "subscription.changed",
                provider: event.provider(),
                event_id: event.event_id(),
                payload: &payload,
                ordering_key: Some(&key),
            };
            let outbox_id = outbox::enqueue_one(conn, message).await?;
            Ok(Applied::processed(json!({ "outbox_id": outbox_id })))
        }
        Upserted::Unchanged => Ok(Applied::processed(json!({ "changed": false }))),
        Upserted::Superseded {
            stored_event_time,
            stored_status,
        } => Ok(Applied::superseded(json!({
            "reason": "older than the stored state",
            "stored_event_time": stored_event_time,
            "stored_status": stored_status,
        }))),
    }
}

/// A non-empty string at `pointer`.
fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Why an event can never be applied: the reason its `rejected` detail gives.
pub(crate) type Reason = String;

/// The identifier that keys something (an object's id, a subscription's
/// status) at `pointer`: `None` when absent, null or empty; refused when it
/// is anything but an identifier (at most
/// [`providers::MAX_ID_LEN`] printable ASCII characters, so no NUL or other
/// control character), never rewritten.
fn ident_at<'a>(object: &'a Value, pointer: &str, what: &str) -> Result<Option<&'a str>, Reason> {
    match object.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if providers::is_identifier(s) => Ok(Some(s)),
        Some(_) => Err(not_an_identifier(what)),
    }
}

fn not_an_identifier(what: &str) -> Reason {
    format!(
        "{what} is not an identifier (1 to {} printable ASCII characters)",
        providers::MAX_ID_LEN
    )
}

/// The identifier at `pointer`, which must be there: `missing` says so.
fn required_ident<'a>(
    object: &'a Value,
    pointer: &str,
    what: &str,
    missing: &str,
) -> Result<&'a str, Reason> {
    ident_at(object, pointer, what)?.ok_or_else(|| missing.to_owned())
}

/// An informational identifier at `pointer` (a customer, a plan, an order, a
/// status with a default, a user id that owns no money): kept when it is an
/// identifier, else left out. Never rewritten, and never a reason to refuse
/// an event whose keys are sound (Stripe's metadata values, say, may hold
/// any text).
fn loose_ident_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    str_at(object, pointer).filter(|s| providers::is_identifier(s))
}

/// [`loose_ident_at`] of an expandable reference ([`id_at`]).
fn loose_id_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    match object.pointer(pointer) {
        Some(expanded @ Value::Object(_)) => loose_ident_at(expanded, "/id"),
        _ => loose_ident_at(object, pointer),
    }
}

/// The user id at `pointer` of a wallet owner, whose credit is keyed by it:
/// refused when it is not an identifier ([`ident_at`]).
fn owner_at<'a>(object: &'a Value, pointer: &str) -> Result<Option<&'a str>, Reason> {
    ident_at(
        object,
        pointer,
        pointer.trim_start_matches('/').replace('/', ".").as_str(),
    )
}

/// A Unix time at `pointer`, if it is one Postgres can store.
fn unix_at(object: &Value, pointer: &str) -> Option<i64> {
    object
        .pointer(pointer)
        .and_then(Value::as_i64)
        .filter(|t| providers::is_unix_time(*t))
}

/// An expandable reference: the id string, or the expanded object's `id`.
fn id_at<'a>(object: &'a Value, pointer: &str, what: &str) -> Result<Option<&'a str>, Reason> {
    match object.pointer(pointer) {
        Some(expanded @ Value::Object(_)) => ident_at(expanded, "/id", what),
        _ => ident_at(object, pointer, what),
    }
}

/// The ISO 4217 currency at `pointer`, upper-cased; `what` names the object.
fn currency_at(object: &Value, pointer: &str, what: &str) -> Result<&'static str, Reason> {
    str_at(object, pointer)
        .and_then(currency)
        .ok_or_else(|| format!("{what} has no ISO 4217 currency with a minor unit"))
}

/// `refunded` or `partially_refunded` once anything was refunded.
fn refund_status(amount_minor: i64, refunded_minor: i64) -> Option<&'static str> {
    match refunded_minor {
        r if r <= 0 => None,
        r if r >= amount_minor => Some("refunded"),
        _ => Some("partially_refunded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_must_be_identifiers_and_notes_may_be_an_empty_array() {
        assert_eq!(
            owner_at(&json!({"notes": {"user_id": "u1"}}), "/notes/user_id"),
            Ok(Some("u1"))
        );
        assert_eq!(owner_at(&json!({"notes": []}), "/notes/user_id"), Ok(None));
        for refused in [
            json!("u 1"),
            json!("u\u{0}1"),
            json!(7),
            json!("x".repeat(256)),
        ] {
            let object = json!({"notes": {"user_id": refused}});
            assert_eq!(
                owner_at(&object, "/notes/user_id").unwrap_err(),
                "notes.user_id is not an identifier (1 to 255 printable ASCII characters)"
            );
        }
    }
}
