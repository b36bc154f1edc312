-- dlrm's bottom MLP must end at emb_dim; admission probability is in (0, 1].
return st.job {
  name = "bad-dlrm",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.dlrm {
    emb_dim = 16,
    bottom = { 64, 32 },
    admission = { probability = 1.5 },
  },
}
