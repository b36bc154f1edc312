-- DCNv2: two low-rank cross layers over concat(embeddings, dense), then the MLP.
return st.job {
  name = "dcnv2",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dcnv2 {
    emb_dim = 8,
    cross_layers = 2,
    cross_rank = 16,
    hidden = { 64, 32 },
    sparse_optimizer = st.optim.adagrad { lr = 0.05 },
    dense_optimizer = st.optim.adam { lr = 0.001 },
  },
}
