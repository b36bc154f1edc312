-- adversarial: check
-- exit: 2
-- expect: a_pcall_loop.lua:9: the job file ran for more than 10 s; is there an endless loop\?
-- expect: nothing was run
-- The watchdog's timeout was an ordinary error: pcall caught it and the loop
-- went on forever. Now a stopped load raises again after every pcall,
-- xpcall, coroutine.resume and on every instruction.
local st = require "strata"
while true do pcall(function() while true do end end) end
return st.job { name = "x" }
