-- PayPal's capture statuses (lower-cased) join the forward-only ranking: a
-- completed capture ranks with a captured payment, so a late PENDING,
-- DECLINED or DENIED never moves it back.
create or replace function payment_status_rank(status text) returns integer
    language sql immutable strict parallel safe
    return case status
        when 'created' then 1
        when 'pending' then 1
        when 'authorized' then 1
        when 'failed' then 2
        when 'declined' then 2
        when 'denied' then 2
        when 'succeeded' then 3
        when 'captured' then 3
        when 'completed' then 3
        when 'partially_refunded' then 4
        when 'refunded' then 5
        else 0
    end;
