-- adversarial: check
-- exit: 2
-- expect: a_xpcall_handler_loop.lua:8: the job file ran for more than 10 s; is there an endless loop\?
-- expect: nothing was run
-- Lua calls a message handler for an error raised in a hook with hooks
-- still off, so a handler that loops was out of the watchdog's reach.
local st = require "strata"
local function spin() while true do end end
while true do xpcall(spin, spin) end
return st.job { name = "x" }
