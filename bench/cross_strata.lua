-- cross_strata.lua — strata's side of bench/cross.sh: dnn against dcnv2 at
-- (about) the same dense parameter budget on `strata gen --cross` data, the
-- settings of bench/torch_ctr.py's --model dnn|dcnv2 (AdaGrad rows lr 0.05,
-- init_accum 0.1, Adam dense lr 1e-3, rows uniform(-0.01, 0.01), one epoch
-- in file order, one worker × minibatch 512).
--
-- This file is the dnn: 26 slots × emb_dim 8 + 13 dense = 221 inputs, MLP
-- 256-128 (89,857 dense parameters). bench/cross.sh swaps in the dcnv2 by
-- --set model=st.model.dcnv2{...}: 2 cross layers of rank 32 (2 × (2·32·221
-- + 221) = 28,730) and MLP 176-128 (61,857), 90,587 in all (+0.8%).
--
--   strata run bench/cross_strata.lua --set 'data.train.path="DIR/train-*.tsv"' \
--     --set 'data.eval.path="DIR/eval.tsv"'
local st = require "strata"

return st.job {
  name = "cross_bench",
  seed = 1,
  epochs = 1,
  data = {
    train = st.data.criteo { path = "/tmp/crossbench/train-*.tsv" },
    eval = st.data.criteo { path = "/tmp/crossbench/eval.tsv" },
  },
  model = st.model.dnn {
    emb_dim = 8,
    hidden = { 256, 128 },
    activation = "relu",
    init_scale = 0.01,
    sparse_optimizer = st.optim.adagrad { lr = 0.05, init_accum = 0.1 },
    dense_optimizer = st.optim.adam { lr = 0.001 },
  },
  stages = {
    read = { threads = 1, queue = 4, batch_size = 8192 },
    pull = { threads = 1, queue = 2 },
    train = { workers = 1, queue = 2, minibatch = 512 },
    push = { threads = 1, queue = 2 },
    dump = { threads = 1, queue = 2 },
  },
  output = { progress = 30.0 },
}
