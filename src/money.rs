//! Money at the bottom of everything: ISO 4217 currencies with a minor
//! unit, as the upper-case code, and decimal amounts in them as integers of
//! that unit, read exactly and formatted back.

/// Why an amount cannot be read.
type Reason = String;

/// An ISO 4217 code, in any case, as the upper-case code (`usd` -> `USD`):
/// a current one (the maintained list of the `iso_currency` crate) or one
/// of [`WITHDRAWN_STILL_SENT`]. Only currencies with a minor unit: amounts
/// are integers in it, so the funds and metals (`XAU`, `XDR`) and
/// `XXX`/`XTS` are refused.
pub fn currency(raw: &str) -> Option<&'static str> {
    let (code, _) = with_exponent(raw)?;
    Some(code)
}

/// The upper-case code of `raw` ([`currency`]) and the number of decimal
/// places of its minor unit (USD 2, JPY 0, BHD 3).
fn with_exponent(raw: &str) -> Option<(&'static str, u32)> {
    if raw.len() != 3 || !raw.is_ascii() {
        return None;
    }
    let code = raw.to_ascii_uppercase();
    iso_currency::Currency::from_code(&code)
        .and_then(|currency| Some((currency.code(), u32::from(currency.exponent()?))))
        .or_else(|| {
            WITHDRAWN_STILL_SENT
                .into_iter()
                .find(|w| *w == code)
                .map(|w| (w, withdrawn_exponent(w)))
        })
}

/// Codes ISO 4217 has withdrawn (its list of historic denominations, all
/// with a minor unit) that payment providers still send: Stripe lists
/// `ang`, `std`, `mro`, `vef`, `ltl`, `eek`, `lvl` and `byr` among its
/// currencies. A wallet in one of them must keep taking its refunds.
pub const WITHDRAWN_STILL_SENT: [&str; 8] =
    ["ANG", "BYR", "EEK", "LTL", "LVL", "MRO", "STD", "VEF"];

/// The minor unit of a withdrawn code, as ISO 4217's historic list gives
/// it: the Belarusian ruble (`BYR`) had none, the others two decimals.
fn withdrawn_exponent(code: &str) -> u32 {
    if code == "BYR" { 0 } else { 2 }
}

/// The longest decimal amount read: PayPal's `amount.value` is at most 32
/// characters.
pub const MAX_AMOUNT_LEN: usize = 32;

/// A decimal amount (`"30.00"`, `"30"`, `"1.234"`) in `currency` ([`currency`]
/// checks it) as an exact integer of its minor unit, by the currency's ISO
/// 4217 exponent: `"30.5"` USD is 3050, `"1000"` JPY 1000, `"1.234"` BHD
/// 1234. Integer arithmetic only. Refused: more decimals than the currency
/// has (`"30.001"` USD, `"1.5"` JPY, even `"30.000"`), anything but ASCII
/// digits with at most one `.` between digits (so signs, exponents, spaces,
/// `".5"` and `"5."`), an empty or over-long ([`MAX_AMOUNT_LEN`]) value, an
/// amount past `i64`, and an unknown currency.
pub fn minor_units(value: &str, currency: &str) -> Result<i64, Reason> {
    let (code, exponent) =
        with_exponent(currency).ok_or("no ISO 4217 currency with a minor unit")?;
    if value.is_empty() || value.len() > MAX_AMOUNT_LEN {
        return Err(format!("not 1 to {MAX_AMOUNT_LEN} characters"));
    }
    let (units, decimals) = value.split_once('.').unwrap_or((value, ""));
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(units) || (value.contains('.') && !digits(decimals)) {
        return Err("not a decimal number of digits (such as 30.00)".into());
    }
    let places = u32::try_from(decimals.len()).unwrap_or(u32::MAX);
    if places > exponent {
        return Err(format!("more decimals than {code} has ({exponent})"));
    }
    let scale = 10i64.pow(exponent - places);
    units
        .bytes()
        .chain(decimals.bytes())
        .try_fold(0i64, |n, digit| {
            n.checked_mul(10)?.checked_add(i64::from(digit - b'0'))
        })
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("too large for the minor unit of {code}"))
}

