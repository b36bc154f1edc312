-- One wrong value per line (test_lang pins each message).
return st.job {
  name = "bad-deep",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dnn {
    emb_dim = { 16, 16, 8 },
    hidden = { 400, 0 },
    sparse_optimizer = st.optim.adagrad { lr = -0.1 },
    dense_optimizer = st.optim.adam { beta1 = 1 },
    admission = { min_count = -1 },
    ttl = -5,
  },
}
