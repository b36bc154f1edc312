/*
 * main.c — the `strata` command: dispatch, help and option parsing.
 *
 *   strata run JOB.lua      compile the job into a pipeline and run it
 *   strata launch -n N JOB.lua   run a job as N processes on this machine
 *   strata check JOB.lua    validate a job file, run nothing
 *   strata plan JOB.lua     print the compiled graph and thread placement
 *   strata gen              write synthetic Criteo-format data
 *   strata inspect PATH     summarize a checkpoint or export directory
 *   strata predict DIR DATA...  score data with an export
 *   strata eval DIR DATA...     AUC and logloss of an export on data
 *   strata trace summarize FILE  busy / idle / blocked time per stage of a trace
 *   strata report --metrics FILE [--trace FILE] -o OUT.html  an HTML report of a run
 *   strata help [COMMAND]
 *
 * Exit codes: 0 ok, 1 the job failed, 2 usage or job-file error; `run`
 * stopped cleanly by SIGINT / SIGTERM: 130 / 143 (docs/operations.md).
 */
#include "cli.h"
#include "ops/sync/registry.h"
#include "lang/lang.h"
#include "runtime/err.h"
#include "runtime/simd.h"
#include "st_config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const help_run =
	"usage: strata run JOB.lua [--set key.path=value]... [--metrics FILE]\n"
	"                          [--quiet] [--no-pin] [--verbose]\n"
	"                          [--resume[=fresh-if-damaged]]\n"
	"                          [--trace FILE [--trace-events N]]\n"
	"                          [--metrics-port N [--metrics-bind ADDR]]\n"
	"\n"
	"Compiles the job into a pipeline of stages (read -> pull -> train -> push ->\n"
	"dump) joined by bounded queues, pins the stage threads, and runs it. If the\n"
	"job declares data.generate and its files are absent, the synthetic data is\n"
	"generated first. After training, the eval source (if any) is scored.\n"
	"\n"
	"  --set key.path=value  override a job field; value is a Lua expression,\n"
	"                        e.g. --set stages.train.workers=2\n"
	"                             --set sync=st.sync.async{}\n"
	"  --metrics FILE        write metrics as JSON lines (one per second); a write\n"
	"                        that fails makes the run exit 1\n"
	"  --quiet               no progress line\n"
	"  --no-pin              do not pin stage threads to cores\n"
	"  --verbose             print the resolved job before running\n"
	"  --resume              continue from the newest checkpoint in checkpoint.dir\n"
	"                        that verifies (same as resume = true in the job); with\n"
	"                        no checkpoint there, start from the beginning. If there\n"
	"                        are checkpoints but every one is damaged, stop with an\n"
	"                        error naming each and what failed; nothing is changed\n"
	"  --resume=fresh-if-damaged\n"
	"                        the same, but when every checkpoint is damaged, move\n"
	"                        them aside (ckpt-<step>.damaged) and start from the\n"
	"                        beginning\n"
	"  --trace FILE          record a timeline of the run (stage spans with batch ids,\n"
	"                        queue depths, phase / policy switches, checkpoints,\n"
	"                        errors) and write it at the end as Chrome trace-event\n"
	"                        JSON: open it at ui.perfetto.dev or chrome://tracing,\n"
	"                        or run `strata trace summarize FILE`. In a multi-process\n"
	"                        job rank r writes FILE.rank<r>.json (a .json suffix of\n"
	"                        FILE is put after the rank). See docs/observability.md\n"
	"  --trace-events N      keep the newest N events of each thread (default 65536,\n"
	"                        64 bytes each): the bound on the trace's size\n"
	"  --metrics-port N      serve the run's metrics live in the Prometheus text\n"
	"                        format at http://127.0.0.1:N/metrics while it runs\n"
	"                        (the --metrics counters and gauges, per-stage time);\n"
	"                        a port in use stops the run before it trains. In a\n"
	"                        multi-process job rank r serves on N + r. Needs a\n"
	"                        build with libmicrohttpd. See docs/observability.md\n"
	"  --metrics-bind ADDR   the address --metrics-port listens on (default\n"
	"                        127.0.0.1, this machine only; 0.0.0.0 or :: for every\n"
	"                        interface: anyone who can reach it reads the metrics)\n"
	"\n"
	"^C (SIGINT) or SIGTERM stops the run cleanly: a checkpoint being written is\n"
	"finished, no partial one is left, and --resume continues from the newest; a\n"
	"second signal exits at once. See docs/operations.md.\n"
	"\n"
	"Exit status: 0 ok, 1 the job failed, 2 usage or job-file error, 130 / 143\n"
	"stopped by SIGINT / SIGTERM.\n";

