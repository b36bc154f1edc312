-- adversarial: check
-- exit: 2
-- expect: a_lr_nan.lua:10: model\.optimizer\.lr must be a finite number, got nan
-- expect: nothing was run
-- NaN fails every comparison, so 'lr > 0' could not catch it either.
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.lr { optimizer = st.optim.sgd { lr = 0/0, l2 = -math.huge } },
}
