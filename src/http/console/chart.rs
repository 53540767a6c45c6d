//! Events by outcome over time, drawn on the server as SVG: stacked bars,
//! one per bucket, in events per minute. No script and no library; the
//! colours are the stylesheet's (`.o-<outcome>`).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::events::Outcome;

/// Outcomes in the order their bars stack, bottom first.
pub const OUTCOMES: [Outcome; 7] = [
    Outcome::Processed,
    Outcome::Ignored,
    Outcome::Superseded,
    Outcome::Deferred,
    Outcome::Rejected,
    Outcome::Pending,
    Outcome::Imported,
];

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 150.0;
const LEFT: f64 = 44.0;
const TOP: f64 = 8.0;
const BOTTOM: f64 = 20.0;

/// A drawn chart and what it says in words.
pub struct Chart {
    /// The SVG element (its text is escaped here: it goes out unescaped).
    pub svg: String,
    /// Events per outcome over the whole span, largest first.
    pub totals: Vec<(String, i64)>,
    pub title: &'static str,
}

/// Draws `counts` (`(bucket start, outcome, count)`, Unix seconds) as
/// `buckets` bars of `bucket_secs` ending with the one that holds `now`.
pub fn draw(
    title: &'static str,
    counts: &[(i64, Outcome, i64)],
    now: i64,
    buckets: i64,
    bucket_secs: i64,
) -> Chart {
    let last = now / bucket_secs * bucket_secs;
    let first = last - (buckets - 1) * bucket_secs;
    let mut bars: BTreeMap<i64, BTreeMap<&str, i64>> = BTreeMap::new();
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for (start, outcome, count) in counts {
        if *start < first || *start > last {
            continue;
        }
        let known = if OUTCOMES.contains(outcome) {
            outcome.as_str()
        } else {
            "other"
        };
        *bars.entry(*start).or_default().entry(known).or_default() += count;
        *totals.entry(known.to_owned()).or_default() += count;
    }
    #[allow(clippy::cast_precision_loss)]
    let per_minute = |count: i64| count as f64 * 60.0 / bucket_secs as f64;
    let peak = bars
        .values()
        .map(|b| per_minute(b.values().sum()))
        .fold(0.0_f64, f64::max);
    let scale = nice_ceiling(peak);
    let plot_h = HEIGHT - TOP - BOTTOM;
    #[allow(clippy::cast_precision_loss)]
    let bar_w = (WIDTH - LEFT) / buckets as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}: events per minute by outcome"><g class="axis">"#,
        escape(title)
    );
    let _ = write!(
        svg,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{WIDTH}" y2="{TOP}"/><line x1="{LEFT}" y1="{y0}" x2="{WIDTH}" y2="{y0}"/><text x="{tx}" y="{ty}">{scale}/min</text><text x="{tx}" y="{y0}">0</text>"#,
        y0 = TOP + plot_h,
        tx = LEFT - 4.0,
        ty = TOP + 8.0,
        scale = format_rate(scale),
    );
    let _ = write!(
        svg,
        r#"<text class="start" x="{LEFT}" y="{HEIGHT}">{}</text><text class="end" x="{WIDTH}" y="{HEIGHT}">now</text></g>"#,
        escape(&clock(first))
    );
    for (start, outcomes) in &bars {
        #[allow(clippy::cast_precision_loss)]
        let x = LEFT + ((start - first) / bucket_secs) as f64 * bar_w;
        let mut y = TOP + plot_h;
        for outcome in OUTCOMES.map(Outcome::as_str).into_iter().chain(["other"]) {
            let Some(&count) = outcomes.get(outcome) else {
                continue;
            };
            let h = if scale > 0.0 {
                per_minute(count) / scale * plot_h
            } else {
                0.0
            };
            y -= h;
            let _ = write!(
                svg,
                r#"<rect class="o-{outcome}" x="{x:.2}" y="{y:.2}" width="{w:.2}" height="{h:.2}"><title>{at}: {count} {outcome}</title></rect>"#,
                w = (bar_w - 1.0).max(0.5),
                at = escape(&clock(*start)),
            );
        }
    }
    svg.push_str("</svg>");
    let mut totals: Vec<(String, i64)> = totals.into_iter().collect();
    totals.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Chart { svg, totals, title }
}

/// The smallest of 1, 2, 5 × 10ⁿ at or above `value` (the axis's top).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&v| v >= value)
        .unwrap_or(10.0 * magnitude)
}

fn format_rate(value: f64) -> String {
    if value >= 1.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// `HH:MM` UTC of a Unix time.
fn clock(at: i64) -> String {
    let minutes = at.rem_euclid(86_400) / 60;
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stack_per_bucket_and_totals_count_the_span() {
        let now = 3_600 * 10 + 59;
        let counts = vec![
            (3_600 * 10, Outcome::Processed, 30),
            (3_600 * 10, Outcome::Rejected, 6),
            (3_600 * 10 - 60, Outcome::Ignored, 3),
            // Outside the span: not drawn, not counted.
            (0, Outcome::Processed, 1_000),
            // Not an outcome webhookd stores: drawn as `other`.
            (3_600 * 10, Outcome::Duplicate, 1),
        ];
        let chart = draw("Last hour", &counts, now, 60, 60);
        assert_eq!(chart.svg.matches("<rect").count(), 4);
        assert!(chart.svg.contains(r#"class="o-rejected""#));
        assert!(chart.svg.contains(r#"class="o-other""#));
        assert_eq!(
            chart.totals,
            vec![
                ("processed".to_owned(), 30),
                ("rejected".to_owned(), 6),
                ("ignored".to_owned(), 3),
                ("other".to_owned(), 1)
            ]
        );
        // 37 a minute at the peak: the axis tops out at 50.
        assert!(chart.svg.contains(">50/min<"));
    }

    #[test]
    fn an_empty_span_draws_axes_only() {
        let chart = draw("Last day", &[], 1_000_000, 96, 900);
        assert_eq!(chart.svg.matches("<rect").count(), 0);
        assert!(chart.totals.is_empty());
        assert!(chart.svg.contains(">1/min<"));
    }

    #[test]
    fn the_axis_top_is_a_round_number() {
        assert_eq!(nice_ceiling(0.3), 0.5);
        assert_eq!(nice_ceiling(37.0), 50.0);
        assert_eq!(nice_ceiling(100.0), 100.0);
        assert_eq!(nice_ceiling(101.0), 200.0);
    }
}
