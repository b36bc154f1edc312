-- strata.validate — applies --set overrides to the table a job file
-- returned, checks it against schema.lua, and produces the normalized table
-- lang/lang.c converts into st_job_t.
--
-- Every problem is collected (never just the first) as "location: sentence".
-- Locations follow one rule, documented in docs/job-language.md:
--   1. a field under a --set path is located at "--set key.path=value";
--   2. a table made by a constructor is located at the constructor's call;
--   3. a plain table, or a field, is located at the first line, at or after
--      its container's line, where its key appears followed by '=' in the job
--      source (comments stripped);
--   4. otherwise it inherits its container's location; the root is the
--      st.job call (found by scanning when the call was a tail call).
--
-- Invariants: the job table is only modified by apply_sets; the normalized
-- table is plain (no metatables) and fully defaulted.
local common = require "strata.common"
local schema = require "strata.schema"
local presets = require "strata.presets"
local core = select(3, ...)

local M = {}

local V = {}
V.__index = V

local function join(path, key)
	if path == "" then return key end
	return path .. "." .. key
end

local function esc(s)
	return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
end

-- The text the job file and --set strings bring is the job's, so it is read
-- with plain finds and single-class patterns: the sandbox bounds each
-- pattern call by its worst case (lang/pattern.c), and these stay linear on
-- any input, however long its lines.

-- s without its Lua comment ("--" to the end of the line).
local function uncomment(s)
	local c = s:find("--", 1, true)
	return c and s:sub(1, c - 1) or s
end

