/*
 * cfg.c — where a process learns its place in a job: rank, world size,
 * coordinator and token from the launcher's environment variables and an
 * optional cluster file (net.h lists the variables and their precedence).
 *
 * Built with or without UCX: a build without it still reads the
 * configuration, so `strata run` can say that the job is distributed and
 * that this build cannot run it. No threads, no state; getenv only.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml.h>

#include "runtime/err.h"
#include "runtime/net/net.h"
#include "runtime/net/net_internal.h"

/* Launchers in order of precedence: rank variable, size variable. */
static const char *const launchers[][2] = {
	{ "STRATA_RANK", "STRATA_WORLD_SIZE" },
	{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
	{ "PMI_RANK", "PMI_SIZE" },
	{ "SLURM_PROCID", "SLURM_NTASKS" },
};

/* Where a process finds its index among the processes of its host. */
static const char *const local_rank_vars[] = {
	"STRATA_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
};

/* A decimal int in [lo, hi], nothing else in the string: ST_OK or
 * ST_EINVAL. */
static int parse_int(const char *s, long lo, long hi, int *out)
{
	char *end;
	if (!s || !*s)
		return ST_EINVAL;
	long v = strtol(s, &end, 10);
	if (*end || v < lo || v > hi)
		return ST_EINVAL;
	*out = (int)v;
	return 0;
}

int st__net_split_hostport(const char *s, char *host, size_t hostsz, int *port)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s)
		return ST_EINVAL;
	const char *h = s;
	size_t hlen = (size_t)(colon - s);
	if (*h == '[') {   /* [v6 address]:port */
		if (hlen < 3 || h[hlen - 1] != ']')
			return ST_EINVAL;
		h++;
		hlen -= 2;
	}
	if (hlen + 1 > hostsz || parse_int(colon + 1, 1, 65535, port) < 0)
		return ST_EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = 0;
	return 0;
}

/* ---- cluster file -------------------------------------------------------------- */

void st_net_cluster_fini(st_net_cluster_t *cl)
{
	if (!cl)
		return;
	for (int i = 0; i < cl->n_hosts; i++)
		free(cl->hosts[i]);
	free(cl->hosts);
	memset(cl, 0, sizeof *cl);
}

static int cl_err(const char *path, const yaml_node_t *n, const char *what, const char *key)
{
	if (n)
		st_error("%s:%zu: %s%s%s", path, (size_t)n->start_mark.line + 1, key ? key : "",
			 key ? ": " : "", what);
	else
		st_error("%s: %s", path, what);
	return ST_EJOB;
}

static int cl_int(const char *path, const yaml_node_t *v, const char *key, long lo, long hi,
		  int *out)
{
	if (v->type != YAML_SCALAR_NODE ||
	    parse_int((const char *)v->data.scalar.value, lo, hi, out) < 0) {
		char what[96];
		snprintf(what, sizeof what, "expected an integer from %ld to %ld", lo, hi);
		return cl_err(path, v, what, key);
	}
	return ST_OK;
}

static int cl_hosts(const char *path, yaml_document_t *doc, yaml_node_t *v, st_net_cluster_t *cl)
{
	if (v->type != YAML_SEQUENCE_NODE)
		return cl_err(path, v, "expected a list of host names, e.g. [node0, node1]", "hosts");
	size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n == 0 || n > ST_NET_MAX_RANKS)
		return cl_err(path, v, "expected 1 to 4096 hosts", "hosts");
	cl->hosts = st_xcalloc(n, sizeof(char *));
	for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
		yaml_node_t *h = yaml_document_get_node(doc, *it);
		if (!h || h->type != YAML_SCALAR_NODE || !h->data.scalar.length ||
		    h->data.scalar.length > 250)
			return cl_err(path, h ? h : v, "each host must be a name or an address", "hosts");
		cl->hosts[cl->n_hosts++] = st_xstrdup((const char *)h->data.scalar.value);
	}
	return ST_OK;
}