/// `minor` of `currency` written in its major unit, as people read it:
/// 3050 USD is `30.50`, 1000 JPY `1000`, -1234 BHD `-1.234`. An unknown
/// currency is shown in its minor unit, as stored.
pub fn decimal(minor: i64, currency: &str) -> String {
    let Some((_, exponent)) = with_exponent(currency) else {
        return minor.to_string();
    };
    let scale = 10u64.pow(exponent);
    let sign = if minor < 0 { "-" } else { "" };
    let magnitude = minor.unsigned_abs();
    if exponent == 0 {
        return format!("{sign}{magnitude}");
    }
    let width = usize::try_from(exponent).unwrap_or(0);
    format!("{sign}{}.{:0width$}", magnitude / scale, magnitude % scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn currencies_are_upper_cased_and_checked_against_iso_4217() {
        assert_eq!(currency("usd"), Some("USD"));
        assert_eq!(currency("INR"), Some("INR"));
        assert_eq!(currency("jpy"), Some("JPY"));
        for refused in [
            "us", "usd1", "u$d", "zzz", "ZZZ", "xxx", "XAU", "xts", "üsd",
        ] {
            assert_eq!(currency(refused), None, "{refused}");
        }
    }

    #[test]
    fn every_currency_stripe_and_razorpay_list_is_accepted() {
        // Stripe's presentment currencies (lower case, as it sends them),
        // including the codes ISO 4217 has since withdrawn.
        let stripe = "aed afn all amd ang aoa ars aud awg azn bam bbd bdt bgn bhd bif bmd bnd \
        bob brl bsd bwp byn byr bzd cad cdf chf clp cny cop crc cve czk djf dkk dop dzd \
        eek egp etb eur fjd fkp gbp gel ghs gip gmd gnf gtq gyd hkd hnl hrk htg huf idr \
        ils inr isk jmd jod jpy kes kgs khr kmf krw kwd kyd kzt lak lbp lkr lrd lsl ltl \
        lvl mad mdl mga mkd mmk mnt mop mro mru mur mvr mwk mxn myr mzn nad ngn nio nok \
        npr nzd omr pab pen pgk php pkr pln pyg qar ron rsd rub rwf sar sbd scr sek sgd \
        shp sle sll sos srd std stn svc szl thb tjs tnd top try ttd twd tzs uah ugx usd \
        uyu uzs vef ves vnd vuv wst xaf xcd xcg xof xpf yer zar zmw";
        // Razorpay's international currencies (upper case).
        let razorpay = "INR USD EUR GBP SGD AED AUD CAD CHF CNY DKK HKD JPY KES MYR NOK NZD \
        QAR SAR SEK THB ZAR BHD KWD OMR LKR NPR BDT MUR";
        for code in stripe.split_whitespace().chain(razorpay.split_whitespace()) {
            let upper = code.to_ascii_uppercase();
            assert_eq!(currency(code), Some(upper.as_str()), "{code}");
        }
    }

    #[test]
    fn decimal_amounts_become_exact_minor_units_by_the_currency_s_exponent() {
        for (value, code, minor) in [
            ("30.00", "USD", 3000),
            ("30", "USD", 3000),
            ("30.5", "USD", 3050),
            ("0.01", "usd", 1),
            ("0", "USD", 0),
            ("0.00", "USD", 0),
            ("007.10", "EUR", 710),
            ("1000", "JPY", 1000),
            ("1.234", "BHD", 1234),
            ("1.2", "BHD", 1200),
            ("12", "KWD", 12000),
            ("5", "BYR", 5),
            ("5.25", "VEF", 525),
            ("92233720368547758.07", "USD", i64::MAX),
            ("9223372036854775807", "JPY", i64::MAX),
        ] {
            assert_eq!(minor_units(value, code), Ok(minor), "{value} {code}");
        }
    }

    #[test]
    fn more_decimals_than_the_currency_has_are_refused_never_rounded() {
        for (value, code) in [
            ("30.001", "USD"),
            ("30.000", "USD"),
            ("1.5", "JPY"),
            ("1.0", "JPY"),
            ("1.2345", "BHD"),
            ("1.5", "BYR"),
            ("0.999999999999999999999", "USD"),
        ] {
            let refused = minor_units(value, code).unwrap_err();
            assert!(
                refused.starts_with("more decimals than"),
                "{value} {code}: {refused}"
            );
        }
    }

    #[test]
    fn anything_but_plain_digits_is_refused() {
        let long = "1".repeat(MAX_AMOUNT_LEN + 1);
        for value in [
            "", "-1", "-1.00", "+1", "1e3", "1E3", "1.5e1", " 1", "1 ", "1 000", "1,00", ".5",
            "5.", ".", "1..0", "1.0.0", "0x10", "١", "1\u{0}", "NaN", "inf", "½", &long,
        ] {
            assert!(minor_units(value, "USD").is_err(), "{value:?}");
        }
    }

    #[test]
    fn amounts_past_i64_and_unknown_currencies_are_refused() {
        for (value, code) in [
            ("92233720368547758.08", "USD"),
            ("9223372036854775808", "JPY"),
            ("99999999999999999999999999999999", "JPY"),
            ("922337203685477580.8", "BHD"),
        ] {
            let refused = minor_units(value, code).unwrap_err();
            assert!(
                refused.starts_with("too large"),
                "{value} {code}: {refused}"
            );
        }
        for code in ["ZZZ", "XAU", "XXX", "", "usdd"] {
            assert_eq!(
                minor_units("1", code).unwrap_err(),
                "no ISO 4217 currency with a minor unit",
                "{code}"
            );
        }
    }

    #[test]
    fn every_withdrawn_code_has_its_historic_minor_unit() {
        assert_eq!(with_exponent("byr"), Some(("BYR", 0)));
        for code in WITHDRAWN_STILL_SENT.into_iter().filter(|c| *c != "BYR") {
            assert_eq!(with_exponent(code), Some((code, 2)), "{code}");
        }
    }

    #[test]
    fn amounts_are_shown_in_the_major_unit() {
        assert_eq!(decimal(3050, "USD"), "30.50");
        assert_eq!(decimal(5, "USD"), "0.05");
        assert_eq!(decimal(-1234, "BHD"), "-1.234");
        assert_eq!(decimal(1000, "JPY"), "1000");
        assert_eq!(decimal(i64::MIN, "USD"), "-92233720368547758.08");
        assert_eq!(decimal(42, "ZZZ"), "42");
    }
}
