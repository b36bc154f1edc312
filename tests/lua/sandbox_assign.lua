-- sandbox: assign must fail
local ok = true
leaked = 1
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
