-- CSV list fields (docs/job-language.md, "List fields"): one by name in
-- schema.cat, one positional.
return st.job {
  name = "csv-lists",
  data = {
    train = st.data.csv { path = "tests/lua/data/lists.csv",
                          schema = { label = "click", dense = { "price" },
                                     cat = { "site",
                                             { "clicks", list = "^", max_len = 50, keep = "last",
                                               pooling = "mean" },
                                             { name = "tags", list = "|", missing = "drop" } } } },
    eval = st.data.csv { path = "tests/lua/data/lists.csv", missing = "drop",
                         columns = { "label", "dense", "cat", { "cat", list = "^", max_len = 3 },
                                     "cat" } },
  },
  model = st.model.dnn { emb_dim = 4, hidden = { 8 } },
}