static const char *const help_launch =
	"usage: strata launch -n N [--cluster FILE] [--stop-timeout S] [--bind] JOB.lua\n"
	"                     [run options...]\n"
	"\n"
	"Runs a distributed job as N processes on this machine: starts N copies of\n"
	"`strata run JOB.lua [run options...]` with STRATA_RANK (0..N-1),\n"
	"STRATA_WORLD_SIZE, STRATA_LOCAL_RANK, STRATA_COORDINATOR (127.0.0.1 at a free\n"
	"port) and STRATA_TOKEN (random) set, forwards SIGINT and SIGTERM to them, waits\n"
	"for all, and reports each rank that failed or was killed. After a forwarded\n"
	"signal the ranks have --stop-timeout seconds to stop cleanly; the ones still\n"
	"running then are killed.\n"
	"\n"
	"  -n N            number of processes (1..4096)\n"
	"  --cluster FILE  start this host's processes of a cluster file instead:\n"
	"                  procs_per_host of them, ranks host_index x procs_per_host + i,\n"
	"                  coordinator and token from the file (run it on every host;\n"
	"                  -n, if given, must equal procs_per_host)\n"
	"  --stop-timeout S  seconds the ranks get to stop after SIGINT or SIGTERM\n"
	"                  before they are killed (default 30)\n"
	"  --bind          give each process started here its own slice of this\n"
	"                  launcher's CPUs (contiguous, CPUs / N each, the first\n"
	"                  CPUs %% N one more); needs a CPU per process\n"
	"\n"
	"Everything after JOB.lua goes to `strata run`; with --metrics-port N rank r\n"
	"serves its metrics on port N + r. See docs/distributed.md.\n"
	"Exit status: rank 0's (130 / 143 when it stopped on a forwarded SIGINT /\n"
	"SIGTERM, 1 if it was killed by a signal); 2 usage error.\n";

static const char *const help_check =
	"usage: strata check JOB.lua [--set key.path=value]... [--verbose]\n"
	"\n"
	"Loads and validates the job file and reports every error with its\n"
	"file:line. With --verbose prints every resolved field. Runs nothing.\n"
	"Exit status: 0 valid, 2 invalid.\n";

static const char *const help_plan =
	"usage: strata plan JOB.lua [--set key.path=value]... [--topology FILE.xml] [--dot]\n"
	"\n"
	"Prints the compiled graph (stages, threads, queue capacities) and where each\n"
	"thread would be pinned. --topology plans against an hwloc XML topology\n"
	"(from `lstopo --of xml`) instead of this machine. --dot prints Graphviz.\n";

