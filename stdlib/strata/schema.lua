-- strata.schema — the fields every job table may hold: names, types,
-- ranges and defaults. validate.lua walks these lists; docs/job-language.md
-- documents them. Field order is the order errors are reported in.
--
-- A field is { name, type, ... } with type one of
--   int, num, str, bool  scalars (int accepts 2.0 and stores 2)
--   size                 bytes: integer or "2GiB", "512MiB", "10GB", ...
--   paths                a glob string or a non-empty list of glob strings
--   ints                 a list of integers
--   dims                 an integer, or a list of integers (one per slot)
--   section              a sub-table checked by its own code in validate.lua
-- and options: required, default, min (>=), gt (>), max (<=), lt (<),
-- enum (list of strings), nonempty (strings), char (a one-character string),
-- maxlen (lists).
local core = select(3, ...)
local S = {}

S.formats = { "criteo", "libsvm", "csv" }
S.models = { "lr", "dnn", "wdl", "deepfm", "dlrm" }
S.optimizers = { "sgd", "adagrad", "adam", "ftrl" }
-- Sync policies: the registry's table (ops/sync/policies.def), in its
-- order; S.meta_policies[name] is true for a policy that switches between
-- two others (auto), whose sub-policies validate.lua checks.
S.policies, S.meta_policies = {}, {}
for _, p in ipairs(core.policies) do
	S.policies[#S.policies + 1] = p.name
	S.meta_policies[p.name] = p.meta
end
S.stages = { "read", "pull", "train", "push", "dump" }
S.col_kinds = { "ignore", "label", "dense", "cat" }   -- order = enum st_col_kind

S.job = {
	{ "name", "str", required = true, nonempty = true },
	{ "seed", "int", min = 0, default = 42 },
	{ "epochs", "int", min = 1, default = 1 },
	{ "data", "section" },
	{ "model", "section" },
	{ "stages", "section" },
	{ "storage", "section" },
	{ "sync", "section" },
	{ "stragglers", "section" },
	{ "phases", "section" },
	{ "output", "section" },
	{ "checkpoint", "section" },
	{ "export", "section" },
	{ "resume", "bool", default = false },
	{ "dist", "section" },
}

-- export = { dir = ..., delta = true, keep = K }: serving exports after each
-- phase (slice) and at the end of training.
S.export = {
	{ "dir", "str", required = true, nonempty = true },
	{ "delta", "bool", default = true },
	{ "keep", "int", min = 0, default = 0 },
}

-- dist = { owners = K, compress = false, timeout = T }: multi-process jobs
-- (docs/distributed.md). Ranks 0..K-1 own the sparse rows (0 = every rank);
-- compress: unique-key lists with 16-bit indices and fp16 rows scaled by
-- their block's max norm on the wire; timeout: seconds a rank waits for a
-- peer before calling it dead.
S.dist = {
	{ "owners", "int", min = 0, default = 0 },
	{ "compress", "bool", default = false },
	{ "timeout", "num", min = 1, default = 60 },
}

-- checkpoint = { dir = ..., every = N batches, every_secs = T, keep = K }
S.checkpoint = {
	{ "dir", "str", required = true, nonempty = true },
	{ "every", "int", min = 0, default = 0 },
	{ "every_secs", "num", min = 0, default = 0 },
	{ "keep", "int", min = 0, default = 3 },
}

-- st.stragglers{...}: one slowed worker (0-based, like the st-train-<n>
-- threads) or a random schedule. validate.lua checks which fields go together.
S.stragglers = {
	{ "worker", "int", min = 0 },
	{ "random", "bool", default = false },
	{ "probability", "num", min = 0, max = 1 },
	{ "slowdown", "num", min = 1, required = true },
	{ "seed", "int", min = 0 },          -- default: the job's seed
	{ "steps", "int", min = 1 },         -- slow only the first `steps` minibatches
}

-- One entry of `phases`; data and sync are checked like data.train and sync.
S.phase = {
	{ "name", "str", required = true, nonempty = true },
	{ "rows", "int", min = 1 },          -- default: all rows of the source
	{ "validate", "bool", default = false }, -- score the slice before training on it
	{ "data", "section" },
	{ "sync", "section" },
}

S.data = {
	{ "train", "section" },
	{ "eval", "section" },
	{ "generate", "section" },
}

local common_source = {
	{ "path", "paths", required = true },
	{ "on_bad_record", "str", enum = { "skip", "fail" }, default = "skip" },
	{ "max_report", "int", min = 0, default = 5 },
	{ "limit", "int", min = -1, default = -1 },
}
local function with(base, extra)
	local t = {}
	for _, f in ipairs(base) do t[#t + 1] = f end
	for _, f in ipairs(extra) do t[#t + 1] = f end
	return t
end
S.source = {
	criteo = with(common_source, {}),
	libsvm = with(common_source, {
		{ "slots", "int", min = 1, default = 1 },
	}),
	csv = with(common_source, {
		{ "sep", "str", char = true, default = "," },
		{ "header", "bool", default = true },
		{ "columns", "section" },
		{ "schema", "section" },
	}),
}
S.csv_schema = {
	{ "label", "str", required = true, nonempty = true },
	{ "dense", "section" },
	{ "cat", "section" },
	{ "ignore", "section" },
}

S.gen = {
	{ "dir", "str", required = true, nonempty = true },
	{ "rows", "int", min = 1, default = 1000000 },
	{ "eval_rows", "int", min = 0, default = 0 },
	{ "files", "int", min = 1, default = 1 },
	{ "zipf", "num", gt = 0, default = 1.1 },
	{ "vocab", "int", min = 1, default = 1000000 },
	{ "seed", "int", min = 0 },          -- default: the job's seed
	-- days > 0: day-000.tsv .. day-<days-1>.tsv with a drifting hidden
	-- model (ops/gen/gen.h); validate.lua checks files, rows and drift.
	{ "days", "int", min = 0, max = 365, default = 0 },
	{ "drift", "num", min = 0, max = 1, default = 0.1 },
}

local model_common = {
	{ "optimizer", "section" },
	{ "l2", "num", min = 0, default = 0.0 },
	{ "dense_transform", "str", enum = { "log1p", "none" }, default = "log1p" },
}
-- The neural presets share every field; dlrm adds `bottom`. emb_dim is
-- `dims`: one integer for every slot, or a list with one per slot.
local deep = with(model_common, {
	{ "sparse_optimizer", "section" },
	{ "dense_optimizer", "section" },
	{ "emb_dim", "dims", min = 1, default = 8 },
	{ "pooling", "str", enum = { "sum", "mean" }, default = "sum" },
	{ "hidden", "ints", min = 1, maxlen = 16, default = { 256, 128 } },
	{ "activation", "str", enum = { "relu", "sigmoid", "none" }, default = "relu" },
	{ "init_scale", "num", min = 0, default = 0.01 },
	{ "admission", "section" },
	{ "ttl", "int", min = 0, default = 0 },
})
S.model = {
	lr = with(model_common, {
		{ "emb_dim", "int", min = 1, max = 1, default = 1 },
	}),
	dnn = deep, wdl = deep, deepfm = deep,
	dlrm = with(deep, {
		{ "bottom", "ints", min = 1, maxlen = 16 },   -- default {64, emb_dim}
	}),
}
-- model.admission: one of the two rules (neither: admit every key).
S.admission = {
	{ "min_count", "int", min = 0 },
	{ "probability", "num", gt = 0, max = 1 },
}

-- Defaults that depend on the preset (adagrad's init_accum) are filled by
-- validate.lua, not here.
local function optim(lr, extra)
	return with({
		{ "lr", "num", gt = 0, default = lr },
		{ "lr_dense", "num", gt = 0 },    -- default: lr
		{ "l2", "num", min = 0 },         -- default: the model's l2
	}, extra)
end
S.optim = {
	sgd = optim(0.01, {}),
	adagrad = optim(0.05, {
		{ "rowwise", "bool", default = false },
		{ "init_accum", "num", min = 0 },  -- default: lr 0.1, others 0
		{ "eps", "num", gt = 0, default = 1e-10 },
	}),
	adam = optim(0.001, {
		{ "beta1", "num", min = 0, lt = 1, default = 0.9 },
		{ "beta2", "num", min = 0, lt = 1, default = 0.999 },
		{ "eps", "num", gt = 0, default = 1e-8 },
	}),
	ftrl = optim(0.05, {
		{ "beta", "num", min = 0, default = 1.0 },
		{ "l1", "num", min = 0, default = 0.0 },
	}),
}

S.stage = {
	read = {
		{ "threads", "int", min = 1, default = 1 },
		{ "queue", "int", min = 1, default = 4 },
		{ "batch_size", "int", min = 1, default = 8192 },
		{ "near", "str", nonempty = true },
	},
	train = {
		{ "workers", "int", min = 1, default = 1 },
		{ "queue", "int", min = 1, default = 4 },
		{ "minibatch", "int", min = 1 },  -- default 512, clamped to batch_size
		{ "near", "str", nonempty = true },
	},
}
S.stage.pull = {
	{ "threads", "int", min = 1, default = 1 },
	{ "queue", "int", min = 1, default = 4 },
	{ "near", "str", nonempty = true },
}
S.stage.push = S.stage.pull
S.stage.dump = S.stage.pull

S.storage = {
	{ "mem", "size", default = 0 },
	{ "ssd", "section" },
}
S.ssd = {
	{ "path", "str", required = true, nonempty = true },
	{ "budget", "size", default = 0 },
	{ "file_size", "size", default = 4194304 },
	{ "queue_depth", "int", min = 1, max = 4096, default = 128 },
	{ "read", "str", enum = { "auto", "block", "file" }, default = "auto" },
	{ "lru", "num", gt = 0, lt = 1, default = 0.5 },
}

S.output = {
	{ "dir", "str", nonempty = true },
	{ "metrics", "str", nonempty = true },
	{ "progress", "num", gt = 0, default = 1.0 },
}

S.sync = {
	allreduce = {},
	async = {},
	hop_bs = { { "b", "int", min = 0, required = true } },
	bsp = { { "b", "int", min = 1, required = true } },
	hop_bw = { { "b", "int", min = 0, required = true } },
	gba = {
		{ "global_batch", "int", min = 1, required = true },
		{ "tolerance", "int", min = 0, default = 1 },
	},
	kstep = { { "k", "int", min = 1, required = true } },
	shadow = {
		{ "algo", "str", enum = { "easgd", "ma", "bmuf" }, default = "easgd" },
		{ "alpha", "num", gt = 0, max = 1, default = 0.5 },
		-- BMUF's block step size (shadowsync-background-sync.md, Algorithm 4)
		{ "eta", "num", gt = 0, default = 1.0 },
		-- 0: sync in the background thread (ShadowSync); n > 0: fixed-rate
		-- sync in the foreground every n steps of each worker (the paper's
		-- baseline)
		{ "every", "int", min = 0, default = 0 },
	},
	hybrid = { { "staleness", "int", min = 0, required = true } },
	-- Switches between `sync` (worker speeds agree) and `async` (they
	-- diverge by more than threshold over `window` steps).
	auto = {
		{ "sync", "section" },               -- default st.sync.allreduce{}
		{ "async", "section" },              -- default st.sync.async{}
		{ "threshold", "num", gt = 1, default = 1.5 },
		{ "window", "int", min = 1, max = 1024, default = 20 },
	},
}

return S
