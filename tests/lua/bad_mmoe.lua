-- st.layer.mmoe's and st.layer.slice's errors, each at its layer's line.
local st = require "strata"
return st.job {
  name = "bad-mmoe",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.graph {
    emb_dim = 4,
    layers = {
      { "e",  st.layer.embed {} },
      { "m0", st.layer.mmoe { "e", experts = 0, expert_hidden = { 8 }, tasks = 0 } },
      { "m",  st.layer.mmoe { "e", expert_hidden = { 8 } } },
      { "s3", st.layer.slice { "m", task = 3 } },
      { "se", st.layer.slice { "e", task = 1 } },
      { "abcdefghijklmnop", st.layer.mmoe { "e", experts = 12, expert_hidden = { 8 } } },
      { "h",  st.layer.concat { "m0", "s3", "se", "abcdefghijklmnop" } },
      { "out", st.layer.linear { "h" } },
    },
    output = "out",
  },
}
