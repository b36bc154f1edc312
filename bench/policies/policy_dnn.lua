-- policy_dnn.lua — the model of the sync-policy experiment
-- (bench/policies/run.sh; docs/policies.md, docs/benchmarks.md "Sync
-- policies"): the dnn preset, 26 slots × emb_dim 8, MLP {64, 32} relu,
-- AdaGrad rows, Adam dense, 4 train workers × minibatch 256 = a global
-- minibatch of 1024 examples, the same for every policy. Only `sync` (and,
-- for the straggler runs, `stragglers`) changes between runs; run.sh sets
-- the data paths, the epochs and the policy with --set:
--
--   strata run bench/policies/policy_dnn.lua \
--     --set data.train.path=/tmp/policies/syn/train-*.tsv \
--     --set data.eval.path=/tmp/policies/syn/eval.tsv \
--     --set 'sync=st.sync.gba{global_batch=1024, tolerance=2}'
local st = require "strata"

local dir = "../shared/data/criteo/Lapis-Hong_Wide-ResDNN"

return st.job {
  name = "policy_dnn",
  seed = 1,
  epochs = 1,
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
    read = { threads = 1, queue = 4, batch_size = 8192 },
    pull = { threads = 1, queue = 2 },
    train = { workers = 4, queue = 2, minibatch = 256 },
    push = { threads = 1, queue = 2 },
    dump = { threads = 1, queue = 2 },
  },
  sync = st.sync.allreduce {},
  output = { progress = 5.0 },
}
