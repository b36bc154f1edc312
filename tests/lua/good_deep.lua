-- A DNN with every model field set; criteo has 26 slots, so emb_dim lists 26.
local dims = {}
for i = 1, 26 do dims[i] = (i <= 13) and 16 or 8 end
return st.job {
  name = "deep",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dnn {
    emb_dim = dims,
    pooling = "mean",
    hidden = { 400, 400, 400 },
    activation = "sigmoid",
    init_scale = 0.05,
    optimizer = st.optim.sgd { lr = 0.5 },
    sparse_optimizer = st.optim.adagrad { lr = 0.02, rowwise = true, eps = 1e-6, l2 = 1e-5 },
    dense_optimizer = st.optim.adam { lr = 2e-3, beta1 = 0.8, beta2 = 0.99, eps = 1e-7 },
    admission = { min_count = 3 },
    ttl = 100000,
    dense_transform = "none",
  },
}
