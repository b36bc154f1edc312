/*
 * prom_http.h — the live metrics endpoint of a run: GET /metrics answers
 * the Prometheus text exposition (ops/metrics/prom.h) of the run's metrics
 * and pipeline stages, served by libmicrohttpd on its own thread.
 *
 * The server outlives the passes of a run: the caller attaches each pass's
 * metrics and graph when the pass begins and detaches them before the
 * graph is freed; the stage counters of the passes that ended are kept and
 * added to the running pass's, so a counter never goes back.
 */
#ifndef ST_PROM_HTTP_H
#define ST_PROM_HTTP_H

#include "runtime/graph.h"
#include "runtime/metrics.h"

typedef struct st_prom_http st_prom_http_t;

/* Whether this build has the endpoint (libmicrohttpd was found). */
int st_prom_http_available(void);

/*
 * Listens on addr:port (addr: a numeric IPv4 or IPv6 address, e.g.
 * "127.0.0.1"; port 1..65535) and starts serving. Logs what failed, with
 * the address and port, and returns: ST_OK and *out; -ENOTSUP when built
 * without libmicrohttpd; -EADDRINUSE when the port is taken; ST_EINVAL for
 * an address that is not numeric; another -errno. Call it before anything
 * is trained, so a taken port stops the run at once. The server's thread
 * blocks SIGINT and SIGTERM. Caller stops it with st_prom_http_stop.
 */
int st_prom_http_start(st_prom_http_t **out, const char *addr, int port);

/* From now on scrapes read m (the run's metrics; it must outlive the
 * server) and g (the running pass's graph; NULL: none). Thread-safe. */
void st_prom_http_attach(st_prom_http_t *s, st_metrics_t *m, st_graph_t *g);

/* The pass's graph is about to be freed: keeps its stage counters and
 * stops reading it. Returns once no scrape reads g. Thread-safe. */
void st_prom_http_detach_graph(st_prom_http_t *s);

/* Stops serving (waits for a scrape in progress), closes the socket and
 * frees s. NULL-safe. */
void st_prom_http_stop(st_prom_http_t *s);

#endif
