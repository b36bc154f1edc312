-- st.layer.attention's errors, each at its layer's line, and a sequence
-- (pooling = "none") that no attention layer reads.
return st.job {
  name = "bad-din",
  data = {
    train = st.data.csv { path = "tests/lua/data/lists.csv",
                          schema = { label = "click", dense = { "price" },
                                     cat = { "site", { "clicks", list = "^", pooling = "none" },
                                             { "tags", list = "|", pooling = "none" } } } },
  },
  model = st.model.graph {
    emb_dim = { 4, 8, 4 },
    layers = {
      { "e",  st.layer.embed {} },
      { "a1", st.layer.attention { query = "sites", keys = "clicks" } },
      { "a2", st.layer.attention { query = "site", keys = "clicks" } },
      { "a3", st.layer.attention { query = "tags", keys = "site" } },
      { "h",  st.layer.concat { "e", "a1", "a2", "a3" } },
      { "out", st.layer.linear { "h" } },
    },
    output = "out",
  },
}
