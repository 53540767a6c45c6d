//! Stripe Checkout Sessions (and Payment Links, which make them): a session
//! teaches its owner for its payment intent and its customer; a paid
//! `payment` session credits that owner, under the intent's natural key,
//! so that the session and `payment_intent.succeeded` credit once between
//! them; any other session is announced (`checkout.completed`,
//! `checkout.failed`).

use serde_json::json;
use sqlx::PgConnection;

use super::credits;
use super::effect::{Applied, CheckoutSession, Error};
use super::teach::{Taught, teach};
use crate::outbox;
use crate::owners::{self, Subject};
use crate::providers::Event;

/// Applies a Checkout Session event. Call with its plan's locks held.
pub(super) async fn apply(
    conn: &mut PgConnection,
    event: &Event,
    session: &CheckoutSession,
) -> Result<Applied, Error> {
    let owner = owners::resolve(conn, event.provider(), &session.owner).await?;
    let mut taught = Taught::default();
    if let Some(user_id) = &owner {
        if let Some(intent) = &session.payment_intent {
            teach(conn, event, Subject::Payment, intent, user_id, &mut taught).await?;
        }
        if let Some(customer) = &session.customer {
            teach(
                conn,
                event,
                Subject::Customer,
                customer,
                user_id,
                &mut taught,
            )
            .await?;
        }
    }
    let applied = match (&session.credit, owner) {
        (Some(owed), Some(user_id)) => credits::credit_one(conn, event, &owed.to(user_id)).await?,
        (_, owner) => announce(conn, event, session, owner.as_deref()).await?,
    };
    Ok(taught.onto(applied))
}

/// `checkout.completed` or `checkout.failed`, with the session's owner.
async fn announce(
    conn: &mut PgConnection,
    event: &Event,
    session: &CheckoutSession,
    user_id: Option<&str>,
) -> Result<Applied, Error> {
    let payload = json!({
        "checkout_session": session.id,
        "mode": session.mode,
        "payment_status": session.payment_status,
        "payment_intent": session.payment_intent,
        "customer_id": session.customer,
        "subscription_id": session.subscription,
        "user_id": user_id,
        "amount_total": session.amount_total,
        "currency": session.currency,
    });
    let message = outbox::Message {
        topic: session.announces,
        provider: event.provider(),
        event_id: event.event_id(),
        event_type: Some(event.event_type()),
        payload: &payload,
        ordering_key: None,
    };
    let outbox_id = outbox::enqueue_one(conn, message).await?;
    let applied = Applied::processed(json!({ "outbox_id": outbox_id }));
    Ok(match (user_id, &session.credit) {
        (None, Some(_)) => applied.noting(
            "reason",
            "paid, but no owner is known: the payment intent's own event waits for one".into(),
        ),
        _ => applied,
    })
}
