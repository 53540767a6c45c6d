//! What `deploy/` ships against what `/metrics` exports: the alerting rules,
//! their promtool tests and the Grafana dashboard name only metrics of the
//! catalogue, and every alert has a test. (`scripts/check-alerts.sh` runs
//! the tests themselves.)

use super::catalogue::{COUNTERS, GAUGES, HISTOGRAMS};

const ALERTS: (&str, &str) = (
    "deploy/prometheus/alerts.yml",
    include_str!("../../../deploy/prometheus/alerts.yml"),
);
const ALERT_TESTS: (&str, &str) = (
    "deploy/prometheus/alerts.test.yml",
    include_str!("../../../deploy/prometheus/alerts.test.yml"),
);
const DASHBOARD: (&str, &str) = (
    "deploy/grafana/webhookd.json",
    include_str!("../../../deploy/grafana/webhookd.json"),
);

/// Every series name `/metrics` can show: counters and gauges as named,
/// histograms as their `_bucket`, `_sum` and `_count` series.
fn exported() -> Vec<String> {
    let mut names: Vec<String> = COUNTERS
        .iter()
        .chain(GAUGES.iter())
        .map(|(name, _)| (*name).to_owned())
        .collect();
    for (name, _) in HISTOGRAMS {
        for suffix in ["_bucket", "_sum", "_count"] {
            names.push(format!("{name}{suffix}"));
        }
    }
    names
}

/// Each `webhookd_` in `text` with the run of ASCII lowercase letters,
/// digits and underscores after it.
fn metric_names(text: &str) -> Vec<&str> {
    const PREFIX: &str = "webhookd_";
    let mut names = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(PREFIX) {
        let start = from + at;
        let rest = &text[start + PREFIX.len()..];
        let len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        let end = start + PREFIX.len() + len;
        names.push(&text[start..end]);
        from = end;
    }
    names
}

/// The values of the YAML lines `key: value` (indented or not, and as the
/// first key of a list item, `- key: value`).
fn values_of<'a>(yaml: &'a str, key: &str) -> Vec<&'a str> {
    yaml.lines()
        .map(str::trim_start)
        .map(|line| line.strip_prefix("- ").unwrap_or(line))
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .map(|value| value.trim().trim_matches(['"', '\'']))
        .collect()
}

#[test]
fn the_alerts_their_tests_and_the_dashboard_name_only_exported_metrics() {
    let exported = exported();
    for (file, text) in [ALERTS, ALERT_TESTS, DASHBOARD] {
        let names = metric_names(text);
        assert!(!names.is_empty(), "{file} names no webhookd_ metric at all");
        let mut unknown: Vec<&str> = names
            .into_iter()
            .filter(|name| !exported.iter().any(|known| known == name))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        assert!(
            unknown.is_empty(),
            "{file} names metrics that /metrics does not export \
             (src/http/metrics/catalogue.rs; a histogram only as _bucket, _sum, _count): {unknown:?}"
        );
    }
}

#[test]
fn every_alert_has_a_promtool_test_and_every_test_an_alert() {
    let (rules, tests) = (ALERTS.0, ALERT_TESTS.0);
    let alerts = values_of(ALERTS.1, "alert");
    assert!(!alerts.is_empty(), "{rules} defines no alert");
    let tested = values_of(ALERT_TESTS.1, "alertname");
    let untested: Vec<&str> = alerts
        .iter()
        .copied()
        .filter(|alert| !tested.contains(alert))
        .collect();
    assert!(
        untested.is_empty(),
        "alerts of {rules} that no case of {tests} names (alertname:): {untested:?}"
    );
    // promtool passes a case that expects no alert of a name no rule has.
    let mut unknown: Vec<&str> = tested
        .iter()
        .copied()
        .filter(|name| !alerts.contains(name))
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "cases of {tests} name alerts that {rules} does not define: {unknown:?}"
    );
}

#[test]
fn the_dashboard_has_panels_that_query() {
    let (file, text) = DASHBOARD;
    assert!(
        text.contains("\"expr\":"),
        "{file} has no panel with a query"
    );
}

#[test]
fn the_scan_reads_whole_names_and_yaml_values() {
    assert_eq!(
        metric_names(
            "rate(webhookd_events_total{x=\"webhookd\"}[5m]) / WEBHOOKD_SINK_URL webhookd_ready"
        ),
        ["webhookd_events_total", "webhookd_ready"]
    );
    assert_eq!(
        values_of(
            "  - alert: A\n    alertname: B\n  alert: \"C\"\n# alert: D",
            "alert"
        ),
        ["A", "C"]
    );
}
