-- The size of each row's payload as the drainer reads it (its JSON text), so
-- that a lease bounds the bytes it takes without converting the payloads it
-- leaves behind. A trigger sets it on every insert, whichever statement
-- writes the row. Nullable without a default: adding it rewrites nothing,
-- and a lease measures a row that lacks it.
alter table outbox add column payload_bytes integer;

create function outbox_payload_bytes() returns trigger
    language plpgsql as $$
begin
    new.payload_bytes := octet_length(new.payload::text);
    return new;
end
$$;

create trigger outbox_payload_bytes before insert or update of payload on outbox
    for each row execute function outbox_payload_bytes();

-- Rows that may still be leased.
update outbox set payload_bytes = octet_length(payload::text) where delivered_at is null;
