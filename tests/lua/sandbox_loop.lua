-- sandbox: an endless loop is stopped
local n = 0
while true do n = n + 1 end
