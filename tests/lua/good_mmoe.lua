-- jobs/mmoe_graph.lua's shape on the test data: an mmoe of 3 experts and
-- 2 tasks, each task's columns sliced into its own tower, the towers'
-- logits added.
local st = require "strata"
return st.job {
  name = "good-mmoe",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.graph {
    emb_dim = 4,
    layers = {
      { "e",  st.layer.embed {} },
      { "x",  st.layer.dense {} },
      { "h",  st.layer.concat { "e", "x" } },
      { "m",  st.layer.mmoe { "h", experts = 3, expert_hidden = { 16, 8 }, tasks = 2,
                              activation = "sigmoid" } },
      { "t1", st.layer.slice { "m", task = 1 } },
      { "t2", st.layer.slice { "m", task = 2 } },
      { "o1", st.layer.linear { "t1" } },
      { "o2", st.layer.linear { "t2" } },
      { "logit", st.layer.add { "o1", "o2" } },
    },
    output = "logit",
  },
}
