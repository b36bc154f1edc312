-- sandbox: dofile must fail
local ok = true
dofile("/etc/passwd")
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
