/*
 * dist_msg.c — the two-phase commit's messages and rank 0's record of the
 * world (dist_msg.h).
 */
#include "ops/train/dist_msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/err.h"

int st__ck_send(st_net_t *net, int dst, uint32_t ch, const ck_msg_t *m,
		    const ck_file_t *f, size_t nf)
{
	int rc = st_net_send2(net, dst, ch, m, sizeof *m, f, sizeof *f * nf);
	if (rc < 0)
		st_error("checkpoint: cannot reach rank %d: %s", dst, st_strerror(rc));
	return rc;
}

/* Documented in dist_msg.h, as every function here. */
int st__ck_try_recv(st_net_t *net, int src, uint32_t ch, double timeout_s, ck_msg_t **out)
{
	for (;;) {
		void *buf;
		size_t len;
		int from;
		int rc = st_net_recv(net, src, ch, &buf, &len, &from, timeout_s);
		if (rc == ST_EAGAIN && !st_net_alive(net, src))
			rc = ST_EPEER;
		if (rc == ST_EAGAIN)
			return rc;
		if (rc < 0) {
			st_error("checkpoint: waiting for rank %d: %s", src, st_strerror(rc));
			return rc;
		}
		ck_msg_t *m = buf;
		if (len >= sizeof *m &&
		    len == sizeof *m + sizeof(ck_file_t) * (size_t)m->n_files +
				   sizeof(float) * (size_t)m->n_floats) {
			*out = m;
			return ST_OK;
		}
		free(buf);   /* malformed: dropped */
	}
}

int st__ck_recv_any(st_net_t *net, int src, uint32_t ch, ck_msg_t **out)
{
	for (;;) {
		int rc = st__ck_try_recv(net, src, ch, 0.5, out);
		if (rc != ST_EAGAIN)
			return rc;
	}
}

/* The next message of `type` and `step` (any step: -1) from src; others
 * are leftovers of an abandoned checkpoint and go. */
int st__ck_recv(st_net_t *net, int src, uint32_t ch, uint32_t type, int64_t step,
		    ck_msg_t **out)
{
	for (;;) {
		ck_msg_t *m;
		int rc = st__ck_recv_any(net, src, ch, &m);
		if (rc < 0)
			return rc;
		if (m->type == type && (step < 0 || m->step == step)) {
			*out = m;
			return ST_OK;
		}
		free(m);
	}
}



void st__ck_world_free(world_t *wd)
{
	for (size_t i = 0; i < wd->n_names; i++)
		free(wd->names[i]);
	free(wd->names);
	for (size_t i = 0; i < wd->m.n_parts; i++)
		free(wd->m.parts[i].files);
	free(wd->m.parts);
}

int st__ck_world_add(world_t *wd, int rank, const ck_file_t *f, size_t nf)
{
	st_manifest_part_t *pt = &wd->m.parts[rank];
	pt->rank = rank;
	pt->files = calloc(nf ? nf : 1, sizeof *pt->files);
	char **nn = realloc(wd->names, sizeof *nn * (wd->n_names + nf + 1));
	if (!pt->files || !nn)
		return ST_ENOMEM;
	wd->names = nn;
	for (size_t i = 0; i < nf; i++) {
		char *n = strndup(f[i].name, CK_NAME_MAX - 1);
		if (!n)
			return ST_ENOMEM;
		wd->names[wd->n_names++] = n;
		pt->files[pt->n_files++] = n;
	}
	return ST_OK;
}

/* The files this rank wrote, as a message's list (malloc'ed). */
ck_file_t *st__ck_files_of(st_ckpt_writer_t *w, size_t *nf)
{
	size_t n;
	const st_manifest_file_t *f = st_ckpt_writer_files(w, &n);
	ck_file_t *out = calloc(n ? n : 1, sizeof *out);
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		snprintf(out[i].name, sizeof out[i].name, "%s", f[i].name);
		out[i].bytes = f[i].bytes;
		out[i].xxh3 = f[i].xxh3;
	}
	*nf = n;
	return out;
}
