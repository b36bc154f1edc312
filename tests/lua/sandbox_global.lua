-- sandbox: global must fail
local ok = true
local x = undefined_thing
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
