-- no-transaction
-- Entries by their event, keyed event id first: an index led by `provider`
-- alone ties, for a planner whose statistics are stale (a young table), with
-- the natural key's on `provider = $1 and kind = $2 and source_ref = $3`,
-- and a cached generic plan could then scan a provider's every entry per
-- lookup. Built concurrently (one statement: it cannot run in a
-- transaction), so ingest goes on; the old index goes in the next migration.
create index concurrently if not exists wallet_entries_event_id on wallet_entries (event_id, provider);
