//! A payment's owner as its source's rule reads it from the event's
//! object: the ordered [`Candidate`]s, named on the object or learned for
//! its payment or customer. Decoding only: nothing here reads the
//! database.

use serde_json::Value;

use super::effect::Reason;
use super::fields::{loose_ident_at, owner_at};
pub(super) use crate::owners::first_named;
use crate::owners::{Candidate, Place, Rule};

/// Where an object keeps what its owner rule reads.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Clues<'a> {
    /// The pointer of its metadata (`/metadata`, Razorpay's `/notes`),
    /// then a fallback's (a Razorpay order's notes).
    pub metadata: &'a [&'a str],
    /// The payment whose learned owner `client_reference_id` means (a
    /// payment intent's own id).
    pub payment: Option<&'a str>,
    /// A Checkout Session's own `client_reference_id` pointer.
    pub client_reference_id: Option<&'a str>,
    /// The pointer of PayPal's `custom_id`.
    pub custom_id: Option<&'a str>,
    /// The provider's customer it names.
    pub customer: Option<&'a str>,
}

/// The candidates for `object`'s owner by `rule`, in its order. An owner
/// written on the object that is not an identifier refuses the event: its
/// credit would be keyed by it.
pub(super) fn candidates(
    rule: &Rule,
    object: &Value,
    clues: Clues<'_>,
) -> Result<Vec<Candidate>, Reason> {
    let mut found = Vec::new();
    for place in rule.places() {
        let candidate = match place {
            Place::Metadata(key) => {
                let mut named = None;
                for metadata in clues.metadata {
                    if let Some(owner) = owner_at(object, &format!("{metadata}/{key}"))? {
                        named = Some(owner);
                        break;
                    }
                }
                named.map(|owner| Candidate::Named(owner.to_owned()))
            }
            Place::ClientReferenceId => match clues.client_reference_id {
                Some(pointer) => owner_at(object, pointer)?.map(|o| Candidate::Named(o.to_owned())),
                None => clues.payment.map(|p| Candidate::Payment(p.to_owned())),
            },
            Place::CustomId => match clues.custom_id {
                Some(pointer) => owner_at(object, pointer)?.map(|o| Candidate::Named(o.to_owned())),
                None => None,
            },
            Place::Customer => clues.customer.map(|c| Candidate::Customer(c.to_owned())),
        };
        if let Some(candidate) = candidate.filter(|c| !found.contains(c)) {
            found.push(candidate);
        }
    }
    Ok(found)
}

/// The owner named on the object by the rule's metadata keys, if any: what
/// attribution without a credit reads (a subscription, an invoice).
pub(super) fn named(rule: &Rule, object: &Value, metadata: &str) -> Option<String> {
    rule.metadata_keys()
        .find_map(|key| loose_ident_at(object, &format!("{metadata}/{key}")))
        .map(str::to_owned)
}
