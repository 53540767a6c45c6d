#!/usr/bin/env bash
# The shipped Prometheus alerting rules: `promtool check rules` (they parse,
# their expressions are valid PromQL) and `promtool test rules` (each alert
# fires on the series its tests describe, and stays quiet on the others).
# Installs Debian's prometheus package, which provides promtool, when
# promtool is missing (scripts/lib.sh, require_promtool).
#
#   scripts/check-alerts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_promtool
log "promtool check rules deploy/prometheus/alerts.yml"
promtool check rules deploy/prometheus/alerts.yml
log "promtool test rules deploy/prometheus/alerts.test.yml"
promtool test rules deploy/prometheus/alerts.test.yml
