-- sandbox: popen must fail
local ok = true
io.popen("ls")
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
