//! Currencies: ISO 4217 codes with a minor unit, as the upper-case code.

/// An ISO 4217 code, in any case, as the upper-case code (`usd` -> `USD`):
/// a current one (the maintained list of the `iso_currency` crate) or one
/// of [`WITHDRAWN_STILL_SENT`]. Only currencies with a minor unit: amounts
/// are integers in it, so the funds and metals (`XAU`, `XDR`) and
/// `XXX`/`XTS` are refused.
pub fn currency(raw: &str) -> Option<&'static str> {
    if raw.len() != 3 || !raw.is_ascii() {
        return None;
    }
    let code = raw.to_ascii_uppercase();
    iso_currency::Currency::from_code(&code)
        .filter(|currency| currency.exponent().is_some())
        .map(|currency| currency.code())
        .or_else(|| WITHDRAWN_STILL_SENT.into_iter().find(|w| *w == code))
}

/// Codes ISO 4217 has withdrawn (its list of historic denominations, all
/// with a minor unit) that payment providers still send: Stripe lists
/// `ang`, `std`, `mro`, `vef`, `ltl`, `eek`, `lvl` and `byr` among its
/// currencies. A wallet in one of them must keep taking its refunds.
pub const WITHDRAWN_STILL_SENT: [&str; 8] =
    ["ANG", "BYR", "EEK", "LTL", "LVL", "MRO", "STD", "VEF"];

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
}
