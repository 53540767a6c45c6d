#!/usr/bin/env bash
# Rough single-client latency of POST /webhooks/stripe: sends N unique, signed
# payment_intent.succeeded events one after another to a running webhookd and
# prints percentiles of the HTTP round trip (curl's time_total).
#
#   STRIPE_WEBHOOK_SECRET=whsec_... scripts/latency.sh [N] [URL]
#
# Needs curl and openssl. Each event credits a wallet of user `latency_<run>`.
set -euo pipefail
count=${1:-500}
url=${2:-http://127.0.0.1:8080/webhooks/stripe}
secret=${STRIPE_WEBHOOK_SECRET:?set STRIPE_WEBHOOK_SECRET to the secret webhookd uses}
secret=${secret%%,*}
run=$(date +%s%N)
times=$(mktemp)
trap 'rm -f "$times"' EXIT

for i in $(seq 1 "$count"); do
    t=$(date +%s)
    body='{"id":"evt_lat_'$run'_'$i'","object":"event","type":"payment_intent.succeeded","created":'$t',"data":{"object":{"id":"pi_lat_'$run'_'$i'","object":"payment_intent","amount":100,"amount_received":100,"currency":"usd","metadata":{"user_id":"latency_'$run'"}}}}'
    sig=$(printf '%s.%s' "$t" "$body" | openssl dgst -sha256 -hmac "$secret" | sed 's/^.* //')
    curl -sS -o /dev/null -w '%{http_code} %{time_total}\n' "$url" \
        -H "Stripe-Signature: t=$t,v1=$sig" -H 'Content-Type: application/json' --data-binary "$body" >> "$times"
done

non_200=$(awk '$1 != 200' "$times" | wc -l)
sort -k2 -n "$times" | awk -v n="$count" -v bad="$non_200" '
    { ms[NR] = $2 * 1000; sum += $2 * 1000 }
    END {
        printf "requests=%d non_200=%d mean=%.2fms p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms\n",
            n, bad, sum / NR, ms[int(NR * 0.50) + 1], ms[int(NR * 0.90) + 1], ms[int(NR * 0.99) + 1], ms[NR]
    }'
