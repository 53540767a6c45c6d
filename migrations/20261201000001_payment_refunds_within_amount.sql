-- A payment's refunded amount never exceeds its amount. `not valid`: rows
-- written before this check are left as they are (a database with such a
-- row still migrates); every row written from now on is held to it.
alter table payments
    add constraint payments_refunded_within_amount check (refunded_minor <= amount_minor) not valid;