static int cl_parse(const char *path, yaml_document_t *doc, st_net_cluster_t *cl)
{
	yaml_node_t *root = yaml_document_get_root_node(doc);
	if (!root || root->type != YAML_MAPPING_NODE)
		return cl_err(path, root, "expected a mapping with hosts, port, procs_per_host, token",
			      NULL);
	int rc = ST_OK;
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
	     rc == ST_OK && p < root->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(doc, p->key);
		yaml_node_t *v = yaml_document_get_node(doc, p->value);
		const char *key = k && k->type == YAML_SCALAR_NODE ? (const char *)k->data.scalar.value : "";
		if (!strcmp(key, "hosts") && !cl->hosts)
			rc = cl_hosts(path, doc, v, cl);
		else if (!strcmp(key, "port"))
			rc = cl_int(path, v, key, 1, 65535, &cl->port);
		else if (!strcmp(key, "procs_per_host"))
			rc = cl_int(path, v, key, 1, ST_NET_MAX_RANKS, &cl->procs_per_host);
		else if (!strcmp(key, "token") && v->type == YAML_SCALAR_NODE &&
			 v->data.scalar.length < sizeof cl->token)
			memcpy(cl->token, v->data.scalar.value, v->data.scalar.length + 1);
		else if (!strcmp(key, "token"))
			rc = cl_err(path, v, "expected a string of at most 127 bytes", key);
		else
			rc = cl_err(path, k, "unknown or repeated key (expected hosts, port, "
				    "procs_per_host, token)", key);
	}
	if (rc == ST_OK && !cl->hosts)
		rc = cl_err(path, root, "missing 'hosts' (the machines of the job, rank 0's first)",
			    NULL);
	if (rc == ST_OK && !cl->port)
		rc = cl_err(path, root, "missing 'port' (rank 0's coordinator port)", NULL);
	if (rc == ST_OK && (long)cl->n_hosts * cl->procs_per_host > ST_NET_MAX_RANKS)
		rc = cl_err(path, root, "hosts x procs_per_host exceeds 4096 ranks", NULL);
	return rc;
}

int st_net_cluster_load(st_net_cluster_t *cl, const char *path)
{
	memset(cl, 0, sizeof *cl);
	cl->procs_per_host = 1;
	FILE *f = fopen(path, "rb");
	if (!f) {
		st_error("cannot read cluster file %s: %s", path, strerror(errno));
		return ST_EJOB;
	}
	yaml_parser_t parser;
	yaml_document_t doc;
	int rc;
	if (!yaml_parser_initialize(&parser))
		st_die("cluster file: out of memory");
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc)) {
		st_error("%s:%zu: not valid YAML: %s", path, (size_t)parser.problem_mark.line + 1,
			 parser.problem ? parser.problem : "parse error");
		rc = ST_EJOB;
	} else {
		rc = cl_parse(path, &doc, cl);
		yaml_document_delete(&doc);
	}
	yaml_parser_delete(&parser);
	fclose(f);
	if (rc < 0)
		st_net_cluster_fini(cl);
	return rc;
}

/* 1 if host (a name or a numeric address) names this machine. */
static int is_me(const char *host, const char *me)
{
	size_t shortlen = strcspn(me, ".");
	if (!strcmp(host, me) || (strlen(host) == shortlen && !strncmp(host, me, shortlen)))
		return 1;
	unsigned char want[16];
	int fam = inet_pton(AF_INET, host, want) == 1 ? AF_INET
		: inet_pton(AF_INET6, host, want) == 1 ? AF_INET6 : 0;
	struct ifaddrs *ifs;
	if (!fam || getifaddrs(&ifs) < 0)
		return 0;
	int found = 0;
	for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != fam)
			continue;
		const void *a = fam == AF_INET
			? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
			: (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
		found = !memcmp(a, want, fam == AF_INET ? 4 : 16);
	}
	freeifaddrs(ifs);
	return found;
}

int st_net_cluster_self(const st_net_cluster_t *cl)
{
	char me[256] = "";
	gethostname(me, sizeof me - 1);
	for (int i = 0; i < cl->n_hosts; i++)
		if (is_me(cl->hosts[i], me))
			return i;
	return ST_ENOENT;
}

/* ---- the job's interface ------------------------------------------------------------ */