static const char *const help_gen =
	"usage: strata gen --rows N --out DIR [--seed S] [--zipf A] [--vocab V]\n"
	"                  [--files F] [--eval-rows N] [--threads T]\n"
	"                  [--days D [--drift X]] [--multi-hot L] [--history L]\n"
	"                  [--cross K] [--labels 2]\n"
	"\n"
	"Writes synthetic Criteo TSV files DIR/train-00000.tsv ... (and DIR/eval.tsv\n"
	"when --eval-rows > 0). Categorical values follow a Zipf power law with\n"
	"exponent A over V values per slot; labels come from a hidden logistic model\n"
	"of the features, so a learner can reach a known AUC. Deterministic for a\n"
	"seed, whatever the thread count. Defaults: --seed 1 --zipf 1.1\n"
	"--vocab 1000000 --files 1 --eval-rows 0 --threads = cores.\n"
	"\n"
	"--days D (1..365) writes D days DIR/day-000.tsv ... day-<D-1>.tsv instead\n"
	"(N rows split evenly; not with --files) whose hidden model drifts: each day\n"
	"renews the share X (0..1, default 0.1) of every weight's variance, so the\n"
	"weights of day d correlate (1-X)^(d/2) with day 0's, and the popularity of\n"
	"every fourth slot shifts by 10*X ranks a day. eval.tsv is from the last day.\n"
	"\n"
	"--multi-hot L (1..100; not with --days) makes every categorical field a list\n"
	"of 1..L keys (uniform per row and field; MLPerf's multi-hot Criteo uses up\n"
	"to 100, L = 19 averages 10) joined by '^'; the hidden model sums the list's\n"
	"weights over sqrt(length), so pooling the list beats its first key. Read\n"
	"the files with st.data.csv { sep = \"\\t\", header = false, columns = {...} }\n"
	"and list columns (docs/job-language.md).\n"
	"\n"
	"--history L (1..100; not with --days or --multi-hot) adds two columns: a\n"
	"candidate's category and a '^'-joined history of 0..L categories (64 of\n"
	"them); the click logit rises with the share of the history in the\n"
	"candidate's category, a signal only a model that compares the two finds\n"
	"(DIN's st.layer.attention; jobs/din.lua).\n"
	"\n"
	"--cross K (1..13; not with --days or --multi-hot) plants K pairwise cross\n"
	"terms in the click logit: for slot pairs (C1,C2) .. (C2K-1,C2K), the product\n"
	"of hidden per-value latents of the two fields' keys, so no single field\n"
	"holds the signal and a multiplicative cross (dcnv2) can; the columns and\n"
	"every field stay as without it, only the labels change (bench/cross.sh).\n"
	"\n"
	"--labels 2 (not with --days or --multi-hot) adds a second label column after\n"
	"the click: a conversion, only on clicked rows, from a logit that shares half\n"
	"of the click's and adds latents of fields C3, C8, C23, C24, C25 of its own\n"
	"(docs/models.md, \"Several labels\"; jobs/mtl.lua reads it).\n";

static const char *const help_inspect =
	"usage: strata inspect PATH\n"
	"\n"
	"Summarizes a checkpoint (ckpt-<step>) or export (export-<seq>-full|delta)\n"
	"directory: kind, step, job name and hash, data position and sync state; each\n"
	"file with its size and whether its checksum matches the manifest; the dense\n"
	"tensors with shapes and total parameters; each table's rows, dim and\n"
	"state_dim, and the deleted keys of deltas. PATH may also be a directory of\n"
	"checkpoints and exports (listed, with the export apply order) or a single\n"
	".rows or .safetensors file. Formats: docs/formats.md.\n"
	"Exit status: 0 intact, 1 damaged or missing files, 2 usage error.\n";

static const char *const help_predict =
	"usage: strata predict EXPORT_DIR DATA... [--out FILE] [--format criteo|libsvm]\n"
	"                      [--job JOB.lua] [--batch N] [--threads N]\n"
	"\n"
	"Scores DATA with the model exported under EXPORT_DIR: the newest full export\n"
	"(export-<seq>-full) and the deltas numbered right after it, each verified\n"
	"against its manifest and written by the same run (a delta of another run\n"
	"sharing the directory is refused). Writes one probability per line, in input\n"
	"order, to stdout or to FILE (written under a temporary name and renamed when\n"
	"complete).\n"
	"DATA are files or glob patterns, read in the order given with the training\n"
	"readers (keys hashed as in training); a bad record stops the command. Keys\n"
	"the export has no row for read as zeros, as in training eval.\n"
	"\n"
	"  --out FILE       write the scores to FILE instead of stdout\n"
	"  --format F       criteo (default: label, 13 integers, 26 categories) or libsvm\n"
	"  --job JOB.lua    read DATA as the job's eval (else train) source does: any\n"
	"                   format, a csv schema with list fields, missing keys and\n"
	"                   dense indicators (instead of --format)\n"
	"  --batch N        examples per batch (default 4096)\n"
	"  --threads N      scoring threads (default 1)\n"
	"\n"
	"Exit status: 0 ok, 1 damaged export or I/O failure, 2 usage error or bad\n"
	"input (no export, data the model cannot take, a bad record).\n";

