/*
 * topo.c — hardware topology (hwloc 2.x) and placement of stage threads.
 *
 * Loading: this machine, or an hwloc XML file (a plan for another machine).
 * I/O discovery is set to HWLOC_TYPE_FILTER_KEEP_IMPORTANT so that OS
 * devices (cuda0, nvme0n1, eth0) appear. Each device gets a class ("gpu",
 * "disk", "net") and a locality: the cpuset of its first non-I/O ancestor,
 * and the package that contains it (-1 when the device hangs off the whole
 * machine, as on single-socket VMs).
 *
 * Placement (st_topo_place) works on physical cores and gives each thread
 * the first PU of a core, so two threads share a core only when there are
 * more threads than cores:
 *   1. Requests with a `near` are served first, in order. A class picks, among
 *      its devices, the one whose locality has the most free cores (ties: the
 *      lowest device index), so "disk" stages spread over the SSD sockets. A
 *      device name picks that device. Threads take free cores of the locality
 *      first, then free cores elsewhere (the device's package first), and when
 *      no core is free anywhere, the least-used core (locality first).
 *   2. Requests without a preference then take the remaining free cores,
 *      first in the package of the neighbouring stage (the one before it,
 *      else the one after it), then round-robin across packages, then the
 *      least-used cores.
 * GPU threads: st_topo_pci_cpus maps a GPU's PCI bus id (from CUDA) to the
 * cores of its NUMA node through hwloc's PCI objects, with no CUDA call, so
 * it works (and finds nothing) on machines without the GPU.
 * A class with no device on this machine (no GPU on a laptop) is not an
 * error: the request is placed like an automatic one, so the same job file
 * runs everywhere. An unknown device name is an error (a typo would
 * otherwise silently lose locality).
 *
 * Threads: a topology is read-only after st_topo_load; every function except
 * st_topo_destroy may be called from any thread. Placement keeps its core
 * usage counts on the stack of the call. No locks.
 */
#include "topo.h"

#include "err.h"

#include <hwloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum dev_class { DEV_GPU, DEV_DISK, DEV_NET, DEV_NCLASSES };

static const char *class_names[DEV_NCLASSES] = { "gpu", "disk", "net" };

struct device {
	char name[64];
	enum dev_class cls;
	int package;            /* logical package index, -1 if machine-wide */
	hwloc_bitmap_t local;   /* cpuset of the first non-I/O ancestor */
};

struct core {
	int pu;                 /* OS index of the first PU */
	int package;            /* logical package index */
};

struct st_topo {
	hwloc_topology_t h;
	int thissystem;
	int npackages;          /* >= 1 (a machine without Package objects counts as one) */
	int ncores;
	struct core *cores;
	int ndevs;
	struct device *devs;
};

/* Package of a cpuset: the package containing it entirely, else -1. */
static int package_of(hwloc_topology_t h, hwloc_const_cpuset_t set)
{
	if (hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PACKAGE) <= 0)
		return 0;
	hwloc_obj_t o = hwloc_get_obj_covering_cpuset(h, set);
	while (o && o->type != HWLOC_OBJ_PACKAGE)
		o = o->parent;
	return o ? (int)o->logical_index : -1;
}

static void add_device(st_topo_t *t, const char *name, enum dev_class cls, hwloc_obj_t o)
{
	struct device *d = realloc(t->devs, sizeof *d * (size_t)(t->ndevs + 1));
	if (!d)
		st_die("topo: out of memory listing devices");
	t->devs = d;
	d = &t->devs[t->ndevs++];
	memset(d, 0, sizeof *d);
	snprintf(d->name, sizeof d->name, "%s", name);
	d->cls = cls;
	hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, o);
	d->local = hwloc_bitmap_dup(anc ? anc->cpuset
				    : hwloc_topology_get_topology_cpuset(t->h));
	if (!d->local)
		st_die("topo: out of memory listing devices");
	d->package = package_of(t->h, d->local);
}

static int is_gpu_osdev(hwloc_obj_t o)
{
	return o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU ||
	       o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC;
}

