-- sandbox: bigmem must fail
local ok = true
local s = string.rep("x", 1 << 30)
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
