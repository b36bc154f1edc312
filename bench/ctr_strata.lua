-- ctr_strata.lua — strata's side of bench/ctr.sh: the standard CTR model
-- (26 slots × emb_dim 16, 13 dense, MLP 400-400-400, relu) on strata's
-- synthetic Criteo TSV. Same settings as bench/torch_ctr.py: AdaGrad on the
-- embedding rows (lr 0.05, init_accum 0.1), Adam on the dense tensors
-- (lr 1e-3), rows start uniform(-0.01, 0.01), one epoch in file order, a
-- global minibatch of 1024 examples per optimizer step (2 workers × 512
-- with allreduce = one step of 1024, as PyTorch's single minibatch).
-- bench/ctr.sh overrides it to 1 worker × 1024, the faster setting on
-- 2 cores (docs/benchmarks.md "Training speed against PyTorch").
--
--   strata gen --rows 2000000 --eval-rows 200000 --out /tmp/ctrbench
--   strata run bench/ctr_strata.lua                       # (a) end to end
--   build/bench/bench_ctr bench/ctr_strata.lua             # (b) from memory
--   ... --set data.train.path=/other/train-*.tsv --set data.eval.path=/other/eval.tsv
local st = require "strata"

return st.job {
  name = "ctr_bench",
  seed = 1,
  epochs = 1,
  data = {
    train = st.data.criteo { path = "/tmp/ctrbench/train-*.tsv" },
    eval = st.data.criteo { path = "/tmp/ctrbench/eval.tsv" },
  },
  model = st.model.dnn {
    emb_dim = 16,
    hidden = { 400, 400, 400 },
    activation = "relu",
    init_scale = 0.01,
    sparse_optimizer = st.optim.adagrad { lr = 0.05, init_accum = 0.1 },
    dense_optimizer = st.optim.adam { lr = 0.001 },
  },
  stages = {
    read = { threads = 1, queue = 4, batch_size = 8192 },
    pull = { threads = 1, queue = 2 },
    train = { workers = 2, queue = 2, minibatch = 512 },
    push = { threads = 1, queue = 2 },
    dump = { threads = 1, queue = 2 },
  },
  sync = st.sync.allreduce {},
  output = { progress = 5.0 },
}
