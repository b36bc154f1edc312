-- sandbox: execute must fail
local ok = true
os.execute("true")
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
