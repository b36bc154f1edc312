-- adversarial: check
-- exit: 2
-- expect: a_epochs_2p32.lua:10: epochs must be <= 1000000, got 4294967296
-- expect: nothing was run
-- 2^32 passed check and failed later (0 epochs after the cast).
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  epochs = 2^32,
}
