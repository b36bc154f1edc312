-- Synthetic data end to end: the job generates 300k rows on first run into
-- the folder given with --set data.generate.dir=... (tests/e2e/cli.sh).
local st = require "strata"
return st.job {
  name = "gen_small",
  data = {
    train = st.data.criteo { path = "UNSET/train-*.tsv" },
    eval = st.data.criteo { path = "UNSET/eval.tsv" },
    generate = st.gen { dir = "UNSET", rows = 300000, eval_rows = 50000, files = 2,
                        zipf = 1.1, vocab = 100000, seed = 3 },
  },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = 0.05 } },
  stages = {
    read = { threads = 2, queue = 4, batch_size = 4096 },
    train = { workers = 1, minibatch = 256 },
  },
  sync = st.sync.async {},
}
