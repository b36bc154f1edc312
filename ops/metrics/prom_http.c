/*
 * prom_http.c — the live metrics endpoint (prom_http.h) on libmicrohttpd.
 *
 * Threads: libmicrohttpd's one internal polling thread (MHD_USE_INTERNAL_
 * POLLING_THREAD, named "st-prom-0" at its first request) answers every
 * request; the run's thread attaches and detaches passes. The listening
 * socket is made here, not by libmicrohttpd, so that a taken port or a
 * bad address is reported with its errno before the run trains anything
 * (MHD_start_daemon only says NULL).
 *
 * What a scrape reads: the metrics through st_metrics_foreach_desc (one
 * snapshot under the metrics' own mutex) and the stage stats through
 * st_graph_stage_stats, the same calls the progress reporter makes while
 * stages run. mu guards the graph pointer and the kept totals, so that
 * st_prom_http_detach_graph cannot return while a scrape reads the graph.
 *
 * Lock order: st_prom_http.mu, then the metrics' mutex (a scrape holds mu
 * only while it copies stage stats; it formats after dropping it).
 */
#include "ops/metrics/prom_http.h"

#include "ops/metrics/prom.h"
#include "runtime/err.h"
#include "st_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if ST_HAVE_MICROHTTPD

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#define STAGES_MAX 32
#define STAGE_NAME_MAX 32

/* One stage as a scrape shows it; names copied (the graph's go away). */
struct stage {
	char name[STAGE_NAME_MAX];
	st_stage_stats_t s;
};

struct st_prom_http {
	struct MHD_Daemon *d;
	pthread_mutex_t mu;
	st_metrics_t *m;
	st_graph_t *g;
	struct stage kept[STAGES_MAX];   /* counters of the passes that ended */
	int nkept;
};

int st_prom_http_available(void)
{
	return 1;
}

static struct stage *kept_of(st_prom_http_t *s, const char *name)
{
	for (int i = 0; i < s->nkept; i++)
		if (!strcmp(s->kept[i].name, name))
			return &s->kept[i];
	if (s->nkept == STAGES_MAX)
		return NULL;
	struct stage *k = &s->kept[s->nkept++];
	memset(k, 0, sizeof *k);
	snprintf(k->name, sizeof k->name, "%s", name);
	return k;
}

/* The stages to show, in out[] (STAGES_MAX): the kept ones with the
 * running pass's counters added and its gauges. Called with mu held. */