static void list_devices(st_topo_t *t)
{
	hwloc_obj_t o = NULL;
	while ((o = hwloc_get_next_osdev(t->h, o)) != NULL) {
		if (!o->name)
			continue;
		switch (o->attr->osdev.type) {
		case HWLOC_OBJ_OSDEV_GPU:
		case HWLOC_OBJ_OSDEV_COPROC:
			add_device(t, o->name, DEV_GPU, o);
			break;
		case HWLOC_OBJ_OSDEV_BLOCK:
			add_device(t, o->name, DEV_DISK, o);
			break;
		case HWLOC_OBJ_OSDEV_NETWORK:
		case HWLOC_OBJ_OSDEV_OPENFABRICS:
			add_device(t, o->name, DEV_NET, o);
			break;
		default:
			break;
		}
	}
	/* A display/3D controller whose driver exposes no OS device (no CUDA
	 * runtime installed, say) is still a GPU for placement purposes. */
	o = NULL;
	while ((o = hwloc_get_next_pcidev(t->h, o)) != NULL) {
		unsigned cls = o->attr->pcidev.class_id;
		if (cls != 0x0300 && cls != 0x0302)
			continue;
		int has_osdev = 0;
		for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
			if (c->type == HWLOC_OBJ_OS_DEVICE && is_gpu_osdev(c))
				has_osdev = 1;
		if (has_osdev)
			continue;
		char name[64];
		snprintf(name, sizeof name, "pci%04x:%02x:%02x.%01x",
			 o->attr->pcidev.domain, o->attr->pcidev.bus,
			 o->attr->pcidev.dev, o->attr->pcidev.func);
		add_device(t, name, DEV_GPU, o);
	}
}

static void list_cores(st_topo_t *t)
{
	/* Some virtual machines expose PUs without Core objects: then each PU
	 * is its own core. */
	hwloc_obj_type_t type = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE) > 0
		? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
	int n = hwloc_get_nbobjs_by_type(t->h, type);
	t->cores = st_xcalloc((size_t)(n > 0 ? n : 1), sizeof *t->cores);
	t->ncores = 0;
	for (int i = 0; i < n; i++) {
		hwloc_obj_t o = hwloc_get_obj_by_type(t->h, type, (unsigned)i);
		int pu = hwloc_bitmap_first(o->cpuset);
		if (pu < 0)
			continue;
		t->cores[t->ncores].pu = pu;
		int pkg = package_of(t->h, o->cpuset);
		t->cores[t->ncores].package = pkg < 0 ? 0 : pkg;
		t->ncores++;
	}
	int np = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PACKAGE);
	t->npackages = np > 0 ? np : 1;
}

int st_topo_load(st_topo_t **out, const char *xml_path)
{
	*out = NULL;
	st_topo_t *t = st_xcalloc(1, sizeof *t);
	if (hwloc_topology_init(&t->h) < 0) {
		free(t);
		return ST_ENOMEM;
	}
	hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (xml_path) {
		/* hwloc only says "Invalid argument" for a missing file. */
		if (access(xml_path, R_OK) != 0) {
			st_error("topo: cannot read topology file %s: %s", xml_path,
				 strerror(errno));
			hwloc_topology_destroy(t->h);
			free(t);
			return ST_EIO;
		}
		if (hwloc_topology_set_xml(t->h, xml_path) < 0) {
			st_error("topo: %s: not an hwloc XML topology", xml_path);
			hwloc_topology_destroy(t->h);
			free(t);
			return ST_EIO;
		}
	}
	if (hwloc_topology_load(t->h) < 0) {
		st_error("topo: cannot load the topology of %s: %s",
			 xml_path ? xml_path : "this machine", strerror(errno));
		hwloc_topology_destroy(t->h);
		free(t);
		return xml_path ? ST_EIO : ST_EINVAL;
	}
	t->thissystem = hwloc_topology_is_thissystem(t->h);
	list_cores(t);
	list_devices(t);
	if (t->ncores == 0) {
		st_error("topo: %s has no usable cores", xml_path ? xml_path : "this machine");
		st_topo_destroy(t);
		return ST_EINVAL;
	}
	*out = t;
	return ST_OK;
}

void st_topo_destroy(st_topo_t *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->ndevs; i++)
		hwloc_bitmap_free(t->devs[i].local);
	free(t->devs);
	free(t->cores);
	hwloc_topology_destroy(t->h);
	free(t);
}

