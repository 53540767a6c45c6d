-- no-transaction
-- A payment by its other reference (a PaymentIntent's charge, an order).
create index concurrently if not exists payments_payment_ref on payments (payment_ref) where payment_ref is not null;
