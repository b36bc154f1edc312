-- CSV columns named against the file's header.
return st.job {
  name = "csv",
  data = {
    train = st.data.csv { path = "tests/lua/data/named.csv",
                          schema = { label = "click", dense = { "price" }, cat = { "site", "ad" },
                                     ignore = { "junk" } } },
  },
}