int st_topo_ncores(const st_topo_t *t)
{
	return t->ncores;
}

int st_topo_npackages(const st_topo_t *t)
{
	return t->npackages;
}

/* ------------------------------------------------------------------ */
/* Placement                                                           */

struct plan {
	const st_topo_t *t;
	int *used;              /* threads placed on each core */
	int rr_package;         /* next package for automatic requests */
};

static int in_local(const struct plan *p, const struct device *d, int c)
{
	return d && hwloc_bitmap_isset(d->local, (unsigned)p->t->cores[c].pu);
}

static int free_cores_in(const struct plan *p, const struct device *d)
{
	int n = 0;
	for (int c = 0; c < p->t->ncores; c++)
		if (!p->used[c] && in_local(p, d, c))
			n++;
	return n;
}

/* Least-used core; ties go to the device's locality, then its package, then
 * the lowest index. Repeated calls therefore cycle over the preferred cores
 * before reusing any of them again (round-robin). */
static int pick_least_used(const struct plan *p, const struct device *d)
{
	int best = -1, best_rank = 0;
	for (int c = 0; c < p->t->ncores; c++) {
		int rank = p->used[c] * 4;
		if (d && !in_local(p, d, c))
			rank += d->package >= 0 && p->t->cores[c].package == d->package ? 1 : 2;
		if (best < 0 || rank < best_rank) {
			best = c;
			best_rank = rank;
		}
	}
	return best;
}

static int pick_near(const struct plan *p, const struct device *d)
{
	for (int c = 0; c < p->t->ncores; c++)
		if (!p->used[c] && in_local(p, d, c))
			return c;
	for (int c = 0; c < p->t->ncores; c++)
		if (!p->used[c] && d->package >= 0 && p->t->cores[c].package == d->package)
			return c;
	for (int c = 0; c < p->t->ncores; c++)
		if (!p->used[c])
			return c;
	return pick_least_used(p, d);
}

/* A free core of package pref (the package of a neighbouring stage, so
 * that batches handed between the two stay in one NUMA node) if it has
 * one; else the next package round-robin with a free core; else the least
 * used core. */
static int pick_auto(struct plan *p, int pref)
{
	const st_topo_t *t = p->t;
	if (pref >= 0)
		for (int c = 0; c < t->ncores; c++)
			if (!p->used[c] && t->cores[c].package == pref)
				return c;
	for (int k = 0; k < t->npackages; k++) {
		int pkg = (p->rr_package + k) % t->npackages;
		for (int c = 0; c < t->ncores; c++) {
			if (!p->used[c] && t->cores[c].package == pkg) {
				p->rr_package = (pkg + 1) % t->npackages;
				return c;
			}
		}
	}
	return pick_least_used(p, NULL);
}

/* The index of device class `near`, or ST_ENOENT. */
static int class_of(const char *near)
{
	for (int i = 0; i < DEV_NCLASSES; i++)
		if (!strcmp(near, class_names[i]))
			return i;
	return ST_ENOENT;
}

static void log_unknown_device(const st_topo_t *t, const st_place_req_t *r)
{
	char known[1024];
	size_t len = 0;
	known[0] = '\0';
	for (int i = 0; i < t->ndevs && len < sizeof known - 80; i++)
		len += (size_t)snprintf(known + len, sizeof known - len, "%s%s",
					i ? ", " : "", t->devs[i].name);
	st_error("topo: stage %s: near = \"%s\" is not a device of this machine; "
		 "use a class (gpu, disk, net), \"auto\", or one of: %s",
		 r->stage ? r->stage : "?", r->near, len ? known : "(no devices found)");
}

static void place_threads(struct plan *p, st_place_req_t *r, const struct device *d,
			  int pref)
{
	int pkg = -2;
	for (int i = 0; i < r->n_threads; i++) {
		int c = d ? pick_near(p, d) : pick_auto(p, pref);
		p->used[c]++;
		r->cpus[i] = p->t->cores[c].pu;
		int cp = p->t->cores[c].package;
		pkg = pkg == -2 ? cp : (pkg == cp ? pkg : -1);
	}
	for (int i = r->n_threads; i < (int)(sizeof r->cpus / sizeof r->cpus[0]); i++)
		r->cpus[i] = -1;
	if (d) {
		snprintf(r->device, sizeof r->device, "%s", d->name);
		r->package = d->package >= 0 ? d->package : (pkg < 0 ? -1 : pkg);
	} else {
		r->package = pkg < 0 ? -1 : pkg;
	}
}

