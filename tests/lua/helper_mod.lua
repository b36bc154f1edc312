-- A module a job requires from its own folder.
local M = {}
function M.name(s) return s .. "-job" end
return M
