-- out: candidate_features
-- grain: trace_id, pos, source
-- reads: candidates, draft_known_tokens
-- params: $from_trace_id BIGINT, $to_trace_id BIGINT
-- What the confidence selector (--preset default) knows of each draft when it chooses: its source
-- and context length, how far back a copy reaches, how many other drafts at the position agree on
-- its first 1, 2, 4 and 8 tokens (and with the longest recent copy and n-gram drafts there), and
-- how long the best in-trace and global matches at the position are, and whether the text known
-- there already uses its tokens (draft_known_tokens).
-- Each prefix's drafts at a position are counted under one key, the hash of (trace, position, its
-- first k tokens), coarser prefixes from finer ones, and joined back on it: a window per prefix
-- would sort every draft row five times, and grouping and joining on the ten columns themselves
-- held more (the candidates stage's peak on the development set: 1.13-1.19 GiB, against 1.08-1.16
-- GiB keyed). Any two of the keys collide with odds below 1e-6.
with drafts as not materialized (
    -- the first k tokens, -1 past the draft's end (no token id is negative, so a 2-token draft's
    -- (a, b, -1, ...) matches only another 2-token draft a, b); not materialized: each use reads
    -- candidates again rather than holding a copy of every draft
    select
        *,
        rowid as candidate_row,
        coalesce(draft[1], -1) as t1,
        hash(trace_id, pos, t1) as prefix1_key,
        hash(trace_id, pos, t1, coalesce(draft[2], -1)) as prefix2_key,
        hash(trace_id, pos, t1, coalesce(draft[2], -1), coalesce(draft[3], -1), coalesce(draft[4], -1)) as prefix4_key,
        hash(trace_id, pos, t1, coalesce(draft[2], -1), coalesce(draft[3], -1), coalesce(draft[4], -1),
            coalesce(draft[5], -1), coalesce(draft[6], -1), coalesce(draft[7], -1), coalesce(draft[8], -1)) as prefix8_key,
        -- with nulls past the end: two short drafts' starts never compare equal
        row(draft[1], draft[2], draft[3], draft[4]) as start4
    from candidates
    where trace_id >= $from_trace_id and trace_id < $to_trace_id
),
prefix8 as (
    select prefix8_key, prefix4_key, prefix2_key, prefix1_key, count(*) as drafts
    from drafts
    group by all
),
prefix4 as (select prefix4_key, prefix2_key, prefix1_key, sum(drafts)::bigint as drafts from prefix8 group by all),
prefix2 as (select prefix2_key, prefix1_key, sum(drafts)::bigint as drafts from prefix4 group by all),
prefix1 as (select prefix1_key, sum(drafts)::bigint as drafts from prefix2 group by all),
positions as (
    -- one recent copy and one n-gram draft per context length (their sources name it), so each
    -- longest is one draft
    select
        trace_id,
        pos,
        count(*) as drafts_here,
        coalesce(max(case when family = 'recent-copy' then ctx_len end), 0) as longest_recent_copy,
        coalesce(max(case when family = 'ngram-all' then ctx_len end), 0) as longest_ngram,
        coalesce(max(case when family = 'copy' then ctx_len end), 0) as longest_copy,
        arg_max(case when family = 'recent-copy' then start4 end,
            case when family = 'recent-copy' then ctx_len end) as recent_copy_start,
        arg_max(case when family = 'ngram-all' then start4 end,
            case when family = 'ngram-all' then ctx_len end) as ngram_start
    from drafts
    group by trace_id, pos
)
select
    d.split,
    d.trace_id,
    d.pos,
    d.completion_pos::integer as completion_pos,
    d.family_order,
    d.family,
    d.source,
    coalesce(d.ctx_len, 0) as ctx_len,
    coalesce(d.count, 0) as count,
    d.score,
    -- how far back a copied text starts (its period, for a repetition loop); 0 for other sources
    coalesce(d.pos - d.match_pos, 0)::integer as copy_distance,
    d.accepted::integer as accepted,
    -- not a feature: the calibration labels of the chain model read which drafts are whole
    -- (ConfidencePolicy.chain)
    len(d.draft)::integer as draft_tokens,
    -- counts as INTEGER: the evaluate stage holds every eval draft's row (0.94M on the development set)
    (p1.drafts - 1)::integer as agree1,
    (p2.drafts - 1)::integer as agree2,
    (p4.drafts - 1)::integer as agree4,
    (p8.drafts - 1)::integer as agree8,
    p.drafts_here::integer as drafts_here,
    p.longest_recent_copy::integer as longest_recent_copy,
    p.longest_ngram::integer as longest_ngram,
    p.longest_copy::integer as longest_copy,
    -- the tokens at their first occurrence (twice as fast as list_distinct on 16-token lists)
    len(list_filter(range(1, len(d.draft) + 1), lambda i: list_position(d.draft, d.draft[i]) = i))::integer as distinct_tokens,
    -- agreement with the position's longest recent copy and longest n-gram drafts
    coalesce(d.t1 = p.recent_copy_start[1], false)::integer as agree_recent_copy1,
    coalesce(d.start4 = p.recent_copy_start, false)::integer as agree_recent_copy4,
    coalesce(d.t1 = p.ngram_start[1], false)::integer as agree_ngram1,
    coalesce(d.start4 = p.ngram_start, false)::integer as agree_ngram4,
    -- tells drafts apart when several are verified together (multi-draft metrics)
    hash(d.draft) as draft_key,
    -- token ids: the draft's first and the last known one (candidates.sql); the model's thresholds
    -- on ids pick out digits, LaTeX and the calculator's marks, which are runs of the vocabulary
    d.t1 as first_token,
    d.last_token,
    -- and the draft's second and third, and the two known before the last (-1: none)
    coalesce(d.draft[2], -1) as second_token,
    coalesce(d.draft[3], -1) as third_token,
    d.before_last_token,
    d.two_before_last_token,
    k.seen_tokens8,
    k.first_token_count,
    k.first_token_distance
from drafts as d
join positions as p on p.trace_id = d.trace_id and p.pos = d.pos
join prefix1 as p1 using (prefix1_key)
join prefix2 as p2 using (prefix2_key)
join prefix4 as p4 using (prefix4_key)
join prefix8 as p8 using (prefix8_key)
join draft_known_tokens as k on k.candidate_row = d.candidate_row
