-- Several errors in one file; test_lang pins every message.
return st.job {
  name = "bad",
  data = {
    train = st.data.criteo { path = "tests/lua/data/nope-*.tsv", on_bad_record = "skp" },
  },
  model = st.model.lr { optimizer = st.optim.adagrad { lr = -0.1 } },
  stages = {
    read  = { threads = "two", bach_size = 100, batch_size = 0 },
    pull  = { queue = 0 },
    train = { workers = 1.5, minibatch = 1024 },
  },
  storage = { mem = "lots" },
  sync = st.sync.gba { global_batch = "x" },
  output = { progres = 2 },
}
