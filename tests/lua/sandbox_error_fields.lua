-- sandbox: a table error object shows its fields (in order), or its message
local st = require "strata"
error({ code = 3, detail = "disk", [1] = true })
