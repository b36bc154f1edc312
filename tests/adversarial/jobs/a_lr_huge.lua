-- adversarial: check
-- exit: 2
-- expect: a_lr_huge.lua:10: model\.optimizer\.lr must be a finite number, got inf
-- expect: nothing was run
-- An infinite learning rate passed check and trained NaN.
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = math.huge } },
}
