-- strata.common — what every constructor and the validator share.
--
-- Constructors (st.job, st.data.criteo, st.sync.gba, ...) return a shallow
-- copy of their argument table and remember, in a weak side table, what made
-- it (kind and name) and where it was called from ("file:line"). Keeping the
-- tag outside the table means the user's fields are exactly what they wrote,
-- so the unknown-field check never trips over bookkeeping keys.
--
-- This file runs inside the job sandbox: it reads no undeclared global and
-- defines none. `core` is the private C table the loader passes to stdlib
-- modules only (job-folder modules never get it).
local core = select(3, ...)
local M = {}

local tags = setmetatable({}, { __mode = "k" })

-- Returns the tag {kind=, name=, where=} of a constructor-made table, or nil.
function M.tag(t)
	return tags[t]
end

-- Moves where a constructor-made table says it was made ("file:line"): the
-- preset functions (presets.lua) make their layers and then point them at
-- the job line that asked for the preset, so a message about a layer names
-- a line of the job, not of the stdlib.
function M.set_where(t, where)
	if tags[t] then tags[t].where = where end
end

-- Levenshtein distance, used for "did you mean" suggestions.
local function distance(a, b)
	local la, lb = #a, #b
	local prev, cur = {}, {}
	for j = 0, lb do prev[j] = j end
	for i = 1, la do
		cur[0] = i
		local ca = a:byte(i)
		for j = 1, lb do
			local cost = (ca == b:byte(j)) and 0 or 1
			local v = prev[j - 1] + cost
			if prev[j] + 1 < v then v = prev[j] + 1 end
			if cur[j - 1] + 1 < v then v = cur[j - 1] + 1 end
			cur[j] = v
		end
		prev, cur = cur, prev
	end
	return prev[lb]
end
M.distance = distance

-- Closest candidate to `name`: edit distance <= 2 (1 for names of up to 3
-- characters), or else one is a prefix of the other (at least 3 characters
-- shared). Ties go to the earlier candidate, so
-- callers pass candidates in a fixed order. Returns nil when nothing is close.
function M.suggest(name, candidates)
	if type(name) ~= "string" then return nil end
	-- Two edits on a three-letter name can turn it into anything, so
	-- short names get one.
	local maxd = #name <= 3 and 1 or 2
	local best, bestd = nil, math.huge
	for _, c in ipairs(candidates) do
		local d = distance(name, c)
		if d > maxd then
			d = math.huge
			local short = #name < #c and name or c
			local long = #name < #c and c or name
			if #short >= 3 and long:sub(1, #short) == short then
				d = 3
			end
		end
		if d <= 3 and d < bestd then best, bestd = c, d end
	end
	return best
end

-- " (did you mean 'x'?)" or "".
function M.did_you_mean(name, candidates)
	local s = M.suggest(name, candidates)
	return s and (" (did you mean '" .. s .. "'?)") or ""
end

-- Message for an unknown constructor name. `plural` non-nil appends the list
-- of known names always; data formats list them only when nothing is close.
-- known.listed, when set, is the list to show (st.model's presets, while
-- "graph" is suggested but not listed).
function M.unknown(what, name, known, plural, list_always)
	local s = M.suggest(name, known)
	local msg = "unknown " .. what .. " '" .. tostring(name) .. "'"
	if s then msg = msg .. " (did you mean '" .. s .. "'?)" end
	if list_always or not s then
		msg = msg .. "; known " .. plural .. ": " .. table.concat(known.listed or known, ", ")
	end
	return msg
end

-- Makes a constructor `full` (e.g. "st.sync.gba") that tags its result.
function M.constructor(kind, name, full)
	return function(args)
		if args == nil then args = {} end
		if type(args) ~= "table" then
			error(full .. " expects a table of fields, as in " .. full ..
				"{...}; got " .. type(args), 2)
		end
		local t = {}
		for k, v in pairs(args) do t[k] = v end
		-- Level 2 is the caller of this constructor; core.where returns
		-- nil when that frame is unknown (a tail call, C code).
		tags[t] = { kind = kind, name = name, where = core.where(2) }
		return t
	end
end

-- Builds a namespace table (st.data, st.sync, ...) of constructors whose
-- unknown members raise "unknown <what> 'x' (did you mean ...)" at the
-- line of the job that named them.
function M.namespace(kind, prefix, names, what, plural, list_always)
	local ns = {}
	for _, n in ipairs(names) do
		ns[n] = M.constructor(kind, n, prefix .. "." .. n)
	end
	return setmetatable(ns, {
		__index = function(_, k)
			error(M.unknown(what, k, names, plural, list_always), 2)
		end,
		__newindex = function(_, k)
			error("cannot add '" .. tostring(k) .. "' to " .. prefix, 2)
		end,
		__metatable = false,
	})
end

return M
