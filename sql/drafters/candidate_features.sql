-- out: candidate_features
-- grain: trace_id, pos, source
-- reads: candidates
-- params: (none)
-- What the confidence selector (--preset default) knows of each draft when it chooses: its source
-- and context length, how far back a copy reaches, how many other drafts at the position agree on its first 1, 2, 4 and 8
-- tokens (and with the longest recent copy and n-gram drafts there), and how long the best
-- in-trace and global matches at the position are.
select
    split,
    trace_id,
    pos,
    completion_pos,
    family_order,
    family,
    source,
    coalesce(ctx_len, 0) as ctx_len,
    coalesce(count, 0) as count,
    score,
    -- how far back a copied text starts (its period, for a repetition loop); 0 for other sources
    coalesce(pos - match_pos, 0) as copy_distance,
    accepted,
    count(*) over (partition by trace_id, pos, draft[1]) - 1 as agree1,
    count(*) over (partition by trace_id, pos, draft[1:2]) - 1 as agree2,
    count(*) over (partition by trace_id, pos, draft[1:4]) - 1 as agree4,
    count(*) over (partition by trace_id, pos, draft[1:8]) - 1 as agree8,
    count(*) over w as drafts_here,
    coalesce(max(case when family = 'recent-copy' then ctx_len end) over w, 0) as longest_recent_copy,
    coalesce(max(case when family = 'ngram-all' then ctx_len end) over w, 0) as longest_ngram,
    coalesce(max(case when family = 'copy' then ctx_len end) over w, 0) as longest_copy,
    len(list_distinct(draft)) as distinct_tokens,
    -- agreement with the position's longest recent copy and longest n-gram drafts
    coalesce(draft[1] = arg_max(case when family = 'recent-copy' then draft[1] end,
        case when family = 'recent-copy' then ctx_len end) over w, false)::integer as agree_recent_copy1,
    coalesce(draft[1:4] = arg_max(case when family = 'recent-copy' then draft[1:4] end,
        case when family = 'recent-copy' then ctx_len end) over w, false)::integer as agree_recent_copy4,
    coalesce(draft[1] = arg_max(case when family = 'ngram-all' then draft[1] end,
        case when family = 'ngram-all' then ctx_len end) over w, false)::integer as agree_ngram1,
    coalesce(draft[1:4] = arg_max(case when family = 'ngram-all' then draft[1:4] end,
        case when family = 'ngram-all' then ctx_len end) over w, false)::integer as agree_ngram4,
    -- tells drafts apart when several are verified together (multi-draft metrics)
    hash(draft) as draft_key
from candidates
window w as (partition by trace_id, pos)

