-- mmoe_graph.lua — a multi-gate mixture of experts (MMoE; Ma et al. 2018,
-- docs/models.md "MMoE") written layer by layer, with one head: two task
-- towers over the two gates' outputs, their logits added. Both gates get a
-- gradient from the one label; give each task its own label with the
-- multi-head form (`heads = {...}` of st.model.graph, docs/models.md) when
-- the data has two label columns.
--
-- Data: Criteo-like rows (label, 13 dense, 26 cat) the job generates on
-- first run.
--
--   strata plan jobs/mmoe_graph.lua      (the mmoe node's parameters, FLOPs)
--   strata run jobs/mmoe_graph.lua
local st = require "strata"

return st.job {
  name = "mmoe_graph",
  seed = 42,
  data = {
    train = st.data.criteo { path = "data/mmoe/train-*.tsv" },
    eval = st.data.criteo { path = "data/mmoe/eval.tsv" },
    generate = st.gen { dir = "data/mmoe", rows = 200000, eval_rows = 20000, files = 2,
                        zipf = 1.1, vocab = 100000, seed = 7 },
  },
  model = st.model.graph {
    emb_dim = 8,
    layers = {
      { "e",      st.layer.embed {} },
      { "x",      st.layer.dense {} },
      { "h",      st.layer.concat { "e", "x" } },
      -- 4 experts of 64 then 32, 2 gates: 2 × 32 = 64 wide
      { "m",      st.layer.mmoe { "h", experts = 4, expert_hidden = { 64, 32 }, tasks = 2,
                                  activation = "relu" } },
      { "t1",     st.layer.slice { "m", task = 1 } },   -- columns 0..31
      { "t2",     st.layer.slice { "m", task = 2 } },   -- columns 32..63
      { "tower1", st.layer.mlp { "t1", sizes = { 16 } } },
      { "out1",   st.layer.linear { "tower1" } },
      { "tower2", st.layer.mlp { "t2", sizes = { 16 } } },
      { "out2",   st.layer.linear { "tower2" } },
      { "logit",  st.layer.add { "out1", "out2" } },
    },
    output = "logit",
    optimizer = st.optim.adam { lr = 0.002 },
  },
  stages = {
    read = { threads = 1, batch_size = 4096 },
    train = { workers = 1, minibatch = 512 },
  },
  sync = st.sync.async {},
}