static const char *const help_eval =
	"usage: strata eval EXPORT_DIR DATA... [--format criteo|libsvm] [--job JOB.lua]\n"
	"                   [--batch N] [--threads N]\n"
	"\n"
	"Scores DATA as `strata predict` does and prints\n"
	"  auc X  logloss Y  examples N\n"
	"(exact AUC; mean logloss with probabilities clamped to [1e-7, 1 - 1e-7]).\n"
	"Exit status: 0 ok, 1 damaged export or I/O failure, 2 usage error or bad input.\n";

static const char *const help_trace =
	"usage: strata trace summarize FILE\n"
	"\n"
	"Reads a trace written by `strata run --trace FILE` and prints, per pipeline\n"
	"stage, its threads, the batches it handled and the time its threads were\n"
	"busy (in the stage's work), idle (waiting for input: an empty input queue)\n"
	"and blocked (waiting on a full output queue), then names the bottleneck: the\n"
	"stage whose threads were each busy the longest share of the pipeline's time\n"
	"(first to last stage span). A pipeline runs at the pace of its\n"
	"slowest stage: the stages before it are blocked, the ones after it idle.\n"
	"See docs/observability.md.\n"
	"Exit status: 0 ok, 1 the file cannot be read or holds no trace, 2 usage error.\n";

static const char *const help_report =
	"usage: strata report [--metrics FILE] [--trace FILE] [--job JOB.lua |\n"
	"                     --checkpoint DIR] [--title TEXT] -o OUT.html\n"
	"\n"
	"Writes one self-contained HTML page (inline SVG charts, nothing fetched) about\n"
	"a run from the files it wrote: the --metrics JSON lines (AUC and logloss over\n"
	"examples, examples/s, each stage's batches/s and busy share, queue occupancy,\n"
	"store hit rates, rows and bytes per tier, staleness and dropped gradients per\n"
	"policy, phase ends and policy switches), the --trace file (busy / idle /\n"
	"blocked per stage as `strata trace summarize`, queue counters, events) and the\n"
	"job's configuration (the job file, or the manifest.yaml of the newest\n"
	"checkpoint under DIR). At least one of --metrics and --trace is needed; a plot\n"
	"whose series the inputs lack says \"not recorded in this run\".\n"
	"See docs/observability.md, \"The report\".\n"
	"Exit status: 0 ok, 1 an input cannot be read or is malformed (file:line is\n"
	"named), 2 usage error.\n";

static const char *const help_help =
	"usage: strata help [COMMAND | policies]\n"
	"\n"
	"  strata help policies   the sync policy table: what runs where, the\n"
	"                         capabilities, what a checkpoint holds (Markdown)\n";

void st_cli_usage(FILE *f)
{
	fprintf(f,
		"strata %s — train CTR models declared in Lua\n"
		"\n"
		"usage: strata COMMAND [ARGS]\n"
		"\n"
		"commands:\n"
		"  run JOB.lua     run a job\n"
		"  launch -n N JOB.lua  run a job as N processes on this machine\n"
		"  check JOB.lua   validate a job file\n"
		"  plan JOB.lua    print the compiled pipeline and thread placement\n"
		"  gen             write synthetic Criteo-format data\n"
		"  inspect PATH    summarize a checkpoint or export directory\n"
		"  predict DIR DATA...  score data with an export\n"
		"  eval DIR DATA...     AUC and logloss of an export on data\n"
		"  trace summarize FILE  where the time of a traced run went, per stage\n"
		"  report --metrics FILE [--trace FILE] -o OUT.html  an HTML report of a run\n"
		"  help [COMMAND]  help on a command\n"
		"\n"
		"options: --help, --version\n"
		"See docs/job-language.md for the job file reference.\n",
		ST_VERSION);
}

