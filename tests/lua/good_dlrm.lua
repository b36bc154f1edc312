-- DLRM with one optimizer for both groups (lr_dense gives the dense rate).
return st.job {
  name = "dlrm",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dlrm {
    emb_dim = 16,
    bottom = { 64, 16 },
    hidden = { 256, 128 },
    optimizer = st.optim.adagrad { lr = 0.1, lr_dense = 0.01 },
    admission = { probability = 0.25 },
  },
}
