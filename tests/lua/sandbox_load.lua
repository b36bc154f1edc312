-- sandbox: load takes strings only
local ok = true
load(function() return nil end)
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
