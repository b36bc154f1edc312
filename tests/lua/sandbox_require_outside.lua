-- sandbox: require_outside must fail
local ok = true
require "../secret"
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
