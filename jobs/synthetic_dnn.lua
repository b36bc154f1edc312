-- synthetic_dnn.lua — a DNN (26 embeddings of dim 16 + 13 dense features,
-- MLP 400-400-400) on synthetic Criteo-like data the job generates on first
-- run (1M train rows, 100k eval rows).
--
--   strata run jobs/synthetic_dnn.lua
--   strata run jobs/synthetic_dnn.lua --set sync=allreduce --set stages.train.workers=2
local st = require "strata"

return st.job {
  name = "synthetic_dnn",
  seed = 42,
  data = {
    train = st.data.criteo { path = "data/synthetic/train-*.tsv" },
    eval = st.data.criteo { path = "data/synthetic/eval.tsv" },
    generate = st.gen { dir = "data/synthetic", rows = 1000000, eval_rows = 100000,
                        files = 2, zipf = 1.1, vocab = 100000, seed = 7 },
  },
  model = st.model.dnn { emb_dim = 16, hidden = { 400, 400, 400 },
                         optimizer = st.optim.adam { lr = 0.003 } },
  stages = {
    read = { threads = 1, queue = 4, batch_size = 8192 },
    train = { workers = 1, queue = 2, minibatch = 1024 },
  },
  sync = st.sync.async {},
}
