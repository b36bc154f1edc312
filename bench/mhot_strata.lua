-- mhot_strata.lua — strata's side of bench/mhot.sh: the standard CTR model
-- (26 slots × emb_dim 16, 13 dense, MLP 400-400-400, relu) on multi-hot
-- synthetic data (`strata gen --multi-hot 19`: 1..19 keys per field, 10 on
-- average), every field a '^' list summed per slot. Same settings as
-- bench/torch_mhot.py: AdaGrad rows (lr 0.05, init_accum 0.1), Adam dense
-- (lr 1e-3), rows uniform(-0.01, 0.01), one epoch in file order, one
-- optimizer step per 1024 examples.
--
--   strata gen --rows 200000 --eval-rows 20000 --multi-hot 19 --out /tmp/mhotbench
--   strata run bench/mhot_strata.lua
local st = require "strata"

local cols = { "label" }
for _ = 1, 13 do cols[#cols + 1] = "dense" end
for _ = 1, 26 do cols[#cols + 1] = { "cat", list = "^", pooling = "sum", missing = "drop" } end
local function src(path)
  return st.data.csv { path = path, sep = "\t", header = false, columns = cols }
end

return st.job {
  name = "mhot_bench",
  seed = 1,
  epochs = 1,
  data = {
    train = src("/tmp/mhotbench/train-*.tsv"),
    eval = src("/tmp/mhotbench/eval.tsv"),
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
    train = { workers = 1, queue = 2, minibatch = 1024 },
    push = { threads = 1, queue = 2 },
    dump = { threads = 1, queue = 2 },
  },
  sync = st.sync.allreduce {},
  output = { progress = 5.0 },
}
