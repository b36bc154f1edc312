-- quickstart.lua — the default job: logistic regression over hashed
-- Criteo-style features, trained on synthetic data that the job generates
-- on first run (2M train rows, 200k eval rows, about 500 MB).
--
--   strata run jobs/quickstart.lua
--   strata run jobs/quickstart.lua --set stages.train.workers=2
--   strata plan jobs/quickstart.lua
local st = require "strata"

return st.job {
  name = "quickstart",
  seed = 42,
  epochs = 1,
  data = {
    train = st.data.criteo { path = "data/quickstart/train-*.tsv", on_bad_record = "skip" },
    eval = st.data.criteo { path = "data/quickstart/eval.tsv" },
    generate = st.gen { dir = "data/quickstart", rows = 2000000, eval_rows = 200000,
                        files = 4, zipf = 1.1, vocab = 1000000, seed = 7 },
  },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = 0.1, lr_dense = 0.01, init_accum = 1.0 }, l2 = 0.0 },
  stages = {
    read = { threads = 2, queue = 4, batch_size = 8192 },
    pull = { threads = 1, queue = 4 },
    train = { workers = 1, queue = 2, minibatch = 256 },
    push = { threads = 1, queue = 4 },
    dump = { threads = 1, queue = 4 },
  },
  storage = { mem = "2GiB" },
  sync = st.sync.async {},
  output = { dir = "out/quickstart", metrics = "out/quickstart/metrics.jsonl", progress = 1.0 },
}