int st_cli_help_for(const char *cmd, FILE *f)
{
	const struct { const char *name, *text; } h[] = {
		{ "run", help_run }, { "launch", help_launch }, { "check", help_check },
		{ "plan", help_plan },
		{ "gen", help_gen }, { "help", help_help }, { "inspect", help_inspect },
		{ "predict", help_predict }, { "eval", help_eval }, { "trace", help_trace },
		{ "report", help_report },
	};
	for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) {
		if (!strcmp(cmd, h[i].name)) {
			fputs(h[i].text, f);
			return 0;
		}
	}
	return ST_ENOENT;
}

int st_cmd_help(int argc, char **argv)
{
	if (argc < 2) {
		st_cli_usage(stdout);
		return ST_EXIT_OK;
	}
	if (!strcmp(argv[1], "policies")) {
		st_policy_print_table(stdout);
		return ST_EXIT_OK;
	}
	if (st_cli_help_for(argv[1], stdout) < 0) {
		fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
		st_cli_usage(stderr);
		return ST_EXIT_USAGE;
	}
	return ST_EXIT_OK;
}

static int has_opt(const char *allowed, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = allowed; p && *p;) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		if (len == n && !strncmp(p, name, n))
			return 1;
		p = c ? c + 1 : NULL;
	}
	return 0;
}