/* The address of ifaddr entry i, and its length; NULL for another family. */
static const void *if_addr(const struct ifaddrs *i, int fam, size_t *len)
{
	if (!i->ifa_addr || i->ifa_addr->sa_family != fam)
		return NULL;
	*len = fam == AF_INET ? 4 : 16;
	return fam == AF_INET ? (const void *)&((const struct sockaddr_in *)i->ifa_addr)->sin_addr
		: (const void *)&((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
}

int st__net_job_iface(const char *coordinator, char *name, size_t n)
{
	char host[256];
	int port;
	int rc = st__net_split_hostport(coordinator, host, sizeof host, &port);
	if (rc < 0)
		return rc;
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM }, *res;
	if (getaddrinfo(host, ps, &hints, &res) != 0)
		return ST_ENOENT;
	/* A connected UDP socket sends nothing: it only asks the kernel for
	 * the route, whose source address is ours. */
	struct sockaddr_storage me;
	socklen_t ml = 0;
	for (struct addrinfo *a = res; a && !ml; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		ml = sizeof me;
		if (fd < 0 || connect(fd, a->ai_addr, a->ai_addrlen) < 0 ||
		    getsockname(fd, (struct sockaddr *)&me, &ml) < 0)
			ml = 0;
		if (fd >= 0)
			close(fd);
	}
	freeaddrinfo(res);
	struct ifaddrs *ifs;
	if (!ml || getifaddrs(&ifs) < 0)
		return ST_ENOENT;
	struct ifaddrs self = { .ifa_addr = (struct sockaddr *)&me };
	size_t len = 0, l;
	const void *want = if_addr(&self, me.ss_family, &len);
	for (struct ifaddrs *i = ifs; i && want; i = i->ifa_next) {
		const void *a = if_addr(i, me.ss_family, &l);
		if (a && l == len && !memcmp(a, want, len) && strlen(i->ifa_name) < n) {
			snprintf(name, n, "%s", i->ifa_name);
			freeifaddrs(ifs);
			return 0;
		}
	}
	freeifaddrs(ifs);
	return ST_ENOENT;
}

/* ---- the environment ------------------------------------------------------------- */

/* The rank of a process started by hand (or by `strata launch --cluster`)
 * on a host of the cluster file: host index × procs_per_host + local rank. */
static int rank_from_host(const st_net_cluster_t *cl, const char *path, int *rank)
{
	int h = st_net_cluster_self(cl);
	if (h < 0) {
		char me[256] = "";
		gethostname(me, sizeof me - 1);
		st_error("%s: this machine (%s) is not one of the hosts, and no launcher variable "
			 "(STRATA_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID) gives its rank",
			 path, me);
		return ST_EJOB;
	}
	int local = 0, found = 0;
	for (size_t i = 0; i < sizeof local_rank_vars / sizeof *local_rank_vars && !found; i++) {
		const char *v = getenv(local_rank_vars[i]);
		if (!v)
			continue;
		found = 1;
		if (parse_int(v, 0, cl->procs_per_host - 1, &local) < 0) {
			st_error("%s=%s: expected a local rank from 0 to %d (procs_per_host in %s)",
				 local_rank_vars[i], v, cl->procs_per_host - 1, path);
			return ST_EJOB;
		}
	}
	if (!found && cl->procs_per_host > 1) {
		st_error("%s has procs_per_host %d: set STRATA_LOCAL_RANK (0..%d) for each process "
			 "of this host, or start them with `strata launch --cluster %s`", path,
			 cl->procs_per_host, cl->procs_per_host - 1, path);
		return ST_EJOB;
	}
	*rank = h * cl->procs_per_host + local;
	return ST_OK;
}

/* Applies a cluster file to cfg; *size is the file's world size. */
static int apply_cluster(st_net_cfg_t *cfg, const char *path, int have_rank, int *size)
{
	st_net_cluster_t cl;
	int rc = st_net_cluster_load(&cl, path);
	if (rc < 0)
		return rc;
	*size = cl.n_hosts * cl.procs_per_host;
	snprintf(cfg->coordinator, sizeof cfg->coordinator, strchr(cl.hosts[0], ':') ? "[%s]:%d"
		 : "%s:%d", cl.hosts[0], cl.port);
	memcpy(cfg->token, cl.token, sizeof cfg->token);
	if (!have_rank) {
		rc = rank_from_host(&cl, path, &cfg->rank);
		const char *base = strrchr(path, '/');
		snprintf(cfg->source, sizeof cfg->source, "cluster file %.40s", base ? base + 1 : path);
	}
	st_net_cluster_fini(&cl);
	return rc;
}

int st_net_cfg_from_env(st_net_cfg_t *cfg, const char *cluster_file)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->size = 1;
	cfg->timeout_s = 60;
	const char *tmo = getenv("STRATA_NET_TIMEOUT");
	if (tmo) {
		char *end;
		double t = strtod(tmo, &end);
		if (*end || !(t > 0 && t <= 1e6)) {
			st_error("STRATA_NET_TIMEOUT=%s: expected seconds, a number above 0", tmo);
			return ST_EJOB;
		}
		cfg->timeout_s = t;
	}
	const char *rank_var = NULL, *size_var = NULL;
	for (size_t i = 0; i < sizeof launchers / sizeof *launchers && !rank_var; i++)
		if (getenv(launchers[i][0]))
			rank_var = launchers[i][0], size_var = launchers[i][1];
	if (rank_var) {
		if (parse_int(getenv(rank_var), 0, ST_NET_MAX_RANKS - 1, &cfg->rank) < 0) {
			st_error("%s=%s: expected a rank from 0 to %d", rank_var, getenv(rank_var),
				 ST_NET_MAX_RANKS - 1);
			return ST_EJOB;
		}
		snprintf(cfg->source, sizeof cfg->source, "%s", rank_var);
	}
	int size = 0, file_size = 0;
	const char *sz = rank_var ? getenv(size_var) : NULL;
	if (sz && parse_int(sz, 1, ST_NET_MAX_RANKS, &size) < 0) {
		st_error("%s=%s: expected a world size from 1 to %d", size_var, sz, ST_NET_MAX_RANKS);
		return ST_EJOB;
	}
	const char *file = cluster_file ? cluster_file : getenv("STRATA_CLUSTER");
	if (file && *file) {
		int rc = apply_cluster(cfg, file, rank_var != NULL, &file_size);
		if (rc < 0)
			return rc;
		if (size && size != file_size) {
			st_error("%s=%d but cluster file %s describes %d processes (hosts x "
				 "procs_per_host)", size_var, size, file, file_size);
			return ST_EJOB;
		}
		size = file_size;
	} else if (!rank_var) {
		if (getenv("STRATA_COORDINATOR")) {
			st_error("STRATA_COORDINATOR is set but no rank is: set STRATA_RANK and "
				 "STRATA_WORLD_SIZE (or start the job with a launcher)");
			return ST_EJOB;
		}
		return 0;   /* not distributed */
	}
	if (!size) {
		st_error("%s is set but %s is not: the world size is unknown", rank_var, size_var);
		return ST_EJOB;
	}
	cfg->size = size;
	if (cfg->rank >= size) {
		st_error("rank %d (from %s) is out of range: the world size is %d", cfg->rank,
			 cfg->source, size);
		return ST_EJOB;
	}
	const char *coord = getenv("STRATA_COORDINATOR"), *tok = getenv("STRATA_TOKEN");
	if (coord)
		snprintf(cfg->coordinator, sizeof cfg->coordinator, "%s", coord);
	if (tok && strlen(tok) >= sizeof cfg->token) {
		st_error("STRATA_TOKEN is longer than %zu bytes", sizeof cfg->token - 1);
		return ST_EJOB;
	}
	if (tok)
		snprintf(cfg->token, sizeof cfg->token, "%s", tok);
	if (size == 1)
		return 0;
	char host[256];
	int port;
	if (!cfg->coordinator[0]) {
		st_error("rank %d of %d (from %s) has no coordinator: set STRATA_COORDINATOR=host:port "
			 "(rank 0's address) or STRATA_CLUSTER=FILE.yaml", cfg->rank, size, cfg->source);
		return ST_EJOB;
	}
	if (st__net_split_hostport(cfg->coordinator, host, sizeof host, &port) < 0) {
		st_error("coordinator '%s': expected host:port (port 1-65535; [v6addr]:port)",
			 cfg->coordinator);
		return ST_EJOB;
	}
	return 1;
}
