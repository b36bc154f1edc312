-- gen_multihot.lua read with the first key of every list only (max_len 1,
-- keep "first"): what a single-hot reader of multi-hot data sees.
-- tests/e2e/cli.sh checks that gen_multihot.lua (pooled lists) scores higher.
local st = require "strata"
local list = { "cat", list = "^", max_len = 1, keep = "first", pooling = "sum" }
local cols = { "label" }
for _ = 1, 13 do cols[#cols + 1] = "dense" end
for _ = 1, 26 do cols[#cols + 1] = list end
local function src(path)
  return st.data.csv { path = path, sep = "\t", header = false, columns = cols }
end
return st.job {
  name = "gen_multihot_first",
  data = {
    train = src("UNSET/train-*.tsv"),
    eval = src("UNSET/eval.tsv"),
    generate = st.gen { dir = "UNSET", rows = 100000, eval_rows = 20000, files = 1,
                        zipf = 1.1, vocab = 2000, seed = 5, multi_hot = 10 },
  },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = 0.05 } },
  stages = {
    read = { threads = 1, queue = 4, batch_size = 4096 },
    train = { workers = 1, minibatch = 256 },
  },
  sync = st.sync.async {},
}