int st_cli_parse(int argc, char **argv, const char *cmd, const char *allowed,
		 st_cli_opts_t *o)
{
	enum { O_SET = 1, O_METRICS, O_TOPO, O_VERBOSE, O_QUIET, O_NOPIN, O_DOT, O_HELP, O_RESUME,
	       O_TRACE, O_TRACE_EVENTS, O_METRICS_PORT, O_METRICS_BIND };
	static const struct option longopts[] = {
		{ "set", required_argument, NULL, O_SET },
		{ "metrics", required_argument, NULL, O_METRICS },
		{ "topology", required_argument, NULL, O_TOPO },
		{ "verbose", no_argument, NULL, O_VERBOSE },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "no-pin", no_argument, NULL, O_NOPIN },
		{ "dot", no_argument, NULL, O_DOT },
		{ "resume", optional_argument, NULL, O_RESUME },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "trace-events", required_argument, NULL, O_TRACE_EVENTS },
		{ "metrics-port", required_argument, NULL, O_METRICS_PORT },
		{ "metrics-bind", required_argument, NULL, O_METRICS_BIND },
		{ "help", no_argument, NULL, O_HELP },
		{ 0, 0, 0, 0 },
	};
	memset(o, 0, sizeof *o);
	o->sets = st_xcalloc((size_t)argc + 1, sizeof(char *));
	optind = 1;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "v", longopts, NULL)) != -1) {
		const char *name = NULL;
		for (const struct option *lo = longopts; lo->name; lo++)
			if (lo->val == c)
				name = lo->name;
		if (c == O_HELP) {
			st_cli_help_for(cmd, stdout);
			exit(ST_EXIT_OK);
		}
		if (c == 'v')
			name = "verbose", c = O_VERBOSE;
		if (c == '?' || c == ':' || !name || !has_opt(allowed, name)) {
			const char *bad = argv[optind - 1];
			if (c == ':' || (c == '?' && optopt))
				fprintf(stderr, "strata %s: option '%s' needs a value\n", cmd, bad);
			else
				fprintf(stderr, "strata %s: unknown option '%s'\n", cmd, bad);
			fprintf(stderr, "Run 'strata help %s' for usage.\n", cmd);
			return ST_EXIT_USAGE;
		}
		switch (c) {
		case O_SET: o->sets[o->n_sets++] = optarg; break;
		case O_METRICS: o->metrics_path = optarg; break;
		case O_TOPO: o->topology = optarg; break;
		case O_VERBOSE: o->verbose = 1; break;
		case O_QUIET: o->quiet = 1; break;
		case O_NOPIN: o->no_pin = 1; break;
		case O_DOT: o->dot = 1; break;
		case O_TRACE: o->trace_path = optarg; break;
		case O_TRACE_EVENTS: {
			char *end;
			o->trace_events = strtol(optarg, &end, 10);
			if (*end || end == optarg || o->trace_events < 16 ||
			    o->trace_events > 100000000) {
				fprintf(stderr, "strata %s: --trace-events takes a number of events "
					"from 16 to 100000000, got '%s'\n", cmd, optarg);
				fprintf(stderr, "Run 'strata help %s' for usage.\n", cmd);
				return ST_EXIT_USAGE;
			}
			break;
		}
		case O_METRICS_PORT: {
			char *end;
			long port = strtol(optarg, &end, 10);
			if (*end || end == optarg || port < 1 || port > 65535) {
				fprintf(stderr, "strata %s: --metrics-port takes a TCP port from 1 to "
					"65535, got '%s'\n", cmd, optarg);
				fprintf(stderr, "Run 'strata help %s' for usage.\n", cmd);
				return ST_EXIT_USAGE;
			}
			o->metrics_port = (int)port;
			break;
		}
		case O_METRICS_BIND: o->metrics_bind = optarg; break;
		case O_RESUME:
			if (optarg && strcmp(optarg, "fresh-if-damaged")) {
				fprintf(stderr, "strata %s: --resume takes no value or "
					"=fresh-if-damaged, got '%s'\n", cmd, argv[optind - 1]);
				fprintf(stderr, "Run 'strata help %s' for usage.\n", cmd);
				return ST_EXIT_USAGE;
			}
			o->resume = 1;
			o->resume_fresh = optarg != NULL;
			break;
		default: break;
		}
	}
	if (has_opt(allowed, "job")) {
		if (optind >= argc) {
			fprintf(stderr, "strata %s: missing JOB.lua\nRun 'strata help %s' for usage.\n",
				cmd, cmd);
			return ST_EXIT_USAGE;
		}
		if (optind + 1 < argc) {
			fprintf(stderr, "strata %s: unexpected argument '%s'\nRun 'strata help %s' for usage.\n",
				cmd, argv[optind + 1], cmd);
			return ST_EXIT_USAGE;
		}
		o->job_path = argv[optind];
	}
	return ST_EXIT_OK;
}

int main(int argc, char **argv)
{
	/* Only run, predict and eval multiply matrices; predict and eval pick
	 * the same kernels as run, so their scores match the job's eval. */
	if (argc >= 2 && (!strcmp(argv[1], "run") || !strcmp(argv[1], "predict") ||
			  !strcmp(argv[1], "eval")))
		st_simd_openblas_coretype(argv);
	/* STRATA_LOG is read at the first message; read it now (after the
	 * re-execution above, so only once), so that a bad value is reported
	 * by a command that logs nothing else. */
	(void)st_log_get_level();
	if (argc < 2) {
		st_cli_usage(stderr);
		return ST_EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		st_cli_usage(stdout);
		return ST_EXIT_OK;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
		printf("strata %s\n", ST_VERSION);
		return ST_EXIT_OK;
	}
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {
		{ "run", st_cmd_run }, { "launch", st_cmd_launch }, { "check", st_cmd_check },
		{ "plan", st_cmd_plan }, { "gen", st_cmd_gen },
		{ "help", st_cmd_help },
		{ "inspect", st_cmd_inspect },
		{ "predict", st_cmd_predict }, { "eval", st_cmd_eval },
		{ "trace", st_cmd_trace },
		{ "report", st_cmd_report },
	};
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
		if (!strcmp(cmd, cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "strata: unknown command '%s'\n\n", cmd);
	st_cli_usage(stderr);
	return ST_EXIT_USAGE;
}