static int wants_device(const st_place_req_t *r)
{
	return r->near && r->near[0] && strcmp(r->near, "auto") != 0;
}

int st_topo_place(const st_topo_t *t, st_place_req_t *reqs, int n)
{
	const int maxthr = (int)(sizeof reqs[0].cpus / sizeof reqs[0].cpus[0]);
	for (int i = 0; i < n; i++) {
		if (reqs[i].n_threads < 1 || reqs[i].n_threads > maxthr) {
			st_error("topo: stage %s: %d threads (expected 1..%d)",
				 reqs[i].stage ? reqs[i].stage : "?", reqs[i].n_threads,
				 maxthr);
			return ST_EINVAL;
		}
		reqs[i].package = -1;
		reqs[i].device[0] = '\0';
		if (!wants_device(&reqs[i]) || class_of(reqs[i].near) >= 0)
			continue;
		int found = 0;
		for (int d = 0; d < t->ndevs && !found; d++)
			found = !strcmp(t->devs[d].name, reqs[i].near);
		if (!found) {
			log_unknown_device(t, &reqs[i]);
			return ST_EINVAL;
		}
	}

	struct plan p = { .t = t, .used = st_xcalloc((size_t)t->ncores, sizeof(int)) };
	int *deferred = st_xcalloc((size_t)(n > 0 ? n : 1), sizeof(int));
	for (int i = 0; i < n; i++) {
		st_place_req_t *r = &reqs[i];
		deferred[i] = 1;
		if (!wants_device(r))
			continue;
		const struct device *dev = NULL;
		int cls = class_of(r->near);
		if (cls >= 0) {
			int best_free = -1;
			for (int d = 0; d < t->ndevs; d++) {
				if ((int)t->devs[d].cls != cls)
					continue;
				int f = free_cores_in(&p, &t->devs[d]);
				if (f > best_free) {
					best_free = f;
					dev = &t->devs[d];
				}
			}
			if (!dev) {
				st_debug("topo: stage %s: no %s device here; placing it freely",
					 r->stage ? r->stage : "?", r->near);
				continue;
			}
		} else {
			for (int d = 0; d < t->ndevs && !dev; d++)
				if (!strcmp(t->devs[d].name, r->near))
					dev = &t->devs[d];
		}
		deferred[i] = 0;
		place_threads(&p, r, dev, -1);
	}
	/* Requests are stages in pipeline order: an automatic one prefers the
	 * package of the stage before it, else of the one after it. */
	for (int i = 0; i < n; i++) {
		if (!deferred[i])
			continue;
		int pref = -1;
		if (i > 0 && reqs[i - 1].package >= 0)
			pref = reqs[i - 1].package;
		else if (i + 1 < n && !deferred[i + 1] && reqs[i + 1].package >= 0)
			pref = reqs[i + 1].package;
		place_threads(&p, &reqs[i], NULL, pref);
	}
	free(deferred);
	free(p.used);
	return ST_OK;
}

int st_topo_has_device(const st_topo_t *t, const char *name)
{
	for (int i = 0; i < t->ndevs; i++)
		if (!strcmp(t->devs[i].name, name))
			return 1;
	return 0;
}

