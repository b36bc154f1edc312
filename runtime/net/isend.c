/*
 * isend.c — sends that return before they are done (net.h,
 * st_net_send_submit / st_net_send_wait), for callers that have work to
 * do while a message goes out: a train worker's row pushes (ops/dist)
 * travel while it computes its next minibatch, instead of holding it for
 * the rendezvous of every push (the receiver's progress thread fetching
 * the data). A thin layer over the posts the collectives use (net.c,
 * st__net_post / st__net_wait): the request lives on the heap until its
 * wait, so the caller keeps a pointer, not the transport's struct.
 *
 * Ordering: a submitted send takes its place among this process's sends
 * to the same rank and channel when it is submitted (UCX matches tag
 * messages of one endpoint in posting order, and the inbox delivers a
 * sender's messages on a channel in that order, net.h), so a request sent
 * after a push that is still in flight is still served after it.
 *
 * Threads: any; one thread waits for a given request.
 */
#include <stdlib.h>

#include "runtime/err.h"
#include "runtime/net/net_internal.h"

struct st_net_send_req {
	st__net_sreq_t r;
};

int st_net_send_submit(st_net_t *net, int dst, uint32_t chan, const void *buf, size_t len,
		       st_net_send_req_t **req)
{
	*req = NULL;
	st_net_send_req_t *q = malloc(sizeof *q);
	if (!q)
		return ST_ENOMEM;
	int rc = st__net_post(net, &q->r, dst, chan, buf, len, NULL, 0);
	if (rc < 0) {
		free(q);   /* a failed post leaves nothing in flight */
		return rc;
	}
	*req = q;
	st__net_kick(net);   /* the caller goes on with other work */
	return ST_OK;
}

int st_net_send_wait(st_net_t *net, st_net_send_req_t *req)
{
	if (!req)
		return ST_OK;
	int rc = st__net_wait(net, &req->r, 1);
	free(req);
	return rc;
}
