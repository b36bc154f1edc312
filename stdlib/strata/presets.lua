-- strata.presets — the model presets as Lua functions that build a layer
-- graph: st.presets.lr / dnn / wdl / deepfm / dlrm / dcnv2 / din / mmoe
-- { options } returns { layers = { { name, st.layer.<kind>{...} }, ... },
-- output = name } (mmoe: heads = { { label =, output =, weight = }, ... }
-- instead of output), the fields of st.model.graph (docs/models.md, "The
-- presets as graphs").
--
-- A job that says st.model.dnn{...} goes through here too: validate.lua's
-- V:model checks the preset's fields as before, calls the function with the
-- checked values and validates the result as it validates st.model.graph,
-- so the C side builds every preset from these layers (ops/nn/model.c keeps
-- its hand-written builders as the reference twin, tests/unit/
-- test_presets.c pins the two bit for bit).
--
-- Bit-identity with the twin rests on three things, so keep them when
-- editing: the layers come in the order the twin calls graph.h's builders
-- (that order is the tensor order, hence the offsets and the seeded initial
-- values, and the order gradients of a shared input are summed); the layers
-- with parameters carry the twin's tensor prefixes (dense, bot, mlp, out,
-- cross); and the add sums its terms in the twin's order (out, wide, dense,
-- fm). Layers without parameters have names of their own (x, emb, x0, ...).
--
-- The options are the preset's structural fields: hidden, activation,
-- dense_transform, and dlrm's bottom (and emb_dim, only for bottom's
-- default { 64, emb_dim }), dcnv2's cross_layers and cross_rank, din's
-- query, keys, att_hidden and att_activation. Defaults are the job's
-- (schema.lua). An empty hidden list means no MLP (the output layer reads
-- the features directly), 0 cross layers no cross layer.
--
-- din and mmoe have no C twin (they came after the presets became Lua
-- functions): validate.lua hands st.model.din / st.model.mmoe to C as the
-- graph they build, so their checkpoints and exports carry their layers
-- (node lines, and mmoe's head lines), as a graph's do.
local core = select(3, ...)
local common = require "strata.common"
local schema = require "strata.schema"

local M = {}

-- The st.layer constructors (the same kind and names as init.lua's st.layer,
-- so validate.lua sees the tables a job would have written).
local layer = {}
for _, k in ipairs(schema.layers) do
	layer[k] = common.constructor("layer", k, "st.layer." .. k)
end

local deep_fields = { "hidden", "activation", "dense_transform" }
local FIELDS = {
	lr = { "dense_transform" },
	dnn = deep_fields, wdl = deep_fields, deepfm = deep_fields,
	dlrm = { "hidden", "activation", "dense_transform", "bottom", "emb_dim" },
	dcnv2 = { "hidden", "activation", "dense_transform", "cross_layers", "cross_rank" },
	din = { "query", "keys", "att_hidden", "att_activation", "hidden", "activation",
		"dense_transform" },
	mmoe = { "labels", "weights", "experts", "expert_hidden", "hidden", "activation",
		"dense_transform" },
}
-- Options a preset cannot do without (no default: they name data fields).
-- (st.model.mmoe's labels default to data.train's; st.presets.mmoe, called
-- before the data is known, needs them.)
local REQUIRED = { din = { "query", "keys" }, mmoe = { "labels" } }

-- The layer lists. `o` holds checked options with defaults filled; `L`
-- appends one layer and returns its name.
local build = {}

-- lr: logit = wide + linear "dense" (x). (The row holds the wide weight
-- alone: a preset without an embedding layer.)
function build.lr(L, o)
	local x = L("x", layer.dense { transform = o.dense_transform })
	local lin = L("dense", layer.linear { x, size = 1 })
	local w = L("wide", layer.wide {})
	return L("logit", layer.add { w, lin })
end

-- dnn, wdl, deepfm, dcnv2: an MLP over concat(embeddings, dense features),
-- with dcnv2's cross layers in front of it and wdl/deepfm's wide terms
-- added to its output.
local function deep(L, o, kind)
	local wide = kind == "wdl" or kind == "deepfm"
	local x = L("x", layer.dense { transform = o.dense_transform })
	local lin = wide and L("dense", layer.linear { x, size = 1 })
	local e = L("emb", layer.embed {})
	local h = L("x0", layer.concat { e, x })
	if kind == "dcnv2" and o.cross_layers > 0 then
		h = L("cross", layer.cross { h, layers = o.cross_layers, rank = o.cross_rank })
	end
	if #o.hidden > 0 then
		h = L("mlp", layer.mlp { h, sizes = o.hidden, activation = o.activation })
	end
	local out = L("out", layer.linear { h, size = 1 })
	if not wide then return out end
	local terms = { out, L("wide", layer.wide {}), lin }
	if kind == "deepfm" then terms[4] = L("fm", layer.fm { e }) end
	return L("logit", layer.add(terms))
end
function build.dnn(L, o) return deep(L, o, "dnn") end
function build.wdl(L, o) return deep(L, o, "wdl") end
function build.deepfm(L, o) return deep(L, o, "deepfm") end
function build.dcnv2(L, o) return deep(L, o, "dcnv2") end

-- dlrm (Naumov et al. 2019, §2.2): z0 = bottom MLP(x); the dot products of
-- every pair of [z0, e_1, ..., e_S]; the top MLP over concat(z0, pairs).
function build.dlrm(L, o)
	local x = L("x", layer.dense { transform = o.dense_transform })
	local z0 = L("bot", layer.mlp { x, sizes = o.bottom, activation = o.activation })
	local e = L("emb", layer.embed {})
	local z = L("z", layer.concat { z0, e })
	local top = L("top", layer.concat { z0, L("dot", layer.dot { z }) })
	local h = top
	if #o.hidden > 0 then
		h = L("mlp", layer.mlp { top, sizes = o.hidden, activation = o.activation })
	end
	return L("out", layer.linear { h, size = 1 })
end

-- din (Zhou et al. 2018, §4.3 and Figure 2): the candidate (query) attends
-- over the behaviour sequence (keys); the attention's output joins the
-- other pooled fields (embed leaves the sequence out) and the dense
-- features in the MLP. The layers and their order are jobs/din_graph.lua's
-- hand-written graph (e, din, x, h, mlp, out), so the two are one model bit
-- for bit (tests/e2e/din.sh compares their digests).
function build.din(L, o)
	local e = L("e", layer.embed {})
	local a = L("din", layer.attention { query = o.query, keys = o.keys,
		hidden = o.att_hidden, activation = o.att_activation })
	local x = L("x", layer.dense { transform = o.dense_transform })
	local h = L("h", layer.concat { e, a, x })
	if #o.hidden > 0 then
		h = L("mlp", layer.mlp { h, sizes = o.hidden, activation = o.activation })
	end
	return L("out", layer.linear { h, size = 1 })
end

-- mmoe (Ma et al. 2018, §4.2 and Figure 1c): every label a task. The
-- experts and one softmax gate per task read concat(embeddings, dense
-- features); task t's gated mixture (slice t of the mmoe layer) feeds its
-- tower MLP (hidden; none when empty) and a linear layer to its logit, the
-- head of label t with loss weight weights[t] (default 1). The layers
-- (e, x, h, m, then t<t>, tower<t>, out<t> per task) are what a job would
-- write by hand: jobs/mmoe.lua's graph (docs/models.md, "MMoE").
function build.mmoe(L, o)
	local e = L("e", layer.embed {})
	local x = L("x", layer.dense { transform = o.dense_transform })
	local h = L("h", layer.concat { e, x })
	local m = L("m", layer.mmoe { h, experts = o.experts, expert_hidden = o.expert_hidden,
		tasks = #o.labels, activation = o.activation })
	local heads = {}
	for t, label in ipairs(o.labels) do
		local s = L("t" .. t, layer.slice { m, task = t })
		if #o.hidden > 0 then
			s = L("tower" .. t, layer.mlp { s, sizes = o.hidden, activation = o.activation })
		end
		local out = L("out" .. t, layer.linear { s, size = 1 })
		heads[t] = { label = label, output = out, weight = o.weights and o.weights[t] }
	end
	return nil, heads
end

-- The options with the job's defaults; raises (at `level`) on an unknown
-- option or a value of the wrong type. The values' ranges are checked where
-- the layers are validated, as st.model.graph's are.
local function options(name, opts, level)
	if opts == nil then opts = {} end
	local full = "st.presets." .. name
	if type(opts) ~= "table" or common.tag(opts) then
		error(full .. " expects a table of options, as in " .. full .. "{...}", level + 1)
	end
	local known = {}
	for _, f in ipairs(FIELDS[name]) do known[f] = true end
	for k in pairs(opts) do
		if not known[k] then
			error(full .. " has no option '" .. tostring(k) .. "'" ..
				common.did_you_mean(k, FIELDS[name]) .. "; options: " ..
				table.concat(FIELDS[name], ", "), level + 1)
		end
	end
	local function list(k, default)
		local v = opts[k]
		if v == nil then return default end
		if type(v) ~= "table" then
			error(full .. ": " .. k .. " must be a list of layer sizes", level + 2)
		end
		local t = {}
		for i, n in ipairs(v) do t[i] = n end
		return t
	end
	local function strs(k)
		local v = opts[k]
		if v == nil then return nil end
		if type(v) ~= "table" or common.tag(v) or #v == 0 then
			error(full .. ": " .. k .. " must be a non-empty list of label names", level + 2)
		end
		local t = {}
		for i, s in ipairs(v) do
			if type(s) ~= "string" or s == "" then
				error(full .. ": " .. k .. "[" .. i .. "] must be a label name (a string)",
					level + 2)
			end
			t[i] = s
		end
		return t
	end
	local function nums(k)
		local v = opts[k]
		if v == nil then return nil end
		if type(v) ~= "table" or common.tag(v) then
			error(full .. ": " .. k .. " must be a list of numbers", level + 2)
		end
		local t = {}
		for i, x in ipairs(v) do
			if type(x) ~= "number" then
				error(full .. ": " .. k .. "[" .. i .. "] must be a number", level + 2)
			end
			t[i] = x
		end
		return t
	end
	local function str(k, default)
		local v = opts[k]
		if v == nil then return default end
		if type(v) ~= "string" then
			error(full .. ": " .. k .. " must be a string", level + 2)
		end
		return v
	end
	local function int(k, default)
		local v = opts[k]
		if v == nil then return default end
		if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v)) then
			error(full .. ": " .. k .. " must be an integer", level + 2)
		end
		return math.tointeger(v)
	end
	for _, k in ipairs(REQUIRED[name] or {}) do
		if opts[k] == nil then
			error(full .. " needs '" .. k .. "' (" .. table.concat(REQUIRED[name], ", ") ..
				" name fields of data.train)", level + 1)
		end
	end
	local emb = int("emb_dim", 8)
	return {
		-- din's MLP: 200-80, the sizes of the paper's experiments (§6).
		-- mmoe's towers: 16, jobs/mmoe_graph.lua's (the experts do the work).
		hidden = list("hidden", name == "din" and { 200, 80 } or
			name == "mmoe" and { 16 } or { 256, 128 }),
		activation = str("activation", "relu"),
		dense_transform = str("dense_transform", "log1p"),
		bottom = list("bottom", { 64, emb }),
		cross_layers = int("cross_layers", 3),
		cross_rank = int("cross_rank", 0),
		query = str("query"), keys = str("keys"),
		att_hidden = list("att_hidden", { 36 }),
		att_activation = str("att_activation", "relu"),
		labels = strs("labels"), weights = nums("weights"),
		experts = int("experts", 4),
		expert_hidden = list("expert_hidden", { 64, 32 }),
	}
end

-- Runs preset `name`'s builder over checked options `o`. Every layer table
-- is tagged with `where` ("file:line" of the job's call, or nil to keep the
-- line in this file), so a problem validate.lua finds in a layer names the
-- job's line.
local function make(name, o, where)
	local layers = {}
	local function L(lname, t)
		if where then common.set_where(t, where) end
		layers[#layers + 1] = { lname, t }
		return lname
	end
	local output, heads = build[name](L, o)
	return { layers = layers, output = output, heads = heads }
end

-- For validate.lua: the graph of a job's preset from its checked model
-- record (`m`: hidden, activation, dense_transform, bottom, cross_layers,
-- cross_rank, din's query, keys, att_hidden, att_activation), the layers
-- tagged with the model's location.
function M.graph(name, m, where)
	local o = {
		hidden = m.hidden or {}, activation = m.activation or "relu",
		dense_transform = m.dense_transform or "log1p", bottom = m.bottom or {},
		cross_layers = m.cross_layers or 0, cross_rank = m.cross_rank or 0,
		query = m.query, keys = m.keys, att_hidden = m.att_hidden or { 36 },
		att_activation = m.att_activation or "relu",
		labels = m.labels, weights = m.weights, experts = m.experts or 4,
		expert_hidden = m.expert_hidden or { 64, 32 },
	}
	return make(name, o, where)
end

-- The names, in the order docs and messages list them.
M.names = { "lr", "dnn", "wdl", "deepfm", "dlrm", "dcnv2", "din", "mmoe" }

-- st.presets: one function per preset, and an error naming the presets for
-- any other name.
M.public = setmetatable({}, {
	__index = function(_, k)
		error(common.unknown("preset", k, M.names, "presets", true), 2)
	end,
	__newindex = function(_, k)
		error("cannot add '" .. tostring(k) .. "' to st.presets", 2)
	end,
	__metatable = false,
})
for _, n in ipairs(M.names) do
	rawset(M.public, n, function(opts)
		return make(n, options(n, opts, 2), core.where(2))
	end)
end

return M
