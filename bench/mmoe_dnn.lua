-- mmoe_dnn.lua — the baseline for bench_step against jobs/mmoe_graph.lua: a
-- dnn over the same input (26 × 8 embeddings + 13 dense = 221 wide), the
-- same data format, minibatch and optimizer, an MLP of about the same FLOPs
-- per example (docs/benchmarks.md, "MMoE").
local st = require "strata"
return st.job {
  name = "mmoe_dnn",
  seed = 42,
  data = { train = st.data.criteo { path = "data/mmoe/train-*.tsv" },
           eval = st.data.criteo { path = "data/mmoe/eval.tsv" } },
  model = st.model.dnn { emb_dim = 8, hidden = { 256, 64, 16 },
                         optimizer = st.optim.adam { lr = 0.002 } },
  stages = { read = { threads = 1, batch_size = 4096 }, train = { workers = 1, minibatch = 512 } },
  sync = st.sync.async {},
}
