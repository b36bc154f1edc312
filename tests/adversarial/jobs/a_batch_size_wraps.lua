-- adversarial: check
-- exit: 2
-- expect: a_batch_size_wraps.lua:10: stages\.read\.batch_size must be <= 1048576, got 4294967297
-- expect: nothing was run
-- 2^32 + 1 used to become a batch of 1, and the job ran.
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  stages = { read = { batch_size = 4294967297 } },
}
