//! A source's owner rule (`WEBHOOKD_SOURCE_<NAME>_OWNER`): the ordered
//! places where the integration writes whose money a payment is. The first
//! place that yields an identifier wins.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// One place an owner may be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// `metadata.<key>`: the object's metadata (Stripe); the payment's
    /// notes, else its order's notes (Razorpay).
    Metadata(String),
    /// `client_reference_id`: the Checkout Session's, for the payment
    /// intent it paid (learned when the session completes).
    ClientReferenceId,
    /// `custom_id`: PayPal's purchase unit or capture.
    CustomId,
    /// `customer`: the owner learned earlier for the provider's customer
    /// (customer-keyed wallets; opt-in).
    Customer,
}

/// An ordered list of [`Place`]s, never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule(Vec<Place>);

impl Rule {
    /// The default of the scheme `stripe`:
    /// `metadata.user_id,client_reference_id`.
    pub fn stripe_default() -> &'static Rule {
        static RULE: OnceLock<Rule> = OnceLock::new();
        RULE.get_or_init(|| Rule(vec![user_id(), Place::ClientReferenceId]))
    }

    /// The default of the scheme `razorpay` (and of any other that reads
    /// metadata): `metadata.user_id`.
    pub fn metadata_default() -> &'static Rule {
        static RULE: OnceLock<Rule> = OnceLock::new();
        RULE.get_or_init(|| Rule(vec![user_id()]))
    }

    /// The default of the scheme `paypal`: `custom_id`.
    pub fn paypal_default() -> &'static Rule {
        static RULE: OnceLock<Rule> = OnceLock::new();
        RULE.get_or_init(|| Rule(vec![Place::CustomId]))
    }

    pub fn places(&self) -> &[Place] {
        &self.0
    }

    /// The metadata keys it names, in order.
    pub fn metadata_keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|place| match place {
            Place::Metadata(key) => Some(key.as_str()),
            _ => None,
        })
    }

    pub fn has(&self, place: &Place) -> bool {
        self.0.contains(place)
    }
}

fn user_id() -> Place {
    Place::Metadata("user_id".to_owned())
}

/// Why a rule was refused; names no value beyond the place itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleError(String);

impl FromStr for Rule {
    type Err = RuleError;

    /// `metadata.user_id,client_reference_id`: places separated by commas.
    fn from_str(text: &str) -> Result<Self, RuleError> {
        let mut places = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let place = match part {
                "client_reference_id" => Place::ClientReferenceId,
                "custom_id" => Place::CustomId,
                "customer" => Place::Customer,
                _ => match part.strip_prefix("metadata.") {
                    Some(key) if is_metadata_key(key) => Place::Metadata(key.to_owned()),
                    Some(_) => {
                        return Err(RuleError(
                            "an owner rule's metadata key is 1 to 40 letters, digits, `_` or `-`"
                                .to_owned(),
                        ));
                    }
                    None => {
                        return Err(RuleError(
                            "an owner rule lists metadata.<key>, client_reference_id, custom_id \
                             or customer, separated by commas"
                                .to_owned(),
                        ));
                    }
                },
            };
            if !places.contains(&place) {
                places.push(place);
            }
        }
        if places.is_empty() {
            return Err(RuleError(
                "an owner rule names at least one place".to_owned(),
            ));
        }
        Ok(Rule(places))
    }
}

/// Stripe's metadata keys are at most 40 characters.
fn is_metadata_key(key: &str) -> bool {
    (1..=40).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, place) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match place {
                Place::Metadata(key) => write!(f, "metadata.{key}")?,
                other => f.write_str(other.kind())?,
            }
        }
        Ok(())
    }
}

impl Place {
    /// The place's kind as a rule spells it, without a metadata key.
    pub fn kind(&self) -> &'static str {
        match self {
            Place::Metadata(_) => "metadata",
            Place::ClientReferenceId => "client_reference_id",
            Place::CustomId => "custom_id",
            Place::Customer => "customer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_in_order_and_print_back() {
        let rule: Rule = "customer, metadata.account_id,client_reference_id,customer"
            .parse()
            .unwrap();
        assert_eq!(
            rule.to_string(),
            "customer,metadata.account_id,client_reference_id"
        );
        assert_eq!(
            Rule::stripe_default().to_string(),
            "metadata.user_id,client_reference_id"
        );
        for refused in ["", " , ", "metadata.", "metadata.a b", "owner", "user_id"] {
            assert!(refused.parse::<Rule>().is_err(), "{refused:?}");
        }
    }
}