static int stages_locked(st_prom_http_t *s, struct stage *out)
{
	int n = s->nkept;
	memcpy(out, s->kept, sizeof out[0] * (size_t)n);
	for (int i = 0; i < n; i++) {
		out[i].s.queue_depth = 0;   /* an ended pass has no queues */
		out[i].s.queue_cap = 0;
	}
	int ng = s->g ? st_graph_nstages(s->g) : 0;
	for (int i = 0; i < ng; i++) {
		st_stage_stats_t st;
		st_graph_stage_stats(s->g, i, &st);
		int k = 0;
		while (k < n && strcmp(out[k].name, st.name))
			k++;
		if (k == n) {
			if (n == STAGES_MAX)
				continue;
			memset(&out[n], 0, sizeof out[n]);
			snprintf(out[n].name, sizeof out[n].name, "%s", st.name);
			n++;
		}
		out[k].s.n_threads = st.n_threads;
		out[k].s.items += st.items;
		out[k].s.busy_ns += st.busy_ns;
		out[k].s.wait_ns += st.wait_ns;
		out[k].s.queue_depth = st.queue_depth;
		out[k].s.queue_cap = st.queue_cap;
	}
	for (int i = 0; i < n; i++)
		out[i].s.name = out[i].name;
	return n;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
								 MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	static __thread int named;
	st_prom_http_t *s = cls;
	(void)version;
	(void)upload;
	(void)con_cls;
	if (!named) {
		pthread_setname_np(pthread_self(), "st-prom-0");
		named = 1;
	}
	if (*upload_size)
		return MHD_NO;   /* a GET has no body */
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
	if (strcmp(url, "/metrics"))
		return reply(c, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n");

	struct stage st[STAGES_MAX];
	st_stage_stats_t ss[STAGES_MAX];
	pthread_mutex_lock(&s->mu);
	st_metrics_t *m = s->m;
	int n = stages_locked(s, st);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < n; i++) {
		ss[i] = st[i].s;
		ss[i].name = st[i].name;
	}
	char *text;
	size_t len;
	if (st_prom_format(m, ss, n, &text, &len) < 0)
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	struct MHD_Response *r = MHD_create_response_from_buffer(len, text,
								 MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* A listening socket on addr:port, or a negative code (logged). */
static int listen_on(const char *addr, int port)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	int g = getaddrinfo(addr, ps, &hints, &ai);
	if (g != 0) {
		st_error("--metrics-bind: '%s' is not a numeric IPv4 or IPv6 address (%s); "
			 "e.g. 127.0.0.1, 0.0.0.0 or ::", addr, gai_strerror(g));
		return ST_EINVAL;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1, rc = ST_OK;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
		rc = -errno;
		if (rc == -EADDRINUSE)
			st_error("cannot serve metrics on %s port %d: the port is in use (another "
				 "process listens on it): choose another --metrics-port", addr, port);
		else
			st_error("cannot serve metrics on %s port %d: %s", addr, port,
				 strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	freeaddrinfo(ai);
	return rc < 0 ? rc : fd;
}

int st_prom_http_start(st_prom_http_t **out, const char *addr, int port)
{
	*out = NULL;
	if (port < 1 || port > 65535) {
		st_error("--metrics-port: %d is not a TCP port (1..65535)", port);
		return ST_EINVAL;
	}
	int fd = listen_on(addr, port);
	if (fd < 0)
		return fd;
	st_prom_http_t *s = calloc(1, sizeof *s);
	if (!s) {
		close(fd);
		return ST_ENOMEM;
	}
	pthread_mutex_init(&s->mu, NULL);
	/* The daemon's thread inherits this mask: ^C is for the run's handler
	 * (cli/cmd_run.c), never this thread's business. */
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, &old);
	s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
				NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!s->d) {
		st_error("cannot serve metrics on %s port %d: libmicrohttpd did not start", addr,
			 port);
		close(fd);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return ST_EIO;
	}
	*out = s;
	return ST_OK;
}

void st_prom_http_attach(st_prom_http_t *s, st_metrics_t *m, st_graph_t *g)
{
	pthread_mutex_lock(&s->mu);
	s->m = m;
	s->g = g;
	pthread_mutex_unlock(&s->mu);
}

void st_prom_http_detach_graph(st_prom_http_t *s)
{
	pthread_mutex_lock(&s->mu);
	int ng = s->g ? st_graph_nstages(s->g) : 0;
	for (int i = 0; i < ng; i++) {
		st_stage_stats_t st;
		st_graph_stage_stats(s->g, i, &st);
		struct stage *k = kept_of(s, st.name);
		if (!k)
			continue;
		k->s.n_threads = st.n_threads;
		k->s.items += st.items;
		k->s.busy_ns += st.busy_ns;
		k->s.wait_ns += st.wait_ns;
	}
	s->g = NULL;
	pthread_mutex_unlock(&s->mu);
}

void st_prom_http_stop(st_prom_http_t *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);   /* joins its thread, closes the socket */
	pthread_mutex_destroy(&s->mu);
	free(s);
}

#else /* !ST_HAVE_MICROHTTPD */

struct st_prom_http {
	int unused;
};

int st_prom_http_available(void)
{
	return 0;
}

int st_prom_http_start(st_prom_http_t **out, const char *addr, int port)
{
	(void)addr;
	(void)port;
	*out = NULL;
	st_error("--metrics-port: this strata was built without libmicrohttpd, so it cannot "
		 "serve metrics (install libmicrohttpd-dev, e.g. scripts/install-deps.sh, and "
		 "rebuild)");
	return -ENOTSUP;
}

void st_prom_http_attach(st_prom_http_t *s, st_metrics_t *m, st_graph_t *g)
{
	(void)s;
	(void)m;
	(void)g;
}

void st_prom_http_detach_graph(st_prom_http_t *s)
{
	(void)s;
}

void st_prom_http_stop(st_prom_http_t *s)
{
	(void)s;
}

#endif
