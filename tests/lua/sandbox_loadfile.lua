-- sandbox: loadfile must fail
local ok = true
loadfile("/etc/passwd")
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
