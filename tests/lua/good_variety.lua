-- Other formats, models, optimizers, policies and storage; uses a helper
-- module from this folder.
local st = require "strata"
local helper = require "helper_mod"
return st.job {
  name = helper.name("variety"),
  seed = 7,
  epochs = 3,
  data = {
    train = { format = "libsvm", path = { "tests/lua/data/eval.tsv", "tests/lua/data/train-*.tsv" },
              slots = 3, on_bad_record = "fail", max_report = 0, limit = 1000 },
    eval = st.data.csv { path = "tests/lua/data/small.csv", sep = ";", header = false,
                         columns = { "label", "dense", "cat", "ignore", "cat" } },
  },
  model = st.model.dnn { hidden = { 64, 32 }, emb_dim = 16, l2 = 1e-4, dense_transform = "none",
                         optimizer = st.optim.adam { lr = 0.001, lr_dense = 0.01 } },
  stages = {
    read = { batch_size = 100 },
    train = { workers = 4, near = "gpu" },
  },
  storage = { mem = "512MiB", ssd = { path = "/tmp/strata-ssd", budget = "10GB" } },
  sync = st.sync.shadow { algo = "ma", alpha = 0.25 },
  output = { dir = "out/variety" },
}
