-- Razorpay's payment statuses join the forward-only ranking.
create or replace function payment_status_rank(status text) returns integer
    language sql immutable strict parallel safe
    return case status
        when 'created' then 1
        when 'pending' then 1
        when 'authorized' then 1
        when 'failed' then 2
        when 'succeeded' then 3
        when 'captured' then 3
        when 'partially_refunded' then 4
        when 'refunded' then 5
        else 0
    end;
