-- The source (endpoint) that received each event. Events of the payment
-- schemes share their scheme's dedupe space (`provider` is `stripe`
-- whichever Stripe endpoint received it: Stripe's event ids are unique
-- across endpoints), so the endpoint is kept beside it. Null: the
-- endpoint named as the provider (`/webhooks/stripe`, a generic source's
-- own), or none (found by a sweep, imported, raised by webhookd itself);
-- set only for a named source of a payment scheme
-- (`WEBHOOKD_SOURCE_CONNECTED_SCHEME=stripe` stores `connected`). Adding
-- a nullable column without a default rewrites nothing.
alter table processed_events add column source text;
