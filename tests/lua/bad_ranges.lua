-- Numbers that used to be cast silently (2^32 + 1 became 1) or passed
-- check and failed later (issue 15); test_lang pins every message.
return st.job {
  name = "ranges",
  epochs = 2^32,
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dnn { emb_dim = 4294967304, hidden = { 64, 4294967297 },
                         optimizer = st.optim.adam { lr = math.huge, eps = 0/0, beta1 = -math.huge } },
  stages = {
    read = { batch_size = 4294967297, queue = 1e6 },
    train = { workers = 4294967298 },
  },
  storage = { mem = 2^63 },
  sync = st.sync.gba { global_batch = 1e300, tolerance = 2^31 },
  output = { progress = math.huge },
}
