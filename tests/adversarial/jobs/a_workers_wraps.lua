-- adversarial: check
-- exit: 2
-- expect: a_workers_wraps.lua:10: stages\.train\.workers must be <= 64, got 4294967298
-- expect: nothing was run
-- 2^32 + 2 used to become 2 workers, and the job ran.
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  stages = { train = { workers = 4294967298 } },
}
