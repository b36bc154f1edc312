-- adversarial: check
-- exit: 2
-- expect: a_emb_dim_2p31.lua:10: model\.emb_dim must be <= 4096, got 2147483648
-- expect: nothing was run
-- 2^31 passed check and failed later (INT_MIN after the cast).
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dnn { emb_dim = 2^31 },
}
