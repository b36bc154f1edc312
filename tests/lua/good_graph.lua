-- A layer graph in the job file: the dnn preset's graph, layer by layer
-- (the tensor names mlp.* and out.* are the preset's).
return st.job {
  name = "graph",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.graph {
    emb_dim = 8,
    layers = {
      { "e",   st.layer.embed {} },
      { "x",   st.layer.dense { transform = "log1p" } },
      { "x0",  st.layer.concat { "e", "x" } },
      { "c",   st.layer.cross { "x0", layers = 2, rank = 16 } },
      { "mlp", st.layer.mlp { "c", sizes = { 64, 32 } } },
      { "out", st.layer.linear { "mlp", size = 1 } },
    },
    output = "out",
    optimizer = st.optim.adagrad { lr = 0.05 },
  },
}
