-- An event id without its provider, found through the primary key, one
-- probe for each provider that has events (read off the key itself, a
-- handful of steps), so that processed_events_event_id, a second index
-- of every event's id, can go. The rest is as it was
-- (20261207000005_related_events_owners.sql); still one inlinable SELECT.
create or replace function related_events(subject text) returns table (provider text, event_id text)
    language sql stable parallel safe
as $$
    select e.provider, e.event_id from processed_events e
    where e.event_id = subject
      and e.provider in (
          with recursive known (provider) as (
              (select k.provider from processed_events k order by k.provider limit 1)
              union all
              select (select k.provider from processed_events k where k.provider > known.provider
                      order by k.provider limit 1)
              from known where known.provider is not null
          )
          select known.provider from known where known.provider is not null)
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
