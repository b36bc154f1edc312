-- sandbox: an error object that is a table says so (it printed "table: 0x...")
local st = require "strata"
error({})
