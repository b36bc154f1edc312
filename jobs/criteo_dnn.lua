-- criteo_dnn.lua — the dnn preset on real Criteo rows (7,200 train rows of
-- criteo/Lapis-Hong_Wide-ResDNN; dev.csv scored after training). The PyTorch
-- twin with the same hyper-parameters, epochs, minibatch and data order is
-- tests/reference/criteo_dnn.py; results are in docs/benchmarks.md,
-- "Model quality on real Criteo".
--
--   strata run jobs/criteo_dnn.lua
--   strata run jobs/criteo_dnn.lua --set data.eval.path=../shared/data/criteo/Lapis-Hong_Wide-ResDNN/test.csv
--   strata run jobs/criteo_dnn.lua --set seed=2
--
-- Paths are relative to the repository root (../shared sits beside it).
local st = require "strata"

local dir = "../shared/data/criteo/Lapis-Hong_Wide-ResDNN"

return st.job {
  name = "criteo_dnn",
  seed = 1,
  epochs = 3,
  data = {
    train = st.data.criteo { path = dir .. "/train.csv" },
    eval = st.data.criteo { path = dir .. "/dev.csv" },
  },
  model = st.model.dnn {
    emb_dim = 8,
    hidden = { 64, 32 },
    activation = "relu",
    pooling = "sum",
    init_scale = 0.01,
    sparse_optimizer = st.optim.adagrad { lr = 0.05, init_accum = 0.1, eps = 1e-10 },
    dense_optimizer = st.optim.adam { lr = 0.001 },
  },
  stages = {
    -- one reader thread and one worker: minibatches in file order, as the
    -- PyTorch twin sees them (and the run is deterministic)
    read = { threads = 1, queue = 4, batch_size = 1024 },
    pull = { threads = 1, queue = 4 },
    train = { workers = 1, queue = 2, minibatch = 64 },
    push = { threads = 1, queue = 4 },
    dump = { threads = 1, queue = 4 },
  },
  sync = st.sync.allreduce {},
  output = { progress = 1.0 },
}