-- s without leading and trailing white space.
local function trim(s)
	local a = s:find("%S")
	if not a then return "" end
	return s:sub(a, #s - s:reverse():find("%S") + 1)
end

-- Longest --set path that is `path` or one of its prefixes.
function V:setloc(path)
	local p = path
	while p do
		local l = self.sets[p]
		if l then return l end
		p = p:match("^(.*)%.[^.]*$")
	end
	return nil
end

-- First line >= from whose text (comments removed) has `key =` (not `==`).
function V:scan(key, from)
	if not from or type(key) ~= "string" or not key:match("^[%a_][%w_]*$") then
		return nil
	end
	local pat = "%f[%w_]" .. esc(key) .. "%s*=()"
	for i = from, #self.lines do
		local s = uncomment(self.lines[i])
		local init = 1
		while true do
			local a, e = s:find(pat, init)
			if not a then break end
			local after = s:match(pat, init)
			if s:sub(after, after) ~= "=" then return i end
			init = e + 1
		end
	end
	return nil
end

function V:child(node, key, tbl)
	local n = { path = join(node.path, key) }
	local sl = self:setloc(n.path)
	if sl then
		n.loc = sl
		return n
	end
	local tg = type(tbl) == "table" and common.tag(tbl)
	if tg and tg.where then
		n.loc = tg.where
		local f, l = tg.where:match("^(.*):(%d+)$")
		if f == self.file then n.line = tonumber(l) end
		return n
	end
	local l = self:scan(key, node.line)
	if l then
		n.loc, n.line = self.file .. ":" .. l, l
	else
		n.loc, n.line = node.loc, node.line
	end
	return n
end

-- Location of field `key` of the table at `node`.
function V:floc(node, key)
	local sl = self:setloc(join(node.path, tostring(key)))
	if sl then return sl end
	local l = self:scan(key, node.line)
	if l then return self.file .. ":" .. l end
	return node.loc
end

function V:err(loc, fmt, ...)
	self.errs[#self.errs + 1] = loc .. ": " .. string.format(fmt, ...)
end

function V:ferr(node, key, fmt, ...)
	self:err(self:floc(node, key), fmt, ...)
end

-- A value for a message: numbers as written (NaN always as "nan", whatever
-- its sign bit), anything else as its type.
local function show(v)
	if type(v) == "number" then
		if v ~= v then return "nan" end
		return tostring(v)
	end
	return type(v)
end

local function quoted_list(list)
	local q = {}
	for i, s in ipairs(list) do q[i] = "'" .. s .. "'" end
	if #q <= 1 then return q[1] or "" end
	return table.concat(q, ", ", 1, #q - 1) .. " or " .. q[#q]
end

-- Range checks shared by int and num; returns v or nil after an error.
function V:range(node, key, path, v, f)
	if f.min and v < f.min then
		return self:ferr(node, key, "%s must be >= %s, got %s", path, f.min, v)
	end
	if f.gt and v <= f.gt then
		return self:ferr(node, key, "%s must be > %s, got %s", path, f.gt, v)
	end
	if f.max and v > f.max then
		return self:ferr(node, key, "%s must be <= %s, got %s", path, f.max, v)
	end
	if f.lt and v >= f.lt then
		return self:ferr(node, key, "%s must be < %s, got %s", path, f.lt, v)
	end
	return v
end

local SIZE_UNITS = {
	[""] = 1, B = 1,
	K = 1024, M = 1024 ^ 2, G = 1024 ^ 3, T = 1024 ^ 4,
	KIB = 1024, MIB = 1024 ^ 2, GIB = 1024 ^ 3, TIB = 1024 ^ 4,
	KB = 1e3, MB = 1e6, GB = 1e9, TB = 1e12,
}

local check = {}

function check.int(self, node, key, path, v, f)
	if math.type(v) ~= "integer" then
		local i = type(v) == "number" and math.tointeger(v)
		if not i then
			-- A whole float beyond 64 bits (2^63, 1e20) is out of range,
			-- not "not an integer"; inf and NaN are neither.
			if type(v) == "number" and v == math.floor(v) and
					v > -math.huge and v < math.huge then
				return self:range(node, key, path, v, {
					min = f.min or math.mininteger, gt = f.gt,
					max = f.max or math.maxinteger, lt = f.lt })
			end
			return self:ferr(node, key, "%s must be an integer, got %s", path, show(v))
		end
		v = i
	end
	return self:range(node, key, path, v, f)
end

function check.num(self, node, key, path, v, f)
	if type(v) ~= "number" then
		return self:ferr(node, key, "%s must be a number, got %s", path, show(v))
	end
	if v ~= v or v == math.huge or v == -math.huge then
		return self:ferr(node, key, "%s must be a finite number, got %s", path, show(v))
	end
	return self:range(node, key, path, v, f)
end

function check.str(self, node, key, path, v, f)
	if type(v) ~= "string" then
		return self:ferr(node, key, "%s must be a string, got %s", path, show(v))
	end
	if f.nonempty and v == "" then
		return self:ferr(node, key, "%s must not be empty", path)
	end
	if f.char and #v ~= 1 then
		return self:ferr(node, key, "%s must be one character, got '%s'", path, v)
	end
	if f.enum then
		for _, e in ipairs(f.enum) do
			if e == v then return v end
		end
		return self:ferr(node, key, "%s must be %s, got '%s'%s", path,
			quoted_list(f.enum), v, common.did_you_mean(v, f.enum))
	end
	return v
end

function check.bool(self, node, key, path, v)
	if type(v) ~= "boolean" then
		return self:ferr(node, key, "%s must be true or false, got %s", path, show(v))
	end
	return v
end

function check.size(self, node, key, path, v, f)
	local lim = { min = 0, max = f.max }
	if type(v) == "number" then
		return check.int(self, node, key, path, v, lim)
	end
	if type(v) == "string" and #v <= 64 then
		local num, unit = v:match("^%s*(%d+%.?%d*)%s*(%a*)%s*$")
		local mul = unit and SIZE_UNITS[unit:upper()]
		if num and mul then
			local x = math.floor(tonumber(num) * mul)
			local n = math.tointeger(x)
			if n then return self:range(node, key, path, n, lim) end
			return self:ferr(node, key, "%s must be <= %s bytes, got '%s'", path,
				f.max or math.maxinteger, v)
		end
	end
	return self:ferr(node, key, "%s must be a size like \"2GiB\", \"512MiB\", " ..
		"\"10GB\" or a number of bytes, got %s", path,
		type(v) == "string" and ("'" .. (#v <= 64 and v or v:sub(1, 40) .. "...") .. "'")
		or show(v))
end

function check.paths(self, node, key, path, v)
	if type(v) == "string" and v ~= "" then return { v } end
	if type(v) == "table" and not common.tag(v) and #v >= 1 then
		local out = {}
		for i, p in ipairs(v) do
			if type(p) ~= "string" or p == "" then
				return self:ferr(node, key, "%s[%d] must be a non-empty string, got %s",
					path, i, show(p))
			end
			out[i] = p
		end
		return out
	end
	return self:ferr(node, key, "%s must be a glob string or a list of glob " ..
		"strings, got %s", path, type(v) == "string" and "an empty string" or show(v))
end

-- A list (of `what`, for the message) of at most f.maxlen entries, each
-- checked by elem(i, x) (nil: refused, already said); the checked copy.
local function list_of(self, node, key, path, v, f, what, elem)
	if type(v) ~= "table" or common.tag(v) then
		return self:ferr(node, key, "%s must be a list of %s, got %s", path, what, show(v))
	end
	if f.maxlen and #v > f.maxlen then
		return self:ferr(node, key, "%s has %d entries, at most %d allowed",
			path, #v, f.maxlen)
	end
	local out = {}
	for i = 1, #v do
		local x = elem(i, v[i])
		if x == nil then return nil end
		out[i] = x
	end
	return out
end

function check.ints(self, node, key, path, v, f)
	return list_of(self, node, key, path, v, f, "integers", function(i, x)
		return check.int(self, node, key, path .. "[" .. i .. "]", x, f)
	end)
end

-- A list of numbers (mmoe's loss weights), each checked as f's num.
function check.nums(self, node, key, path, v, f)
	return list_of(self, node, key, path, v, f, "numbers", function(i, x)
		return check.num(self, node, key, path .. "[" .. i .. "]", x, f)
	end)
end

-- A non-empty list of non-empty strings (mmoe's labels).
function check.strs(self, node, key, path, v, f)
	if type(v) ~= "table" or common.tag(v) or #v == 0 then
		return self:ferr(node, key, "%s must be a non-empty list of names, got %s", path,
			show(v))
	end
	return list_of(self, node, key, path, v, f, "names", function(i, x)
		if type(x) ~= "string" or x == "" then
			return self:ferr(node, key, "%s[%d] must be a name (a non-empty string), " ..
				"got %s", path, i, show(x))
		end
		return x
	end)
end

-- One integer (every slot) or a list of integers (one per slot); the
-- caller checks the list's length against the data's slots.
function check.dims(self, node, key, path, v, f)
	if type(v) == "number" then return check.int(self, node, key, path, v, f) end
	if type(v) ~= "table" or common.tag(v) or #v == 0 then
		return self:ferr(node, key, "%s must be an integer or a non-empty list of " ..
			"integers (one per slot), got %s", path, show(v))
	end
	return check.ints(self, node, key, path, v, f)
end

local function copy(v)
	if type(v) ~= "table" then return v end
	local t = {}
	for k, x in pairs(v) do t[k] = x end
	return t
end

-- Checks the fields of `tbl` (at `node`) against `fields`. `extra` lists
-- keys allowed besides them (e.g. "format" in a plain source table).
-- Returns the normalized record (defaults filled; sections left out) and a
-- set of the keys whose value was rejected (they hold the default).
function V:record(node, tbl, fields, extra)
	local known, names = {}, {}
	for _, f in ipairs(fields) do
		known[f[1]] = f
		names[#names + 1] = f[1]
	end
	for _, k in ipairs(extra or {}) do
		known[k] = true
		names[#names + 1] = k
	end
	local where = node.path == "" and "job" or node.path
	local unknown = {}
	for k in pairs(tbl) do
		if not known[k] then unknown[#unknown + 1] = k end
	end
	table.sort(unknown, function(a, b) return tostring(a) < tostring(b) end)
	for _, k in ipairs(unknown) do
		if type(k) == "string" then
			self:ferr(node, k, "unknown field '%s' in %s%s", k, where,
				common.did_you_mean(k, names))
		else
			self:err(node.loc, "unexpected list entry [%s] in %s (fields are name = value)",
				tostring(k), where)
		end
	end
	local out, bad = {}, {}
	for _, f in ipairs(fields) do
		local k, ty = f[1], f[2]
		local v = tbl[k]
		if ty == "section" then
			-- checked by the caller
		elseif v == nil then
			if f.required then
				self:err(node.loc, "missing required field '%s'", join(node.path, k))
			end
			out[k] = copy(f.default)
		else
			local r = check[ty](self, node, k, join(node.path, k), v, f)
			if r == nil then
				r = copy(f.default)
				bad[k] = true
			end
			out[k] = r
		end
	end
	return out, bad
end

-- Resolves what made table/string `v` at field `key` of `parent`:
-- a constructor of `kind`, a plain table with `namefield`, or (when
-- `shorthand`) a bare name string; a plain table without `namefield` is
-- `default_name` when given. Returns node, name, table, extra-keys.
function V:kinded(parent, key, v, kind, namefield, known, what, plural, list_always,
		shorthand, default_name)
	local path = join(parent.path, key)
	if shorthand and type(v) == "string" then
		local node = { path = path, loc = self:floc(parent, key) }
		for _, n in ipairs(known) do
			if n == v then return node, v, {}, {} end
		end
		self:err(node.loc, "%s", common.unknown(what, v, known, plural, list_always))
		return nil
	end
	local tg = type(v) == "table" and common.tag(v)
	if type(v) ~= "table" or (tg and tg.kind ~= kind) then
		local got = tg and ("st." .. (tg.kind == tg.name and tg.kind or
			(tg.kind .. "." .. tg.name)) .. "{...}") or show(v)
		self:ferr(parent, key, "%s must be made by st.%s.<name>{...}, got %s",
			path, kind, got)
		return nil
	end
	local node = self:child(parent, key, v)
	if tg then return node, tg.name, v, {} end
	local name = v[namefield]
	if name == nil and default_name then
		return node, default_name, v, { namefield }
	end
	if name == nil then
		self:err(node.loc, "missing required field '%s'", join(path, namefield))
		return nil
	end
	if type(name) ~= "string" then
		self:ferr(node, namefield, "%s must be a string, got %s",
			join(path, namefield), show(name))
		return nil
	end
	for _, n in ipairs(known) do
		if n == name then return node, name, v, { namefield } end
	end
	self:err(self:floc(node, namefield), "%s",
		common.unknown(what, name, known, plural, list_always))
	return nil
end

-- Normalizes a glob or directory for the "generate makes it" prefix test.
local function clean(p)
	p = p:gsub("^%./", "")
	return p
end

function V:columns(node, v, src)
	local kinds = {}
	for i, k in ipairs(schema.col_kinds) do kinds[k] = i - 1 end
	local out = {}
	if type(v.columns) ~= "table" or common.tag(v.columns) or #v.columns == 0 then
		self:ferr(node, "columns", "%s.columns must be a non-empty list of " ..
			"'label', 'dense', 'cat' or 'ignore', got %s", node.path, show(v.columns))
		return nil
	end
	local opts = {}
	local lnames = {}    -- column index -> name of a named label column
	for i, c in ipairs(v.columns) do
		if type(c) == "table" and not common.tag(c) and c[1] == "label" then
			-- { "label", name = "click" }: one of several labels, named for heads
			local ok = type(c.name) == "string" and c.name ~= ""
			for k in pairs(c) do
				if k ~= 1 and k ~= "name" then ok = false end
			end
			if not ok then
				self:ferr(node, "columns", "%s.columns[%d]: a label column table is " ..
					"{ \"label\", name = \"click\" } (a name and nothing else), got %s",
					node.path, i, show(c))
				return nil
			end
			lnames[i] = c.name
			c = "label"
		elseif type(c) == "table" and not common.tag(c) and c[1] == "cat" then
			opts[i] = self:cat_field(node, node.path .. ".columns[" .. i .. "]", c, nil)
			if opts[i] then opts[i].name = opts[i].name or ("columns[" .. i .. "]") end
			c = "cat"
		end
		if kinds[c] == nil then
			self:ferr(node, "columns", "%s.columns[%d] must be 'label', 'dense', " ..
				"'cat' or 'ignore', got %s%s", node.path, i,
				type(c) == "string" and ("'" .. c .. "'") or show(c),
				common.did_you_mean(c, schema.col_kinds))
			return nil
		end
		out[i] = kinds[c]
	end
	opts.labels = lnames
	return out, opts
end

-- First line at or after `from` that holds the string literal s ("s" or
-- 's'), for locating one entry of a list of columns.
function V:strline(s, from)
	if not from then return nil end
	for i = from, #self.lines do
		local l = uncomment(self.lines[i])
		if l:find('"' .. s .. '"', 1, true) or l:find("'" .. s .. "'", 1, true) then
			return i
		end
	end
	return nil
end

-- One categorical column declared as a table (schema.cat_field): `c` is
-- { "name", list = ..., ... } in schema.cat (name given) or
-- { "cat", list = ..., ... } in columns (name nil). Returns the checked
-- options (list, max_len, keep, pooling, missing; absent ones nil) or nil
-- after reporting. Errors are located at the entry's line.
function V:cat_field(parent, path, c, name)
	local label = c.name or (name and c[1]) or c[1]
	local sl = self:setloc((path:gsub("%[%d+%]$", "")))
	local line = not sl and self:strline(label, parent.line) or nil
	local fnode = { path = path, line = line or (not sl and parent.line) or nil,
		loc = sl or (line and (self.file .. ":" .. line)) or parent.loc }
	local t = {}
	for k, v in pairs(c) do if k ~= 1 then t[k] = v end end
	local f, bad = self:record(fnode, t, schema.cat_field)
	if name and c.name ~= nil and c[1] ~= nil then
		self:err(fnode.loc, "%s gives the column name twice ([1] and name); give one", path)
		return nil
	end
	local ok = next(bad) == nil
	f.name = f.name or (name and c[1]) or nil
	local where = "'" .. tostring(label) .. "'"
	if f.list == nil then
		for _, k in ipairs({ "max_len", "keep" }) do
			if f[k] ~= nil then
				self:ferr(fnode, k, "%s: %s needs a list field (add list = '^' or " ..
					"another separator)", path .. " " .. where, k)
				ok = false
			end
		end
	elseif f.list == self.cur_sep then
		self:ferr(fnode, "list", "%s: the list separator '%s' is the field separator " ..
			"of the file (sep); pick another, e.g. '^' or '|'", path .. " " .. where, f.list)
		ok = false
	elseif f.list == '"' or f.list == "\n" or f.list == "\r" then
		self:ferr(fnode, "list", "%s: '%s' cannot separate list items", path .. " " ..
			where, f.list)
		ok = false
	end
	f.line = fnode.loc
	return ok and f or nil
end

-- schema = {label=, dense={...}, cat={...}, ignore={...}}: names resolved
-- against the header line of the first file the source matches.
function V:schema_columns(node, v, src)
	local sn = self:child(node, "schema", v.schema)
	if type(v.schema) ~= "table" or common.tag(v.schema) then
		self:ferr(node, "schema", "%s.schema must be a table {label=, dense={...}, " ..
			"cat={...}, ignore={...}}, got %s", node.path, show(v.schema))
		return nil
	end
	if src.header == false then
		self:ferr(node, "schema", "%s.schema names columns, so %s.header must be true",
			node.path, node.path)
		return nil
	end
	local s = self:record(sn, v.schema, schema.csv_schema)
	local want = {}      -- column name -> kind
	local order = {}
	local opts = {}      -- column name -> cat_field options
	local function add(name, kind, where)
		if type(name) ~= "string" or name == "" then
			self:err(sn.loc, "%s must name columns with strings, got %s", where, show(name))
			return
		end
		if want[name] then
			self:err(sn.loc, "%s.schema names column '%s' twice", node.path, name)
			return
		end
		want[name] = kind
		order[#order + 1] = name
	end
	local lnames = {}   -- label column names, in the order listed
	if type(v.schema.label) == "table" and not common.tag(v.schema.label) then
		for _, name in ipairs(v.schema.label) do
			add(name, 1, sn.path .. ".label")
			lnames[name] = true
		end
	elseif v.schema.label ~= nil then
		add(v.schema.label, 1, sn.path .. ".label")
		if type(v.schema.label) == "string" then lnames[v.schema.label] = true end
	else
		self:err(sn.loc, "%s.schema needs 'label' (a column name, or a list of them " ..
			"for several labels)", node.path)
	end
	for _, k in ipairs({ "dense", "cat", "ignore" }) do
		local list = v.schema[k]
		if list ~= nil then
			if type(list) == "string" then list = { list } end
			if type(list) ~= "table" then
				self:ferr(sn, k, "%s.%s must be a list of column names, got %s",
					sn.path, k, show(list))
			else
				for i, name in ipairs(list) do
					if k == "cat" and type(name) == "table" and not common.tag(name) then
						local o = self:cat_field(sn, sn.path .. ".cat[" .. i .. "]", name, true)
						name = name.name or name[1]
						if o and type(name) == "string" then opts[name] = o end
					end
					add(name, ({ dense = 2, cat = 3, ignore = 0 })[k], sn.path .. "." .. k)
				end
			end
		end
	end
	local first
	for _, g in ipairs(src.path or {}) do
		local files = core.glob(g)
		if files[1] then first = files[1]; break end
	end
	if not first then
		self:err(sn.loc, "%s.schema: no file matches %s.path, so the header " ..
			"cannot be read (use a positional 'columns' list instead)",
			node.path, node.path)
		return nil
	end
	local header, msg = core.read_header(first, src.sep or ",")
	if not header then
		self:err(sn.loc, "%s.schema: cannot read the header of '%s': %s",
			node.path, first, msg)
		return nil
	end
	local out, seen, bycol = {}, {}, {}
	for i, name in ipairs(header) do
		local kind = want[name]
		if kind == nil then
			self:err(sn.loc, "%s.schema does not say what column '%s' of '%s' is " ..
				"(list it under ignore)", node.path, name, first)
			return nil
		end
		out[i] = kind
		seen[name] = true
		if opts[name] then bycol[i] = opts[name] end
	end
	-- label columns are named by their header names (a head's `label`)
	bycol.labels = {}
	for i, name in ipairs(header) do
		if lnames[name] then bycol.labels[i] = name end
	end
	-- every column's name, so that a plain cat field has one too (an
	-- attention layer names its fields)
	bycol.names = header
	for _, name in ipairs(order) do
		if not seen[name] then
			self:err(sn.loc, "%s.schema names column '%s', which is not in the " ..
				"header of '%s'%s", node.path, name, first,
				common.did_you_mean(name, header))
			return nil
		end
	end
	return out, bycol
end

function V:source(dnode, key, v, gen)
	local node, fmt, tbl, extra = self:kinded(dnode, key, v, "data", "format",
		schema.formats, "data format", "formats", false, false)
	if not node then return nil end
	local s = self:record(node, tbl, schema.source[fmt], extra)
	local out = {
		format = fmt, globs = s.path or {}, generated = false,
		on_bad = s.on_bad_record == "fail" and 1 or 0,
		max_report = s.max_report, limit = s.limit,
		max_bad_fraction = s.max_bad_fraction,
		sep = ",", header = false, n_dense = 0, n_slots = 0,
	}
	if fmt == "criteo" then
		out.n_dense, out.n_slots = 13, 26
	elseif fmt == "libsvm" then
		out.n_dense, out.n_slots = 0, s.slots
		local k, names = s.labels or 1, tbl.label_names
		if names ~= nil then
			local ok = type(names) == "table" and not common.tag(names) and #names == k
			for _, nm in ipairs(ok and names or {}) do
				ok = ok and type(nm) == "string" and nm ~= ""
			end
			if not ok then
				self:ferr(node, "label_names", "%s.label_names must list %d label name%s " ..
					"(one per label token), got %s", node.path, k, k == 1 and "" or "s",
					show(names))
			else
				out.labels = names
			end
		elseif k > 1 then
			out.labels = {}
			for i = 1, k do out.labels[i] = "label" .. i end
		end
	else
		out.sep, out.header = s.sep, s.header
		local cols, opts
		self.cur_sep = s.sep
		if tbl.columns ~= nil and tbl.schema ~= nil then
			self:err(node.loc, "%s has both 'columns' and 'schema'; give one", node.path)
		elseif tbl.columns ~= nil then
			cols, opts = self:columns(node, tbl, s)
		elseif tbl.schema ~= nil then
			cols, opts = self:schema_columns(node, tbl, s)
		else
			self:err(node.loc, "%s needs 'columns' (a list of 'label', 'dense', " ..
				"'cat', 'ignore') or 'schema' (column names by kind)", node.path)
		end
		if cols then
			local n = { 0, 0, 0, 0 }
			for _, c in ipairs(cols) do n[c + 1] = n[c + 1] + 1 end
			if n[2] < 1 or n[2] > schema.limits.labels then
				self:err(self:floc(node, tbl.columns and "columns" or "schema"),
					"%s must have 1 to %d label columns, got %d", node.path,
					schema.limits.labels, n[2])
			end
			-- Label names (heads name them): a named column's name, else
			-- "label" for the one label; several need every one named.
			local ln, named = {}, false
			local given = opts and opts.labels or {}
			for i, c in ipairs(cols) do
				if c == 1 then
					ln[#ln + 1] = given[i] or false
					named = named or given[i] ~= nil
				end
			end
			if n[2] > 1 then
				local seen, okn = {}, true
				for k, nm in ipairs(ln) do
					if not nm then
						self:err(self:floc(node, tbl.columns and "columns" or "schema"),
							"%s has %d label columns; name each one " ..
							"({ \"label\", name = \"click\" }), label %d has no name",
							node.path, n[2], k)
						okn = false
						break
					elseif seen[nm] then
						self:err(self:floc(node, tbl.columns and "columns" or "schema"),
							"%s names two label columns '%s'", node.path, nm)
						okn = false
						break
					end
					seen[nm] = true
				end
				-- false: reported here, so the heads and eval checks say nothing more
				out.labels = okn and ln or false
			elseif named then
				out.labels = ln
			end
			if n[4] > schema.limits.slots then
				self:err(self:floc(node, tbl.columns and "columns" or "schema"),
					"%s has %d cat columns, at most %d allowed", node.path, n[4],
					schema.limits.slots)
			end
			out.cols, out.n_dense, out.n_slots = cols, n[3], n[4]
			-- One entry per slot (cat columns in order), every option
			-- resolved: what lang.c turns into st_slot_opt_t.
			local slots = {}
			for i, c in ipairs(cols) do
				if c == 3 then
					local o = opts and opts[i] or {}
					slots[#slots + 1] = {
						list = o.list or "", max_len = o.max_len or 0,
						keep_last = o.keep == "last", pooling = o.pooling or "",
						missing = (o.missing or s.missing) == "key" and 1 or 0,
						loc = o.line, name = o.name or (opts and opts.names and opts.names[i]),
					}
				end
			end
			out.slot_opts = slots
		end
	end
	if fmt == "criteo" or fmt == "csv" then
		out.missing = s.missing == "key" and 1 or 0
		out.dense_indicator = s.dense_missing == "indicator"
		if out.dense_indicator then out.n_dense = 2 * out.n_dense end
	end
	-- Sources under generate.dir are made by `strata run`, so they need not
	-- exist yet. "Under" is by whole path components: dir "data/g" does not
	-- make "data/gx/train.tsv".
	local gdir = gen and gen.dir and clean(gen.dir):gsub("(.)/+$", "%1")
	for _, g in ipairs(out.globs) do
		local cg = clean(g)
		local made = gdir and (cg == gdir or cg:sub(1, #gdir + 1) == gdir .. "/" or
			(gdir == "/" and cg:sub(1, 1) == "/"))
		if made then
			out.generated = true
		elseif self.check_paths and #core.glob(g) == 0 then
			self:ferr(node, "path", "%s.path '%s' matches no file", node.path, g)
		end
	end
	return out
end

-- Resolves one optimizer table (st.optim.<name>{...}, a plain table or a
-- bare name) at field `key` of the model node. Returns its name and record,
-- or nil after reporting.
function V:optim(node, key, o)
	local onode, oname, otbl, oextra = self:kinded(node, key, o, "optim",
		"type", schema.optimizers, "optimizer", "optimizers", true, true, "adagrad")
	if not onode then return nil end
	local p = self:record(onode, otbl, schema.optim[oname], oextra)
	if key ~= "optimizer" and otbl.lr_dense ~= nil then
		self:ferr(onode, "lr_dense", "%s.lr_dense is only for model.optimizer; " ..
			"set %s.lr instead", onode.path,
			key == "dense_optimizer" and onode.path or "model.dense_optimizer")
	end
	return oname, p
end

-- The flat settings of one parameter group (what st_optim_cfg_t holds).
-- Fields the optimizer does not have are 0.
local function optim_cfg(name, p, lr, model_l2, init_accum)
	return {
		name = name, lr = lr, l2 = p.l2 or model_l2,
		rowwise = p.rowwise or false,
		eps = p.eps or 0, beta1 = p.beta1 or 0, beta2 = p.beta2 or 0,
		init_accum = name == "adagrad" and (p.init_accum or init_accum) or 0,
		l1 = p.l1 or 0, beta = p.beta or 0,
	}
end

-- A layer graph (st.model.graph): `layers` is a list of { name,
-- st.layer.<kind>{ inputs..., fields } } in an order where every input is
-- above its reader, `output` names the 1-wide logit. Walks the list once,
-- computes each layer's width (docs/models.md's table; needs the train
-- data's slots, else widths go unchecked) and reports at the layer's
-- constructor call, naming it. Fills out.nodes (kind, name, 0-based input
-- indices, sizes, a, b: what lang.c copies into st_model_node_t) and
-- out.output (0-based).
local LAYER_ARGS = {   -- the ints a and b of each kind (lang/job.h)
	dense = function(f) return f.transform == "log1p" and 1 or 0, 0 end,
	mlp = function(f)
		return f.activation == "sigmoid" and 2 or f.activation == "none" and 0 or 1, 0
	end,
	linear = function(f) return f.size, 0 end,
	fm = function(f, fields) return fields, 0 end,
	dot = function(f, fields) return fields, 0 end,
	cross = function(f) return f.layers, f.rank end,
}

-- st.layer.attention's two fields as 1-based slots of the train data
-- (either nil after reporting through lerr): the query a single-valued
-- named cat field, the keys a named list field with pooling = "none".
local function attention_slots(lerr, f, train)
	local opts = train.slot_opts
	if not opts then
		lerr("attention reads fields by name, and data.train (%s) has no " ..
			"named fields; use st.data.csv with named cat fields", train.format)
		return nil
	end
	if not f.query or not f.keys then return nil end
	local names, by = {}, {}
	for i, o in ipairs(opts) do
		if o.name then
			names[#names + 1] = o.name
			by[o.name] = i
		end
	end
	local function find(role, nm)
		local i = by[nm]
		if not i then
			lerr("%s '%s' is no named cat field of data.train%s", role, nm,
				common.did_you_mean(nm, names))
		end
		return i
	end
	local q, k = find("query", f.query), find("keys", f.keys)
	if k and (opts[k].list == "" or opts[k].pooling ~= "none") then
		lerr("keys '%s' must be a list field with pooling = 'none' (the sequence " ..
			"that attention reads key by key)", f.keys)
		k = nil
	end
	if q and opts[q].list ~= "" then
		lerr("query '%s' is a list field; the query is one item (a single-valued " ..
			"cat field, e.g. the candidate's id)", f.query)
		q = nil
	end
	return q, k
end

function V:graph(node, tbl, out, train)
	local layers = tbl.layers
	local lnode = layers ~= nil and self:section(node, "layers", layers)
	if layers == nil then
		return self:err(node.loc, "missing required field 'model.layers' (a list of " ..
			"{ name, st.layer.<kind>{...} })")
	end
	if not lnode then return end
	local nerr = #self.errs
	local dims
	if train then
		dims = {}
		for s = 1, train.n_slots do
			dims[s] = out.slot_dims and out.slot_dims[s] or out.emb_dim
		end
	end
	local index, width, nodes, read, seen = {}, {}, {}, {}, {}
	local later = {}
	for i, e in ipairs(layers) do
		if type(e) == "table" and type(e[1]) == "string" then later[e[1]] = i end
	end
	for i, e in ipairs(layers) do
		local where = "model.layers[" .. i .. "]"
		local lt = type(e) == "table" and common.tag(e[2])
		local loc = (lt and lt.where) or lnode.loc
		if type(e) ~= "table" or common.tag(e) or type(e[1]) ~= "string" or
				not lt or lt.kind ~= "layer" or e[3] ~= nil then
			self:err(loc, "%s must be { \"name\", st.layer.<kind>{...} }", where)
			goto continue
		end
		local name, l, kind = e[1], e[2], lt.name
		local function lerr(fmt, ...)
			self:err(loc, "layer '%s': " .. fmt, name, ...)
		end
		-- 16 characters: the tensor names it prefixes ("<name>.15.v.weight")
		-- fit the graph's 32.
		if not name:match("^[%a_][%w_]*$") or #name > 16 then
			lerr("the name must be a Lua identifier of at most 16 characters")
			goto continue
		end
		if seen[name] then
			lerr("%s is named '%s' already (%s); give each layer its own name",
				where, name, seen[name])
			goto continue
		end
		seen[name] = loc
		local spec = schema.layer[kind]
		local lrec = { path = "model.layers." .. name, loc = loc,
			line = tonumber(loc:match(":(%d+)$")) }
		local fields = {}
		for k, v in pairs(l) do
			if math.type(k) ~= "integer" then fields[k] = v end
		end
		local f = self:record(lrec, fields, spec)
		if kind == "mlp" and f.sizes and #f.sizes == 0 then
			lerr("mlp sizes must list at least one layer size")
		end
		if kind == "mmoe" then
			if f.experts and f.experts < 1 then
				lerr("mmoe: experts must be >= 1, got %d", f.experts)
			end
			if f.tasks and f.tasks < 1 then
				lerr("mmoe: tasks must be >= 1, got %d", f.tasks)
			end
			if f.expert_hidden and #f.expert_hidden == 0 then
				lerr("mmoe: expert_hidden must list at least one layer size")
			end
			-- The longest tensor names (ops/nn/graph.h) must fit 31 characters.
			if f.experts and f.tasks and f.expert_hidden and f.experts >= 1 and
					f.tasks >= 1 and #f.expert_hidden >= 1 then
				for _, t in ipairs {
					("%s.expert.%d.%d.weight"):format(name, f.experts - 1,
						#f.expert_hidden - 1),
					("%s.gate.%d.weight"):format(name, f.tasks - 1) } do
					if #t > 31 then
						lerr("mmoe: its tensor '%s' would be %d characters, at most " ..
							"31 fit; give the layer a shorter name", t, #t)
						break
					end
				end
			end
		end
		-- Inputs: the list part, each a layer above this one.
		local ins, iw, ok = {}, {}, true
		for k = 1, #l do
			local x = l[k]
			if type(x) ~= "string" then
				lerr("input %d must be a layer's name, got %s", k, show(x))
				ok = false
			elseif index[x] == nil then
				if later[x] and later[x] >= i then
					lerr("input '%s' is %s; a layer reads only the layers above it",
						x, x == name and "the layer itself" or "defined below it")
				else
					lerr("input '%s' is no layer%s", x, common.did_you_mean(x,
						(function() local t = {} for n in pairs(index) do
							t[#t + 1] = n end table.sort(t) return t end)()))
				end
				ok = false
			else
				ins[#ins + 1] = index[x] - 1
				iw[#iw + 1] = width[index[x]]
				read[x] = true
			end
		end
		local want = spec.inputs
		local min = type(want) == "table" and want[1] or want
		if #l < min or (type(want) == "number" and #l > want) then
			lerr("%s takes %s input%s, got %d", kind, type(want) == "table" and
				("at least " .. min) or tostring(want), min == 1 and "" or "s", #l)
			ok = false
		end
		-- Width (nil when unknown: no train data, or a bad input).
		local w, fields_n
		local known = ok and dims ~= nil
		for _, x in ipairs(iw) do if x == nil then known = false end end
		local aq, ak   -- attention: its slots (1-based)
		local soff, sw -- slice: its columns, from the mmoe it reads
		if kind == "slice" and ok and f.task then
			local src = nodes[index[l[1]]]
			if not src or src.kind ~= "mmoe" then
				lerr("slice input '%s' is not an mmoe (it is %s); slice reads one " ..
					"task's columns of an mmoe", l[1], src and src.kind or "no layer")
			elseif not src.b or #src.sizes == 0 then
				-- the mmoe itself was refused (said at its line): no width to take
				ok = false
			elseif f.task < 1 or f.task > src.b then
				lerr("slice: task %d of an mmoe with %d task%s ('%s'); tasks are " ..
					"numbered from 1", f.task, src.b, src.b == 1 and "" or "s", l[1])
			else
				local h = src.sizes[#src.sizes]
				soff, sw = (f.task - 1) * h, h
			end
		end
		if kind == "embed" then
			if dims then
				-- A sequence (pooling "none") is attention's, not embed's.
				w = 0
				for s, d in ipairs(dims) do
					local o = train.slot_opts and train.slot_opts[s]
					if not (o and o.pooling == "none") then w = w + d end
				end
			end
		elseif kind == "attention" then
			if train then
				aq, ak = attention_slots(lerr, f, train)
				if aq and ak and dims[aq] ~= dims[ak] then
					lerr("query '%s' has emb_dim %d but keys '%s' have %d; attention " ..
						"compares them coordinate by coordinate, so give both the " ..
						"same dimension", f.query, dims[aq], f.keys, dims[ak])
				elseif aq and ak then
					w = dims[ak]
				end
			end
		elseif kind == "dense" then
			w = train and train.n_dense
		elseif kind == "wide" then
			w = 1
		elseif not known then
			w = nil
		elseif kind == "concat" then
			w = 0
			for _, x in ipairs(iw) do w = w + x end
		elseif kind == "mlp" then
			w = f.sizes and f.sizes[#f.sizes]
		elseif kind == "mmoe" then
			local hs = f.expert_hidden
			w = hs and #hs > 0 and f.tasks and f.tasks >= 1 and f.tasks * hs[#hs] or nil
		elseif kind == "slice" then
			w = sw
		elseif kind == "linear" then
			w = f.size
		elseif kind == "add" then
			w = iw[1]
			for k, x in ipairs(iw) do
				if x ~= w then
					lerr("add input '%s' is %d wide but '%s' is %d; every input " ..
						"needs the same width", l[k], x, l[1], w)
					w = nil
					break
				end
			end
		elseif kind == "fm" or kind == "dot" then
			-- fields default: the width over the common slot dim.
			fields_n = f.fields
			if not fields_n then
				local d = dims[1]
				for _, x in ipairs(dims) do if x ~= d then d = nil break end end
				if d and iw[1] % d == 0 then fields_n = iw[1] // d end
			end
			if not fields_n or iw[1] % fields_n ~= 0 or
					(kind == "dot" and fields_n < 2) then
				lerr("%s input '%s' is %d wide, not %s fields of equal width%s",
					kind, l[1], iw[1], fields_n and tostring(fields_n) or "whole",
					f.fields and "" or "; set fields = <count>")
				fields_n = nil
			else
				w = kind == "fm" and 1 or fields_n * (fields_n - 1) // 2
			end
		elseif kind == "cross" then
			w = iw[1]
			if f.rank > 0 and f.rank >= w then
				lerr("cross input '%s' is %d wide; rank %d must be below it " ..
					"(0 means full rank)", l[1], w, f.rank)
			end
		end
		if (kind == "fm" or kind == "dot") and not fields_n then
			fields_n = f.fields or 0
		end
		width[i] = w
		index[name] = i
		local a, b, c = 0, 0, 0
		if LAYER_ARGS[kind] then a, b = LAYER_ARGS[kind](f, fields_n) end
		local sizes = kind == "mlp" and (f.sizes or {}) or {}
		if kind == "attention" then
			-- 0-based slots; c = the activation as mlp's a
			a, b = (aq or 1) - 1, (ak or 1) - 1
			c = LAYER_ARGS.mlp(f)
			sizes = f.hidden or {}
		elseif kind == "mmoe" then
			-- a = experts, b = tasks, c = the activation as mlp's a
			a, b, c = f.experts, f.tasks, LAYER_ARGS.mlp(f)
			sizes = f.expert_hidden or {}
		elseif kind == "slice" then
			a, b = soff or 0, sw or 0
		end
		nodes[i] = { kind = kind, name = name, inputs = ins,
			sizes = sizes, a = a, b = b, c = c, loc = loc }
		::continue::
	end
	if #layers == 0 then
		self:err(lnode.loc, "model.layers is empty; list at least the layers up to " ..
			"the output")
	elseif #layers > 32 then
		self:err(lnode.loc, "model.layers has %d layers, at most 32 fit", #layers)
	end
	out.nodes = nodes
	local o = tbl.output
	local tlabels = train and train.labels ~= false and (train.labels or { "label" }) or nil
	if tbl.heads ~= nil then
		if o ~= nil then
			self:ferr(node, "heads", "model has both 'output' and 'heads'; give one " ..
				"(heads = { { label = ..., output = ... }, ... } for several labels)")
			return
		end
		return self:heads(node, tbl.heads, index, width, nodes, read, nerr, tlabels, out)
	elseif o == nil then
		return self:err(node.loc, "missing required field 'model.output' (the 1-wide " ..
			"logit; or model.heads, one per label)")
	elseif tlabels and #tlabels > 1 then
		self:ferr(node, "output", "data.train has %d labels (%s) and the model one " ..
			"output; declare one head per label: heads = { { label = \"%s\", output = " ..
			"\"%s\" }, ... } (a graph model, st.model.graph)", #tlabels,
			table.concat(tlabels, ", "), tlabels[1], o)
	end
	if type(o) == "string" and o ~= "" then
		if not index[o] then
			self:ferr(node, "output", "model.output '%s' is no layer%s", o,
				common.did_you_mean(o, (function() local t = {} for n in pairs(index) do
					t[#t + 1] = n end table.sort(t) return t end)()))
		else
			out.output = index[o] - 1
			read[o] = true
			local w = width[index[o]]
			if w and w ~= 1 then
				self:ferr(node, "output", "model.output '%s' is %d wide; the output is " ..
					"the logit, 1 wide (end with st.layer.linear{ \"%s\", size = 1 })",
					o, w, o)
			end
			-- A layer nothing reads would take parameters no gradient
			-- reaches. (Only on an otherwise sound graph: a layer with a bad
			-- input leaves its inputs unread, and that is no news.)
			for _, n in ipairs(#self.errs == nerr and nodes or {}) do
				if n and not read[n.name] then
					self:err(n.loc, "layer '%s' is read by no layer and is not the " ..
						"output; remove it or read it", n.name)
				end
			end
		end
	end
end

-- model.heads (docs/models.md, "Several labels"): one { label =, output =,
-- weight = } per label the model learns; each output a 1-wide layer, each
-- label one of data.train's, at most one head per label. Fills out.heads
-- (0-based output layer and label index, weight, name) and out.output (the
-- first head's layer). index/width/nodes/read are V:graph's.
local HEAD_FIELDS = { label = true, output = true, weight = true }
function V:heads(node, heads, index, width, nodes, read, nerr, tlabels, out)
	local hnode = self:section(node, "heads", heads)
	if not hnode then return end
	if type(heads) ~= "table" or common.tag(heads) or #heads == 0 then
		return self:err(hnode.loc, "model.heads must be a non-empty list of " ..
			"{ label = \"click\", output = \"ctr\" }, got %s", show(heads))
	end
	if #heads > schema.limits.labels then
		return self:err(hnode.loc, "model.heads has %d heads, at most %d",
			#heads, schema.limits.labels)
	end
	local lindex = {}
	for i, l in ipairs(tlabels or {}) do lindex[l] = i end
	-- one unnamed label answers to "label" as well as to its column's name
	if tlabels and #tlabels == 1 then lindex.label = 1 end
	local list, used, outs = {}, {}, {}
	local from = hnode.line
	for i, h in ipairs(heads) do
		local where = "model.heads[" .. i .. "]"
		-- located at the line that names the head's label (or output),
		-- searched from the previous head's line on (heads in order)
		local key = type(h) == "table" and (type(h.label) == "string" and h.label or
			type(h.output) == "string" and h.output) or nil
		local ln = key and from and (self:strline(key, from) or
			(from > hnode.line and self:strline(key, from - 1)))   -- two heads on a line
		if ln then from = ln + 1 end
		local hl = self:setloc(where) or (ln and (self.file .. ":" .. ln)) or hnode.loc
		if type(h) ~= "table" or common.tag(h) then
			self:err(hl, "%s must be { label = ..., output = ..., weight = ... }, got %s",
				where, show(h))
			goto next
		end
		for k in pairs(h) do
			if not HEAD_FIELDS[k] then
				self:err(hl, "%s: unknown field '%s' (label, output, weight)", where,
					tostring(k))
			end
		end
		local lab, o, w = h.label, h.output, h.weight
		if w == nil then w = 1.0 end
		if type(lab) ~= "string" or lab == "" then
			self:err(hl, "%s needs label = \"<a label of data.train>\"", where)
			goto next
		end
		local hn = "head '" .. lab .. "'"
		if type(o) ~= "string" or o == "" then
			self:err(hl, "%s (%s) needs output = \"<a 1-wide layer>\"", where, hn)
			goto next
		end
		if type(w) ~= "number" or w ~= w or w <= 0 or w > schema.limits.flt_max then
			self:err(hl, "%s: weight must be a positive number, got %s (%s)", hn,
				show(w), where)
			goto next
		end
		if tlabels and not lindex[lab] then
			self:err(hl, "%s: data.train has no label '%s' (its labels: %s)%s", hn, lab,
				table.concat(tlabels, ", "), common.did_you_mean(lab, tlabels))
			goto next
		end
		if used[lab] then
			self:err(hl, "%s: two heads on label '%s' (heads %d and %d); one head " ..
				"per label", hn, lab, used[lab], i)
			goto next
		end
		used[lab] = i
		if not index[o] then
			self:err(hl, "%s: output '%s' is no layer", hn, o)
			goto next
		end
		if outs[o] then
			self:err(hl, "%s: output '%s' is already head %d's output", hn, o, outs[o])
			goto next
		end
		outs[o] = i
		read[o] = true
		if width[index[o]] and width[index[o]] ~= 1 then
			self:err(hl, "%s: output '%s' is %d wide; a head's output is its logit, " ..
				"1 wide (end with st.layer.linear{ ..., size = 1 })", hn, o,
				width[index[o]])
			goto next
		end
		list[#list + 1] = { node = index[o] - 1, label = tlabels and lindex[lab] - 1 or i - 1,
			weight = w, name = lab }
		::next::
	end
	if tlabels and #list == #heads and #heads ~= #tlabels then
		self:err(hnode.loc, "model.heads has %d head%s, data.train %d labels (%s): " ..
			"declare one head per label", #heads, #heads == 1 and "" or "s", #tlabels,
			table.concat(tlabels, ", "))
	end
	out.heads = list
	out.output = list[1] and list[1].node or 0
	for _, n in ipairs(#self.errs == nerr and nodes or {}) do
		if n and not read[n.name] then
			self:err(n.loc, "layer '%s' is read by no layer and is no head's " ..
				"output; remove it or read it", n.name)
		end
	end
end

function V:model(root, v, train)
	if v == nil then v = "lr" end
	local nerr = #self.errs
	local node, name, tbl, extra = self:kinded(root, "model", v, "model", "type",
		schema.model_types, "model type", "models", true, true, "lr")
	if not node then return nil end
	local m, bad = self:record(node, tbl, schema.model[name], extra)
	local out = {
		type = name, emb_dim = m.emb_dim, hidden = m.hidden or {},
		l2 = m.l2, dense_transform = m.dense_transform,
		pooling = m.pooling or "sum", activation = m.activation or "relu",
		init_scale = m.init_scale or 0, ttl = m.ttl or 0,
		admit_min_count = 0, admit_prob = 1.0, bottom = {},
	}

	-- Per-field pooling (data.train's list fields) overrides model.pooling;
	-- slot_pooling holds one entry per slot (1 sum, 2 mean, 3 none) when any
	-- field sets its own. "none" keeps the sequence for a graph's
	-- st.layer.attention (keys = the field), or st.model.din's keys. (The
	-- message below predates st.model.din; test_lang pins its words.)
	local attended = {}
	if name == "din" and type(tbl.keys) == "string" then
		attended[tbl.keys] = true
	elseif name == "graph" and type(tbl.layers) == "table" then
		for _, e in ipairs(tbl.layers) do
			local lt = type(e) == "table" and common.tag(e[2])
			if lt and lt.kind == "layer" and lt.name == "attention" and
					type(e[2].keys) == "string" then
				attended[e[2].keys] = true
			end
		end
	end
	if train and train.slot_opts then
		local own = false
		for _, o in ipairs(train.slot_opts) do
			if o.pooling == "none" and o.name and attended[o.name] then
				own = true
			elseif o.pooling == "none" and name == "din" then
				self:err(o.loc or node.loc, "data.train field '%s' has pooling = 'none' " ..
					"(keep the sequence), but model.keys is %s; st.model.din attends " ..
					"over the field its keys name", tostring(o.name or "?"),
					type(tbl.keys) == "string" and "'" .. tbl.keys .. "'" or "not given")
			elseif o.pooling == "none" then
				self:err(o.loc or node.loc, "data.train field '%s' has pooling = 'none' " ..
					"(keep the sequence), but model '%s' pools every field into one " ..
					"vector and no preset attends over a sequence yet; use pooling = " ..
					"'sum' or 'mean'", tostring(o.name or "?"), name)
			elseif o.pooling ~= "" then
				own = true
			end
		end
		if own then
			local sp = {}
			for i, o in ipairs(train.slot_opts) do
				local p = o.pooling ~= "" and o.pooling or out.pooling
				sp[i] = p == "mean" and 2 or p == "none" and 3 or 1
			end
			out.slot_pooling = sp
		end
	end

	-- emb_dim: one number, or one per slot of the train data.
	if type(m.emb_dim) == "table" then
		local dims = m.emb_dim
		local max = 0
		for _, d in ipairs(dims) do if d > max then max = d end end
		out.emb_dim, out.slot_dims = max, dims
		if train and #dims ~= train.n_slots then
			self:ferr(node, "emb_dim", "model.emb_dim lists %d dimensions, but " ..
				"data.train has %d slots; give one per slot, or one number for all",
				#dims, train.n_slots)
		end
		if name == "deepfm" or name == "dlrm" then
			for i, d in ipairs(dims) do
				if d ~= dims[1] then
					self:ferr(node, "emb_dim", "model.emb_dim[%d] is %d but " ..
						"model.emb_dim[1] is %d: %s multiplies embeddings " ..
						"pairwise, so every slot needs the same dimension",
						i, d, dims[1], name)
					break
				end
			end
		end
	end

	if name == "dlrm" then
		local e = out.emb_dim
		if m.bottom == nil then
			out.bottom = { 64, e }
		elseif #m.bottom == 0 then
			self:ferr(node, "bottom", "model.bottom must list at least one layer " ..
				"size (the last one equal to model.emb_dim, %d)", e)
		else
			out.bottom = m.bottom
			local last = m.bottom[#m.bottom]
			if not bad.emb_dim and last ~= e then
				self:ferr(node, "bottom", "model.bottom[%d] must equal model.emb_dim " ..
					"(%d): the bottom MLP's output joins the embeddings, got %d",
					#m.bottom, e, last)
			end
		end
	end

	-- dcnv2: a rank at or above the cross width is a full-rank W stored
	-- in more parameters; say which field and what 0 means.
	if name == "dcnv2" then
		out.cross_layers, out.cross_rank = m.cross_layers or 3, m.cross_rank or 0
		local width
		if train and not bad.emb_dim then
			width = train.n_dense
			if out.slot_dims then
				for _, d in ipairs(out.slot_dims) do width = width + d end
			else
				width = width + out.emb_dim * train.n_slots
			end
		end
		if width and out.cross_rank > 0 and out.cross_rank >= width then
			self:ferr(node, "cross_rank", "model.cross_rank must be below the cross " ..
				"layers' width %d (embeddings + dense features), got %d; 0 means " ..
				"full rank", width, out.cross_rank)
		end
	end

	if name == "graph" then
		self:graph(node, tbl, out, train)
	elseif name == "din" then
		-- din has no C twin: it reaches C as the graph its function builds,
		-- the record of a graph written in the job (type "graph", no preset
		-- fields), so its checkpoints and exports save its layers and
		-- --resume, eval and predict rebuild it as any graph (presets.lua).
		out.type, out.hidden, out.dense_transform, out.activation = "graph", {}, nil, "relu"
		if #self.errs == nerr then
			self:graph(node, presets.graph(name, m, node.loc), out, train)
		end
	elseif name == "mmoe" then
		-- As din: C gets the graph (with its heads) that presets.lua builds.
		-- One task per label: the model's labels, else every label of
		-- data.train in order (V:heads checks them against the data).
		local labels = m.labels
		if labels == nil then
			labels = train and train.labels ~= false and (train.labels or { "label" }) or
				{ "label" }
		end
		if m.weights and #m.weights ~= #labels then
			self:ferr(node, "weights", "model.weights has %d entr%s and the model %d " ..
				"label%s (%s): one loss weight per label", #m.weights,
				#m.weights == 1 and "y" or "ies", #labels, #labels == 1 and "" or "s",
				table.concat(labels, ", "))
		end
		out.type, out.hidden, out.dense_transform, out.activation = "graph", {}, nil, "relu"
		if #self.errs == nerr then
			local mm = {}
			for k, v in pairs(m) do mm[k] = v end
			mm.labels = labels
			self:graph(node, presets.graph(name, mm, node.loc), out, train)
		end
	elseif #self.errs == nerr then
		-- A preset is the graph its Lua function builds (presets.lua), from
		-- the fields checked above, through the same checks as a graph
		-- written in the job: out.nodes is what ops/nn/model.c builds. Only
		-- when the preset's own fields are sound, so a bad field is reported
		-- once, at its line, in the preset's words.
		self:graph(node, presets.graph(name, out, node.loc), out, train)
	end

	-- admission = { min_count = n } or { probability = p }.
	local anode = tbl.admission ~= nil and self:section(node, "admission", tbl.admission)
	if anode then
		local a = self:record(anode, tbl.admission, schema.admission)
		if tbl.admission.min_count ~= nil and tbl.admission.probability ~= nil then
			self:err(anode.loc, "model.admission has both 'min_count' and " ..
				"'probability'; give one")
		end
		out.admit_min_count = a.min_count or 0
		out.admit_prob = a.probability or 1.0
	end

	-- Optimizers: `optimizer` sets both groups; sparse_/dense_optimizer
	-- override one each. Each table given is checked once.
	local init_accum = name == "lr" and 0.1 or 0.0
	local base, bp, sname, sp, dname, dp
	local so, dn = tbl.sparse_optimizer, tbl.dense_optimizer
	if tbl.optimizer ~= nil or so == nil or dn == nil then
		base, bp = self:optim(node, "optimizer", tbl.optimizer or "adagrad")
	end
	if so ~= nil then sname, sp = self:optim(node, "sparse_optimizer", so) end
	if dn ~= nil then dname, dp = self:optim(node, "dense_optimizer", dn) end
	if so == nil and base then
		out.sparse_opt = optim_cfg(base, bp, bp.lr, m.l2, init_accum)
	elseif sname then
		out.sparse_opt = optim_cfg(sname, sp, sp.lr, m.l2, init_accum)
	end
	if dn == nil and base then
		out.dense_opt = optim_cfg(base, bp, bp.lr_dense or bp.lr, m.l2, init_accum)
	elseif dname then
		out.dense_opt = optim_cfg(dname, dp, dp.lr, m.l2, init_accum)
	end
	if out.sparse_opt and out.dense_opt then
		local s = out.sparse_opt
		out.optimizer, out.lr, out.l2, out.init_accum = s.name, s.lr, s.l2, s.init_accum
		out.lr_dense = out.dense_opt.lr
	end
	return out
end

function V:sync(root, v, key, default)
	key = key or "sync"
	if v == nil then v = default or "async" end
	local node, name, tbl, extra = self:kinded(root, key, v, "sync", "policy",
		schema.policies, "sync policy", "policies", true, true)
	if not node then return nil end
	local fields = schema.sync[name]
	local p = self:record(node, tbl, fields, extra)
	local params = {}
	for _, f in ipairs(fields) do
		local x = p[f[1]]
		if x ~= nil then
			params[#params + 1] = {
				key = f[1],
				num = type(x) == "number" and x or 0,
				str = type(x) == "string" and x or nil,
			}
		end
	end
	local out = { name = name, params = params }
	if schema.meta_policies[name] then
		-- The two policies auto switches between; neither may be auto.
		for _, k in ipairs({ "sync", "async" }) do
			local sub = self:sync(node, tbl[k], k, k == "sync" and "allreduce" or "async")
			if sub and schema.meta_policies[sub.name] then
				self:ferr(node, k, "%s.%s cannot be 'auto' (give the policy to " ..
					"switch to)", node.path, k)
			end
			out[k] = sub
		end
	end
	return out
end

-- stragglers = st.stragglers{worker = w, slowdown = s} or
-- st.stragglers{random = true, probability = p, slowdown = s, seed = n}.
function V:stragglers(root, v, workers, seed)
	local tg = type(v) == "table" and common.tag(v)
	if type(v) ~= "table" or (tg and tg.kind ~= "stragglers") then
		self:ferr(root, "stragglers", "stragglers must be st.stragglers{...}, got %s",
			tg and ("st." .. tg.kind .. "." .. tg.name .. "{...}") or show(v))
		return nil
	end
	local node = self:child(root, "stragglers", v)
	local s, bad = self:record(node, v, schema.stragglers)
	if v.random == true then
		if v.worker ~= nil then
			self:err(node.loc, "stragglers has both 'worker' and 'random = true'; give one")
		end
		if v.probability == nil then
			self:err(node.loc, "missing required field 'stragglers.probability' " ..
				"(random = true slows each worker step with that probability)")
		end
	elseif v.worker == nil then
		self:err(node.loc, "stragglers needs 'worker' (0-based, like the " ..
			"st-train-<n> threads) or 'random = true'")
	elseif not bad.worker and workers and s.worker >= workers then
		self:ferr(node, "worker", "stragglers.worker must be < stages.train.workers " ..
			"(%d), got %d (workers are numbered from 0)", workers, s.worker)
	elseif v.probability ~= nil then
		self:ferr(node, "probability", "stragglers.probability needs 'random = true'")
	end
	return {
		random = s.random, worker = s.random and -1 or s.worker,
		probability = s.probability or 0, slowdown = s.slowdown or 1,
		seed = s.seed or seed, steps = s.steps or 0,
	}
end

-- phases = { {name =, rows =, data =, sync =}, ... }: trained in order on
-- one model; a phase without sync uses the job's `sync`.
function V:phases(root, v, jsync, train, gen)
	local pnode = self:section(root, "phases", v)
	if not pnode then return nil end
	if #v == 0 then
		self:err(pnode.loc, "phases must be a non-empty list of {name = ..., sync = ...}")
		return nil
	end
	for k in pairs(v) do
		if math.type(k) ~= "integer" or k < 1 or k > #v then
			self:err(pnode.loc, "phases must be a list, got field '%s'", tostring(k))
			return nil
		end
	end
	local out, seen, from = {}, {}, pnode.line
	for i, ph in ipairs(v) do
		local path = "phases[" .. i .. "]"
		if type(ph) ~= "table" or common.tag(ph) then
			self:err(pnode.loc, "%s must be a table {name = ..., sync = ...}, got %s",
				path, show(ph))
		else
			local node = { path = path, loc = pnode.loc, line = pnode.line }
			local l = self:scan("name", from)
			if l then
				node.loc, node.line, from = self.file .. ":" .. l, l, l + 1
			end
			local r = self:record(node, ph, schema.phase)
			if r.name and seen[r.name] then
				self:ferr(node, "name", "%s.name '%s' is already used by phases[%d]",
					path, r.name, seen[r.name])
			elseif r.name then
				seen[r.name] = i
			end
			local p = { name = r.name, rows = r.rows or -1, validate = r.validate }
			if ph.data ~= nil then
				p.data = self:source(node, "data", ph.data, gen)
				if p.data and train and (p.data.n_dense ~= train.n_dense or
						p.data.n_slots ~= train.n_slots) then
					self:ferr(node, "data", "%s.data has %d dense features and %d " ..
						"slots, data.train has %d and %d: every phase trains the " ..
						"same model", path, p.data.n_dense, p.data.n_slots,
						train.n_dense, train.n_slots)
				end
				-- every head trains on its label in every phase
				local pl = p.data and p.data.labels ~= false and (p.data.labels or { "label" })
				local tl = train and train.labels ~= false and (train.labels or { "label" })
				if pl and tl and (#pl > 1 or #tl > 1) and
						table.concat(pl, ",") ~= table.concat(tl, ",") then
					self:ferr(node, "data", "%s.data has labels (%s), data.train (%s): " ..
						"every phase trains the same heads", path,
						table.concat(pl, ", "), table.concat(tl, ", "))
				end
			end
			if ph.sync ~= nil then
				p.sync = self:sync(node, ph.sync)
			else
				p.sync = jsync
			end
			out[i] = p
		end
	end
	return out
end

-- Checks that `v` at field `key` of `parent` is a plain table; returns its
-- node or nil (nil also when absent).
function V:section(parent, key, v)
	if v == nil then return nil end
	if type(v) ~= "table" or common.tag(v) then
		local tg = type(v) == "table" and common.tag(v)
		self:ferr(parent, key, "%s must be a table, got %s", join(parent.path, key),
			tg and ("st." .. tg.kind .. "." .. tg.name .. "{...}") or show(v))
		return nil
	end
	return self:child(parent, key, v)
end

-- Days of data.generate: each day is one file (day-NNN.tsv) of at least one
-- row, and drift only means something with days.
function V:gen_days(gnode, g, gen)
	local days = tonumber(gen.days) or 0
	if days > 0 then
		if gen.files and gen.files ~= 1 then
			self:ferr(gnode, "files", "%s.files must be 1 with days (each day is one " ..
				"file, day-000.tsv ...), got %s", gnode.path, gen.files)
		end
		if gen.rows and gen.rows < days then
			self:ferr(gnode, "rows", "%s.rows must be >= days (%d): every day needs " ..
				"a row, got %s", gnode.path, days, gen.rows)
		end
		if (tonumber(gen.multi_hot) or 0) > 0 then
			self:ferr(gnode, "multi_hot", "%s.multi_hot cannot be used with days (the " ..
				"drifting model is single-hot)", gnode.path)
		end
		if (tonumber(gen.labels) or 1) > 1 then
			self:ferr(gnode, "labels", "%s.labels = 2 cannot be used with days (the " ..
				"conversion's latents do not drift)", gnode.path)
		end
	elseif (tonumber(gen.labels) or 1) > 1 and (tonumber(gen.multi_hot) or 0) > 0 then
		self:ferr(gnode, "labels", "%s.labels = 2 cannot be used with multi_hot (the " ..
			"conversion's latents are single-hot)", gnode.path)
	elseif g.drift ~= nil and (g.days == nil or g.days == 0) then
		self:ferr(gnode, "drift", "%s.drift needs days > 0 (without days nothing " ..
			"drifts)", gnode.path)
	end
end

function V:job(job)
	local root = { path = "" }
	local tg = common.tag(job)
	root.loc, root.line = self.job_loc, self.job_line
	if tg.where then
		local f, l = tg.where:match("^(.*):(%d+)$")
		root.loc = tg.where
		root.line = (f == self.file) and tonumber(l) or nil
	end
	local j = self:record(root, job, schema.job)
	local out = { name = j.name, seed = j.seed, epochs = j.epochs }

	-- data
	local dnode = self:section(root, "data", job.data)
	if job.data == nil then
		self:err(root.loc, "missing required field 'data.train'")
	elseif dnode then
		self:record(dnode, job.data, schema.data)
		local gen
		if job.data.generate ~= nil then
			local g = job.data.generate
			local gtag = type(g) == "table" and common.tag(g)
			if type(g) ~= "table" or (gtag and gtag.kind ~= "gen") then
				self:ferr(dnode, "generate", "data.generate must be st.gen{...}, got %s",
					gtag and ("st." .. gtag.kind .. "." .. gtag.name .. "{...}") or show(g))
			else
				local gnode = self:child(dnode, "generate", g)
				gen = self:record(gnode, g, schema.gen)
				if gen.seed == nil then gen.seed = j.seed end
				self:gen_days(gnode, g, gen)
				out.gen = gen
			end
		end
		if job.data.train == nil then
			self:err(dnode.loc, "missing required field 'data.train'")
		else
			out.train = self:source(dnode, "train", job.data.train, gen)
		end
		if job.data.eval ~= nil then
			out.eval = self:source(dnode, "eval", job.data.eval, gen)
			-- The indicator features change the model's input: one model
			-- scores both sources, so they must agree on them.
			local t, e = out.train, out.eval
			if t and e and t.dense_indicator ~= nil and e.dense_indicator ~= nil and
				t.dense_indicator ~= e.dense_indicator then
				self:ferr(dnode, "eval", "data.eval has dense_missing = '%s' but data.train " ..
					"'%s': one model scores both, give them the same",
					e.dense_indicator and "indicator" or "zero",
					t.dense_indicator and "indicator" or "zero")
			end
			-- Every head scores its label on the eval data too.
			local tl = t and t.labels ~= false and (t.labels or { "label" })
			local el = e and e.labels ~= false and (e.labels or { "label" })
			-- (one label each: names may differ, "label" and a schema's column)
			if tl and el and (#tl > 1 or #el > 1) and
					table.concat(tl, ",") ~= table.concat(el, ",") then
				self:ferr(dnode, "eval", "data.eval has %d label%s (%s) but data.train " ..
					"%d (%s): every head is scored on both, give them the same labels",
					#el, #el == 1 and "" or "s", table.concat(el, ", "), #tl,
					table.concat(tl, ", "))
			end
		end
	end

	out.model = self:model(root, job.model, out.train)

	-- stages
	local stages = {}
	local snode = self:section(root, "stages", job.stages)
	local sfields = {}
	for _, n in ipairs(schema.stages) do sfields[#sfields + 1] = { n, "section" } end
	if snode then self:record(snode, job.stages, sfields) end
	local tnode
	for _, n in ipairs(schema.stages) do
		local t = snode and job.stages[n]
		local node = snode and self:section(snode, n, t)
		local c
		if node then
			c = self:record(node, t, schema.stage[n])
		else
			c = self:record({ path = "stages." .. n, loc = root.loc }, {}, schema.stage[n])
		end
		stages[n] = { threads = c.threads or c.workers, queue = c.queue, near = c.near }
		if n == "read" then out.batch_size = c.batch_size end
		if n == "train" then
			out.minibatch, tnode = c.minibatch, node
			out.on_nonfinite = c.on_nonfinite == "warn" and 1 or 0
		end
	end
	out.stages = stages
	if out.minibatch == nil then
		out.minibatch = math.min(512, out.batch_size)
	elseif out.minibatch > out.batch_size then
		self:err(self:floc(tnode, "minibatch"),
			"stages.train.minibatch must be <= stages.read.batch_size (%d), got %d",
			out.batch_size, out.minibatch)
	end

	-- storage
	local stnode = self:section(root, "storage", job.storage)
	local st = stnode and self:record(stnode, job.storage, schema.storage) or { mem = 0 }
	out.mem_bytes = st.mem
	out.row_precision = st.row_precision
	-- Compact rows live in this process's tables only: the shard service
	-- of a multi-process job (ops/dist) serves and updates fp32 rows.
	if st.row_precision and st.row_precision ~= "fp32" and job.dist ~= nil then
		self:ferr(stnode, "row_precision", "storage.row_precision = '%s' is not supported " ..
			"with multi-process training (the dist section) yet: use 'fp32' or run in " ..
			"one process", st.row_precision)
	end
	if stnode and job.storage.ssd ~= nil then
		local ssnode = self:section(stnode, "ssd", job.storage.ssd)
		if ssnode then
			local ssd = self:record(ssnode, job.storage.ssd, schema.ssd)
			out.ssd_path, out.ssd_bytes = ssd.path, ssd.budget
			out.ssd_file_bytes, out.ssd_queue_depth = ssd.file_size, ssd.queue_depth
			out.ssd_read, out.ssd_lru = ssd.read, ssd.lru
			if ssd.file_size < 65536 then
				self:ferr(ssnode, "file_size",
					"storage.ssd.file_size must be at least 64KiB, got %d bytes", ssd.file_size)
			end
		end
	end

	out.sync = self:sync(root, job.sync)
	if job.stragglers ~= nil then
		out.stragglers = self:stragglers(root, job.stragglers, stages.train.threads, j.seed)
	end
	if job.phases ~= nil then
		out.phases = self:phases(root, job.phases, out.sync, out.train, out.gen)
	end
	-- data.generate makes its files only for a job that reads them: when no
	-- source (train, eval, a phase's data) lies under generate.dir — every
	-- path was pointed elsewhere, e.g. with --set data.train.path=... — it
	-- is kept (declared) but not used, and `strata run` generates nothing.
	if out.gen then
		local used = (out.train and out.train.generated) or (out.eval and out.eval.generated)
		for _, p in ipairs(out.phases or {}) do
			used = used or (p.data and p.data.generated)
		end
		out.gen.used = used and true or false
	end

	local cnode = self:section(root, "checkpoint", job.checkpoint)
	if cnode then
		local c = self:record(cnode, job.checkpoint, schema.checkpoint)
		out.ckpt_dir, out.ckpt_every, out.ckpt_secs, out.ckpt_keep =
			c.dir, c.every, c.every_secs, c.keep
	end
	local enode = self:section(root, "export", job.export)
	if enode then
		local e = self:record(enode, job.export, schema.export)
		out.export_dir, out.export_delta, out.export_keep = e.dir, e.delta, e.keep
	end
	out.resume = j.resume
	local dnode = self:section(root, "dist", job.dist)
	local d = dnode and self:record(dnode, job.dist, schema.dist) or
		{ owners = 0, compress = false, timeout = 60 }
	out.dist_owners, out.dist_compress, out.dist_timeout = d.owners, d.compress, d.timeout
	-- -1: not given, the trainer's default (docs/distributed.md,
	-- "Prefetched step reads").
	out.dist_prefetch = d.prefetch or -1
	if d.prefetch and d.prefetch > 0 then
		-- hop_bs bounds staleness by its clocks; reads made early would
		-- add rows staleness that bound does not count.
		local function hop(sy)
			return sy and (sy.name == "hop_bs" or hop(sy.sync) or hop(sy.async))
		end
		local bad = hop(out.sync)
		for _, p in ipairs(out.phases or {}) do
			bad = bad or hop(p.sync)
		end
		if bad then
			self:ferr(dnode, "prefetch", "dist.prefetch = %d cannot be used with sync " ..
				"policy hop_bs: its bound b counts steps, and a step read issued ahead " ..
				"would add up to %d minibatches of row staleness it does not count " ..
				"(leave prefetch out or set it to 0)", d.prefetch, d.prefetch)
		end
	end
	if j.resume and not cnode then
		self:ferr(root, "resume", "resume = true needs a checkpoint section (checkpoint.dir)")
	end
	local onode = self:section(root, "output", job.output)
	local o = onode and self:record(onode, job.output, schema.output) or { progress = 1.0 }
	out.out_dir, out.metrics_path, out.progress_secs = o.dir, o.metrics, o.progress
	return out
end

-- Finds the line of the st.job call when the constructor could not see it
-- (a `return st.job{...}` is a tail call): the first "st.job" call in the
-- source, else the last line starting with `return`, else line 1.
function V:find_job_line()
	for i, s in ipairs(self.lines) do
		if uncomment(s):find("%f[%w_]st%.job%s*[{(]") then return i end
	end
	return self.ret_line or 1
end

local function split_lines(src)
	local lines, pos = {}, 1
	while true do
		local nl = src:find("\n", pos, true)
		lines[#lines + 1] = src:sub(pos, (nl or #src + 1) - 1)
		if not nl then return lines end
		pos = nl + 1
	end
end

-- Applies "key.path=value" strings to `job`. The value is a Lua expression
-- evaluated in the sandbox (st is visible); when it does not compile, or is
-- a bare word/path whose evaluation fails (async, data/x.tsv), it is taken
-- as a string.
function V:apply_sets(job, sets)
	for _, s in ipairs(sets) do
		local loc = "--set " .. s
		local eq = s:find("=", 1, true)
		local key = eq and trim(s:sub(1, eq - 1))
		local val = eq and trim(s:sub(eq + 1))
		if not key then
			self:err(loc, "expected key.path=value")
		elseif (("." .. key):gsub("%.[%a_][%w_]*", "")) ~= "" then
			self:err(loc, "'%s' is not a field path like stages.read.threads", key)
		else
			local value, ok = nil, true
			local chunk = load("return " .. val, "=" .. loc, "t")
			if not chunk then
				value = val
			else
				local good, r = pcall(chunk)
				if good and type(r) == "function" and val:match("^[%a_][%w_]*$") then
					-- a bare word naming a Lua function (warn, print,
					-- type): no job field takes a function, so it
					-- means the word (on_nonfinite=warn)
					value = val
				elseif good then
					value = r
				elseif val:match("^[%w_%.%-/%*%?%[%]~:+]+$") then
					value = val
				else
					self.errs[#self.errs + 1] = type(r) == "string" and r or
						(loc .. ":1: " .. core.error_text(r))
					ok = false
				end
			end
			if ok then
				local t, parts = job, {}
				for p in key:gmatch("[^.]+") do parts[#parts + 1] = p end
				for i = 1, #parts - 1 do
					local nx = t[parts[i]]
					if nx == nil then
						nx = {}
						t[parts[i]] = nx
						self.sets[table.concat(parts, ".", 1, i)] = loc
					elseif type(nx) ~= "table" then
						self:err(loc, "cannot set %s: %s is a %s, not a table", key,
							table.concat(parts, ".", 1, i), type(nx))
						ok = false
						break
					end
					t = nx
				end
				if ok then
					t[parts[#parts]] = value
					self.sets[key] = loc
				end
			end
		end
	end
end

-- Entry point, called by lang/lang.c with the job file's result.
-- ctx = { file = chunk short_src, source = text, sets = {..}, check_paths = bool }
-- Returns normalized, errors (a list of strings; empty when all is well).
function M.run(result, ctx)
	local self = setmetatable({
		errs = {}, sets = {}, file = ctx.file,
		lines = split_lines(ctx.source or ""),
		check_paths = ctx.check_paths,
	}, V)
	for i = #self.lines, 1, -1 do
		if self.lines[i]:match("^%s*return%f[%W]") then self.ret_line = i; break end
	end
	self.job_line = self:find_job_line()
	self.job_loc = self.file .. ":" .. self.job_line
	local tg = type(result) == "table" and common.tag(result)
	if not tg or tg.kind ~= "job" then
		self:err(self.file .. ":" .. (self.ret_line or #self.lines),
			"the job file must return st.job{...}")
		return nil, self.errs
	end
	self:apply_sets(result, ctx.sets or {})
	local out = self:job(result)
	if #self.errs > 0 then return nil, self.errs end
	return out, self.errs
end

return M
