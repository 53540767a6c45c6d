-- Stripe's `account` (Connect: the connected account whose event it is; a
-- thin event's `context`) and `api_version` (the API version a snapshot
-- event's object is rendered in), kept beside each event that carries them,
-- so that `explain` and the console show them and an API upgrade can be
-- watched. Nullable columns without a default: adding them rewrites
-- nothing and takes its lock for an instant.
alter table processed_events
    add column account text,
    add column api_version text;
