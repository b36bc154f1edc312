-- strata — the job language: `local st = require "strata"` (also the
-- predefined global `st`). A job file returns st.job{...}; see
-- docs/job-language.md for every field.
--
-- Reading a member st does not have (st.daat) is an error naming it, like
-- reading an undefined global.
local common = require "strata.common"
local schema = require "strata.schema"

local st = {
	job = common.constructor("job", "job", "st.job"),
	gen = common.constructor("gen", "gen", "st.gen"),
	stragglers = common.constructor("stragglers", "stragglers", "st.stragglers"),
	data = require "strata.data",
	model = require "strata.model",
	-- st.layer.<kind>{ inputs..., fields }: the nodes of st.model.graph
	-- (kinds and fields in schema.lua's S.layer; checks in validate.lua's
	-- V:graph). The list part names the layer's inputs.
	layer = common.namespace("layer", "st.layer", schema.layers, "layer kind", "layers", true),
	optim = require "strata.optim",
	sync = require "strata.sync",
	version = "0.1.0",
}
local names = { "job", "gen", "stragglers", "data", "model", "layer", "presets", "optim", "sync", "version" }

return setmetatable(st, {
	__index = function(_, k)
		-- st.presets.<name>{ options }: a preset's layers as a table
		-- { layers = ..., output = ... } for st.model.graph, to extend
		-- (presets.lua; docs/models.md, "The presets as graphs"). Loaded
		-- on first use: a job that names no preset function needs only
		-- the constructor modules above.
		if k == "presets" then
			local p = require("strata.presets").public
			rawset(st, "presets", p)
			return p
		end
		error("st has no field '" .. tostring(k) .. "'" ..
			common.did_you_mean(k, names), 2)
	end,
	__newindex = function(_, k)
		error("cannot add '" .. tostring(k) .. "' to st", 2)
	end,
	__metatable = false,
})
