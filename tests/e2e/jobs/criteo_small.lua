-- A small job over the real Criteo sample in ../shared/data (path given
-- with --set data.train.path=... by tests/e2e/cli.sh).
local st = require "strata"
return st.job {
  name = "criteo_small",
  data = {
    train = st.data.criteo { path = "UNSET" },
  },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = 0.05 } },
  stages = {
    read = { threads = 1, queue = 2, batch_size = 1024 },
    train = { workers = 1, minibatch = 128 },
  },
  sync = st.sync.async {},
}
