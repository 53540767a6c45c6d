-- The events a subject names, whether the subject is an event id, a payment
-- or refund id, a user id or a subscription id: what `webhookd explain`
-- tells the story of and what the console's search finds, written once.
-- A single SELECT in SQL, STABLE and not STRICT, so the planner inlines it
-- into the calling query and each arm uses its own index (next migrations).
-- A source_ref prefix (`<charge>:<amount refunded>`) is matched as a range
-- in the C collation, which a cached generic plan can still take to an index.
create function related_events(subject text) returns table (provider text, event_id text)
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
    select d.provider, d.event_id from deferred_events d where d.waits_for = subject
    union
    select s.provider, s.event_id from subscriptions s
    where s.subscription_id = subject or s.user_id = subject
$$;
