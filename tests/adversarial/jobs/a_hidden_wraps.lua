-- adversarial: check
-- exit: 2
-- expect: a_hidden_wraps.lua:10: model\.hidden\[1\] must be <= 65536, got 4294967297
-- expect: nothing was run
-- lang.c cast 2^32 + 1 to int: a 1-neuron layer, and the job ran.
local st = require "strata"
return st.job {
  name = "x",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dnn { hidden = { 4294967297 } },
}
