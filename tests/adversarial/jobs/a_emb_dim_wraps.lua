-- adversarial: check
-- exit: 2
-- expect: a_emb_dim_wraps.lua:10: model\.emb_dim must be <= 4096, got 4294967304
-- expect: nothing was run
-- 2^32 + 8 used to become emb_dim 8, and the job ran.
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dnn { emb_dim = 4294967304 },
}
