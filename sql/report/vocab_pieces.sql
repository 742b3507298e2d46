-- out: vocab_pieces
-- grain: token_id
-- reads: vocab
-- params: (none)
-- Every token's text piece, by id: what as_text() joins, fetched once to render many drafts.
select
    token_id,
    piece
from vocab
order by token_id
