-- Multi-hot synthetic data (issue 18): `strata gen --multi-hot 10` rows whose
-- hidden model sums each list's weights over sqrt(length), read back as 26
-- '^'-separated list fields. tests/e2e/cli.sh trains it twice on the same
-- rows: pooled lists, and the first key only (--set the list's max_len to 1,
-- keep "first"), and checks that pooling scores higher.
local st = require "strata"
local list = { "cat", list = "^", max_len = 100, keep = "first", pooling = "sum" }
local cols = { "label" }
for _ = 1, 13 do cols[#cols + 1] = "dense" end
for _ = 1, 26 do cols[#cols + 1] = list end
local function src(path)
  return st.data.csv { path = path, sep = "\t", header = false, columns = cols }
end
return st.job {
  name = "gen_multihot",
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
