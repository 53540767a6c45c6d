//! `Retry-After` (RFC 9110, section 10.2.3): delay-seconds or an HTTP-date.
//! Parsed by hand: IMF-fixdate, and the two obsolete forms a recipient must
//! still accept (RFC 850 and asctime), all in GMT.

use std::time::Duration;

/// How long a sink asked to wait, given `now` (Unix seconds); a date in the
/// past asks for no wait. `None` when the value is neither form.
pub fn parse(value: &str, now: i64) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is still a (very long) delay.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = http_date(value, now)?;
    Some(Duration::from_secs(
        u64::try_from(at.saturating_sub(now)).unwrap_or(0),
    ))
}

/// An HTTP-date as Unix seconds: `Sun, 06 Nov 1994 08:49:37 GMT`
/// (IMF-fixdate), `Sunday, 06-Nov-94 08:49:37 GMT` (RFC 850) or
/// `Sun Nov  6 08:49:37 1994` (asctime). An RFC 850 year more than 50 years
/// after `now` is taken to be in the past century, as RFC 9110 says.
pub fn http_date(value: &str, now: i64) -> Option<i64> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    match parts.as_slice() {
        [weekday, day, month, year, time, "GMT"]
            if weekday.strip_suffix(',').is_some_and(is_weekday) && year.len() == 4 =>
        {
            unix_time(number(year)?, month, number(day)?, time)
        }
        [weekday, date, time, "GMT"] if weekday.strip_suffix(',').is_some_and(is_long_weekday) => {
            let mut date = date.split('-');
            let (day, month, year) = (date.next()?, date.next()?, date.next()?);
            if date.next().is_some() || year.len() != 2 {
                return None;
            }
            let year = two_digit_year(number(year)?, now);
            unix_time(year, month, number(day)?, time)
        }
        [weekday, month, day, time, year] if is_weekday(weekday) && year.len() == 4 => {
            unix_time(number(year)?, month, number(day)?, time)
        }
        _ => None,
    }
}

const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn is_weekday(text: &str) -> bool {
    WEEKDAYS.contains(&text)
}

fn is_long_weekday(text: &str) -> bool {
    LONG_WEEKDAYS.contains(&text)
}

/// Digits only (no sign, no spaces), at most 4 of them.
fn number(text: &str) -> Option<i64> {
    if text.is_empty() || text.len() > 4 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The most recent year ending in `yy` that is not more than 50 years
/// after `now`'s.
fn two_digit_year(yy: i64, now: i64) -> i64 {
    let this_year = 1970 + now.div_euclid(86_400 * 36_525 / 100);
    let mut year = this_year - this_year.rem_euclid(100) + yy;
    if year > this_year + 50 {
        year -= 100;
    }
    year
}

/// Seconds since the epoch of a checked GMT date and `HH:MM:SS` time.
fn unix_time(year: i64, month: &str, day: i64, time: &str) -> Option<i64> {
    let month = i64::try_from(MONTHS.iter().position(|m| *m == month)? + 1).ok()?;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=days_in_month).contains(&day) {
        return None;
    }
    let mut clock = time.split(':');
    let (h, m, s) = (clock.next()?, clock.next()?, clock.next()?);
    if clock.next().is_some() || [h, m, s].iter().any(|part| part.len() != 2) {
        return None;
    }
    let (h, m, s) = (number(h)?, number(m)?, number(s)?);
    // 60 is a leap second.
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T00:00:00Z.
    const NOW: i64 = 1_796_083_200;

    #[test]
    fn the_three_http_date_forms_name_the_same_instant() {
        for value in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(http_date(value, NOW), Some(784_111_777), "{value}");
        }
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT", NOW), Some(0));
        assert_eq!(
            http_date("Tue, 01 Dec 2026 00:00:00 GMT", NOW),
            Some(NOW),
            "the test's own now"
        );
        assert_eq!(
            http_date("Tue, 29 Feb 2028 12:00:00 GMT", NOW),
            Some(1_835_438_400),
            "a leap day"
        );
        // RFC 850's two-digit years: not more than 50 years ahead.
        assert_eq!(two_digit_year(30, NOW), 2030);
        assert_eq!(two_digit_year(76, NOW), 2076);
        assert_eq!(two_digit_year(77, NOW), 1977);
        assert_eq!(two_digit_year(94, NOW), 1994);
    }

    #[test]
    fn malformed_dates_are_refused() {
        for value in [
            "",
            "tomorrow",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sun, 29 Feb 2027 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 November 1994 08:49:37 GMT",
            "Sun, -6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Funday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov 6 08:49:37",
        ] {
            assert_eq!(http_date(value, NOW), None, "{value:?}");
        }
    }

    #[test]
    fn retry_after_is_seconds_or_a_date_and_a_past_date_is_no_wait() {
        assert_eq!(parse("120", NOW), Some(Duration::from_secs(120)));
        assert_eq!(parse(" 0 ", NOW), Some(Duration::ZERO));
        assert_eq!(
            parse("99999999999999999999999", NOW),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            parse("Tue, 01 Dec 2026 00:05:00 GMT", NOW),
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            parse("Sun, 06 Nov 1994 08:49:37 GMT", NOW),
            Some(Duration::ZERO)
        );
        for value in ["-5", "1.5", "soon", "120 s"] {
            assert_eq!(parse(value, NOW), None, "{value}");
        }
    }
}
