-- out: position_keys
-- grain: trace_id, pos
-- reads: selected_traces, hash_powers
-- params: $draft_len BIGINT, $max_index_positions BIGINT, $backoff_max_index_positions BIGINT, $tail1 BIGINT, $tail2 BIGINT, $inv1 BIGINT, $inv2 BIGINT, $p1 BIGINT, $p2 BIGINT, $from_trace_id BIGINT, $train BOOLEAN, $ctx_len INTEGER[]
-- (a build intermediate) One row per token of the selected train traces ($train), or of the
-- calibration and eval traces (not $train, into query_position_keys), with its context key at
-- each of the context lengths asked for (pos counts from 0 at the first prompt token):
-- key_<L> is the key of tokens[pos - L .. pos - 1], the context a drafter sees when pos tokens
-- are known (null when pos < L). The keys are made of
--   term   = (token_id + 1) * B^-pos mod p, so the hash of tokens[a .. b - 1] is
--            (sum of term over a .. b - 1) * B^(b - 1) mod p;
--   c1, c2 = the sum of term over tokens[0 .. pos - 1] (exact: below 2^62 for traces under 2^31
--            tokens; cast back to BIGINT, as DuckDB sums BIGINT into a slow HUGEINT), taken
--            as a running sum to pos less pos's own term (DuckDB streams a frame that ends at the
--            current row; one that ends a row before it, or reaches rows after, costs a segment
--            tree: the first pass took 1.7 s with those, 0.9 s without);
--   end_pow1, end_pow2 = B^(pos - 1), the factor for a context that ends before pos;
-- so key_<L> = (c(pos) - c(pos - L)) * B^(pos - 1) mod p under each prime, packed as
-- h1 * 2^31 + h2: two window passes make every length's keys. Also:
--   continuation_hash = the key of the draft_len tokens from pos on (c(pos + draft_len) - c(pos),
--            with the trace's whole sum for c past its end, where the continuation is shorter);
--   the seed's index order: exact_order for the positions ContinuationIndex adds
--   (pos < n_tokens - draft_len, under --max-index-positions), backoff_order for those
--   BackoffIndex adds (every token, under --backoff-max-index-positions), counted in train order.
-- Only traces from $from_trace_id on get rows (0 in a full build; the first appended trace in an
-- incremental update), but their index order counts every selected train trace before them.
-- trace_id and pos are narrowed to INTEGER: the table holds every position, so each byte of a
-- row is 2-3 MB per million train tokens (the split is not kept for the same reason).
with train_offsets as (
    select
        trace_id,
        coalesce(sum(greatest(n_tokens - $draft_len, 0)) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0)::bigint as exact_before,
        coalesce(sum(n_tokens) over (
            order by split_row rows between unbounded preceding and 1 preceding
        ), 0)::bigint as backoff_before
    from selected_traces
    where split = 'train'
),
tokens as (
    select
        trace_id::integer as trace_id,
        n_tokens,
        unnest(generate_series(0, n_tokens - 1)) as pos,
        unnest(tokens) as token_id
    from selected_traces
    where trace_id >= $from_trace_id
        and (split = 'train') = $train
),
terms as (
    select
        k.trace_id,
        k.n_tokens,
        k.pos::integer as pos,
        k.token_id,
        p.b1,
        p.b2,
        (k.token_id + 1) * p.binv1 % $p1 as term1,
        (k.token_id + 1) * p.binv2 % $p2 as term2,
        o.exact_before,
        o.backoff_before
    from tokens as k
    join hash_powers as p on p.pos = k.pos
    left join train_offsets as o on o.trace_id = k.trace_id
),
positions as (
    select
        trace_id,
        pos,
        token_id,
        sum(term1) over (w rows between unbounded preceding and current row)::bigint - term1 as c1,
        sum(term2) over (w rows between unbounded preceding and current row)::bigint - term2 as c2,
        sum(term1) over (partition by trace_id)::bigint as total1,
        sum(term2) over (partition by trace_id)::bigint as total2,
        b1 * $inv1 % $p1 as end_pow1,
        b2 * $inv2 % $p2 as end_pow2,
        b1 * $tail1 % $p1 as tail_pow1,
        b2 * $tail2 % $p2 as tail_pow2,
        case
            when exact_before is not null
                and pos < n_tokens - $draft_len
                and ($max_index_positions = 0 or exact_before + pos < $max_index_positions)
                then exact_before + pos
        end as exact_order,
        case
            when backoff_before is not null
                and ($backoff_max_index_positions = 0 or backoff_before + pos < $backoff_max_index_positions)
                then backoff_before + pos
        end as backoff_order
    from terms
    window w as (partition by trace_id order by pos)
)
select
    trace_id,
    pos,
    token_id,
    (c1 - lag(c1, {ctx_len}) over w) % $p1 * end_pow1 % $p1 * 2147483648 + (c2 - lag(c2, {ctx_len}) over w) % $p2 * end_pow2 % $p2 as key_{ctx_len},
    (coalesce(lead(c1, $draft_len) over w, total1) - c1) % $p1 * tail_pow1 % $p1 * 2147483648
        + (coalesce(lead(c2, $draft_len) over w, total2) - c2) % $p2 * tail_pow2 % $p2 as continuation_hash,
    exact_order,
    backoff_order
from positions
window w as (partition by trace_id order by pos)
