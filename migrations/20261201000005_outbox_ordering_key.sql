-- The key whose rows are delivered in enqueue order when
-- WEBHOOKD_OUTBOX_ORDER=key: the wallet for wallet.* rows, the subscription
-- for subscription.changed, the payment for payment.*, else the event.
-- Rows written before this migration have none and are never held back.
alter table outbox add column ordering_key text;

-- The rows still to deliver, per key, oldest first: what the lease checks
-- before it takes a row.
create index outbox_pending_by_key on outbox (ordering_key, id)
    where delivered_at is null and dead_at is null;
