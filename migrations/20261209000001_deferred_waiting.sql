-- Which (provider, waits_for) keys have events deferred for them, read with
-- a snapshot of its own: a volatile function's statements each take a new
-- one. The ingest's claim statement calls it after taking its locks (its
-- last argument is what those locks returned, so it cannot run before
-- them), and so sees every deferral committed before them, even one
-- committed after that statement began. One round trip less than reading
-- them in a statement of their own.
create function deferred_waiting(providers text[], keys text[], locked boolean)
    returns table (provider text, waits_for text)
    language plpgsql volatile
as $$
#variable_conflict use_column
begin
    return query
        select wanted.provider, wanted.waits_for
        from unnest(providers, keys) as wanted (provider, waits_for)
        where locked is not null
          and exists (select from deferred_events d
                      where d.provider = wanted.provider and d.waits_for = wanted.waits_for);
end
$$;
