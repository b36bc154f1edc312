-- storage.lua — the model of bench/storage.sh: 26 slots x emb_dim 16 with
-- element-wise AdaGrad rows (32 floats a row), MLP 256-128,
-- on synthetic Zipf data. bench/storage.sh runs it twice, all rows in RAM and
-- with storage.mem = 10% of the model plus an SSD tier, and compares.
local st = require "strata"

return st.job {
  name = "storage_bench",
  seed = 1,
  epochs = 1,
  data = {
    train = st.data.criteo { path = "/tmp/storebench/train-*.tsv" },
    eval = st.data.criteo { path = "/tmp/storebench/eval.tsv" },
  },
  model = st.model.dnn {
    emb_dim = 16,
    hidden = { 256, 128 },
    init_scale = 0.01,
    sparse_optimizer = st.optim.adagrad { lr = 0.05, init_accum = 0.1 },
    dense_optimizer = st.optim.adam { lr = 0.001 },
  },
  stages = {
    read = { threads = 1, queue = 2, batch_size = 4096 },
    pull = { threads = 1, queue = 2 },
    train = { workers = 1, queue = 2, minibatch = 1024 },
    push = { threads = 1, queue = 2 },
    dump = { threads = 1, queue = 2 },
  },
  sync = st.sync.allreduce {},
  output = { progress = 5.0 },
}
