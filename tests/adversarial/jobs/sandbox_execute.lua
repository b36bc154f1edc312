-- adversarial: check
-- exit: 2
-- expect: sandbox_execute.lua:6: .*execute
-- A job file must not run programs: the sandbox removes os.execute.
local st = require "strata"
os.execute("touch /tmp/strata-pwned")
return st.job { name = "x" }