int st_topo_pci_cpus(const st_topo_t *t, const char *busid, int *cpus, int max, int *numa)
{
	unsigned dom = 0, bus = 0, dev = 0, fn = 0;
	int len = -1;
	/* hwloc's own parser accepts trailing garbage; check the form here so
	 * that a typo is an error, not "no such device". Hex digits only (so
	 * %x never sees a "0x" prefix), and the whole string consumed. */
	int ok = busid && busid[strspn(busid, "0123456789abcdefABCDEF:.")] == '\0';
	if (ok && strchr(busid, ':') != strrchr(busid, ':'))
		ok = sscanf(busid, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &len) == 4;
	else if (ok)
		ok = sscanf(busid, "%x:%x.%x%n", &bus, &dev, &fn, &len) == 3;
	if (!ok || len < 0 || busid[len] != '\0') {
		st_error("topo: '%s' is not a PCI bus id (expected DDDD:BB:DD.F, e.g. "
			 "0000:3b:00.0)", busid ? busid : "(null)");
		return ST_EINVAL;
	}
	if (numa)
		*numa = -1;
	hwloc_obj_t o = hwloc_get_pcidev_by_busid(t->h, dom, bus, dev, fn);
	if (!o)
		return ST_ENOENT;
	hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, o);
	hwloc_const_cpuset_t set = anc ? anc->cpuset : hwloc_topology_get_topology_cpuset(t->h);
	hwloc_const_nodeset_t nodes = anc ? anc->nodeset : NULL;
	if (numa && nodes && hwloc_bitmap_weight(nodes) == 1)
		*numa = hwloc_bitmap_first(nodes);
	int n = 0;
	for (int c = 0; c < t->ncores; c++) {
		if (!hwloc_bitmap_isset(set, (unsigned)t->cores[c].pu))
			continue;
		if (n < max)
			cpus[n] = t->cores[c].pu;
		n++;
	}
	return n > 0 ? n : ST_ENOENT;
}

int st_topo_bind_self(const st_topo_t *t, int cpu)
{
	if (cpu < 0)
		return ST_OK;
	/* A plan loaded from XML describes another machine: binding this
	 * thread to its cpus would be meaningless. */
	if (!t->thissystem)
		return ST_EINVAL;
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	if (!set)
		return ST_ENOMEM;
	hwloc_bitmap_only(set, (unsigned)cpu);
	int rc = hwloc_set_cpubind(t->h, set, HWLOC_CPUBIND_THREAD);
	int e = errno;
	hwloc_bitmap_free(set);
	return rc < 0 ? -(e ? e : EINVAL) : ST_OK;
}

void st_topo_print(const st_topo_t *t, FILE *f)
{
	hwloc_topology_t h = t->h;
	int nnuma = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
	int npu = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_PU);
	fprintf(f, "topology: %d package%s, %d NUMA node%s, %d cores, %d PUs%s\n",
		t->npackages, t->npackages == 1 ? "" : "s", nnuma, nnuma == 1 ? "" : "s",
		t->ncores, npu, t->thissystem ? "" : " (not this machine)");
	for (int p = 0; p < t->npackages; p++) {
		hwloc_obj_t po = hwloc_get_obj_by_type(h, HWLOC_OBJ_PACKAGE, (unsigned)p);
		hwloc_const_cpuset_t set = po ? po->cpuset : hwloc_topology_get_topology_cpuset(h);
		int nc = 0;
		for (int c = 0; c < t->ncores; c++)
			nc += t->cores[c].package == p;
		char pus[256], numa[128];
		hwloc_bitmap_list_snprintf(pus, sizeof pus, set);
		size_t len = 0;
		numa[0] = '\0';
		for (int i = 0; i < nnuma && len < sizeof numa - 16; i++) {
			hwloc_obj_t no = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, (unsigned)i);
			if (hwloc_bitmap_intersects(no->cpuset, set))
				len += (size_t)snprintf(numa + len, sizeof numa - len, "%s%u",
							len ? "," : "", no->os_index);
		}
		fprintf(f, "  package %d: %d cores, PUs %s, NUMA %s\n", p, nc, pus,
			len ? numa : "-");
	}
	if (t->ndevs == 0)
		fprintf(f, "  no I/O devices found\n");
	for (int i = 0; i < t->ndevs; i++) {
		const struct device *d = &t->devs[i];
		char pus[256];
		hwloc_bitmap_list_snprintf(pus, sizeof pus, d->local);
		if (d->package >= 0)
			fprintf(f, "  %-4s  %-16s package %d (PUs %s)\n", class_names[d->cls],
				d->name, d->package, pus);
		else
			fprintf(f, "  %-4s  %-16s machine-wide (PUs %s)\n",
				class_names[d->cls], d->name, pus);
	}
}
