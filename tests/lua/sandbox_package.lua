-- sandbox: package must fail
local ok = true
package.loadlib("x", "y")
return st.job { name = "x", data = { train = st.data.criteo { path = "tests/lua/data/eval.tsv" } } }
