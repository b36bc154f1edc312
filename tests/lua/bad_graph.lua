-- A layer graph's shape errors, each at its layer's line.
return st.job {
  name = "bad-graph",
  data = { train = st.data.criteo { path = "tests/lua/data/train-*.tsv" } },
  model = st.model.graph {
    emb_dim = 8,
    layers = {
      { "e",   st.layer.embed {} },
      { "x",   st.layer.dense {} },
      { "x0",  st.layer.concat { "e", "x" } },
      { "c",   st.layer.cross { "x0", rank = 221 } },
      { "s",   st.layer.add { "c", "x" } },
      { "h",   st.layer.mlp { "c", "q", sizes = { 16 } } },
      { "h2",  st.layer.mlp { "later", sizes = { 16 } } },
      { "e",   st.layer.wide {} },
      { "later", st.layer.fm { "x0" } },
      { "h3",  st.layer.mlp { "c", sizes = { 16 } } },
    },
    output = "h3",
  },
}
