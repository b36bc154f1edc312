-- DIN (st.layer.attention): the candidate 'site' attends over the list
-- field 'clicks', kept as a sequence (pooling = "none"); the embed layer
-- pools the other fields.
return st.job {
  name = "din",
  data = {
    train = st.data.csv { path = "tests/lua/data/lists.csv",
                          schema = { label = "click", dense = { "price" },
                                     cat = { "site",
                                             { "clicks", list = "^", max_len = 50,
                                               pooling = "none" },
                                             { name = "tags", list = "|" } } } },
  },
  model = st.model.graph {
    emb_dim = 4,
    layers = {
      { "e",   st.layer.embed {} },
      { "din", st.layer.attention { query = "site", keys = "clicks", hidden = { 12, 6 },
                                    activation = "sigmoid" } },
      { "x",   st.layer.dense {} },
      { "h",   st.layer.concat { "e", "din", "x" } },
      { "mlp", st.layer.mlp { "h", sizes = { 8 } } },
      { "out", st.layer.linear { "mlp" } },
    },
    output = "out",
  },
}
