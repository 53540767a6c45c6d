-- no-transaction
-- A payment by its id without the provider (related_events, search).
create index concurrently if not exists payments_payment_id on payments (payment_id);
