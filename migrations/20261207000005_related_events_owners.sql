-- What "related" means, now that owners are learned: a user's subjects name
-- the events that taught them (a Checkout Session's client_reference_id, a
-- customer's metadata), and a payment or customer names the events waiting
-- for its owner (`waits_for` `owner:payment:<id>` / `owner:customer:<id>`).
-- The rest is as it was (20261203000001_related_events.sql). Still one
-- inlinable SELECT; the owners' arm reads owners_of_user, and names the
-- parameter with the function's name (owners has a column `subject`).
create or replace function related_events(subject text) returns table (provider text, event_id text)
    language sql stable parallel safe
as $$
    select e.provider, e.event_id from processed_events e where e.event_id = subject
    union
    select w.provider, w.event_id from wallet_entries w
    where (w.source_ref collate "C") = subject
       or ((w.source_ref collate "C") >= (subject || ':') and (w.source_ref collate "C") < (subject || ';'))
       or w.parent_ref = subject
       or w.user_id = subject
    union
    select p.provider, p.event_id from payments p
    where (p.payment_id = subject or p.payment_ref = subject or p.user_id = subject)
      and p.event_id is not null
    union
    select d.provider, d.event_id from deferred_events d
    where d.waits_for = subject
       or d.waits_for = 'owner:payment:' || subject
       or d.waits_for = 'owner:customer:' || subject
    union
    select s.provider, s.event_id from subscriptions s
    where s.subscription_id = subject or s.user_id = subject
    union
    select o.provider, o.event_id from owners o where o.user_id = related_events.subject
$$;
