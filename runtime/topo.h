/*
 * topo.h — hardware topology (hwloc) and thread placement.
 *
 * st_topo_load reads this machine's topology, or an hwloc XML file so that a
 * plan can be made for a machine other than this one (tests ship a 4-socket,
 * 8-GPU, NVMe topology). st_topo_place assigns each stage thread an OS cpu:
 * a stage that asks to be near a device ("disk", "gpu", "net" class, or an OS
 * device name such as "nvme0n1") gets cores of that device's NUMA node /
 * package; the others get the remaining cores, round-robin, so threads share
 * cores only when there are more threads than cores.
 */
#ifndef ST_TOPO_H
#define ST_TOPO_H

#include <stdio.h>

typedef struct st_topo st_topo_t;

/* xml_path NULL = this machine. Returns ST_OK / ST_EIO (unreadable XML) /
 * ST_EINVAL. Caller destroys. */
int st_topo_load(st_topo_t **out, const char *xml_path);
void st_topo_destroy(st_topo_t *t);

int st_topo_ncores(const st_topo_t *t);     /* physical cores */
int st_topo_npackages(const st_topo_t *t);  /* sockets */

/* One placement request per stage. */
typedef struct st_place_req {
	const char *stage;     /* "read", "pull", ... */
	const char *near;      /* NULL/"auto": no preference; class or device name */
	int n_threads;
	/* outputs */
	int cpus[64];          /* OS index of the PU each thread is pinned to */
	int package;           /* package (socket) chosen, -1 if none */
	char device[64];       /* device the stage was placed near, "" if none */
} st_place_req_t;

/* Fills cpus/package/device of every request. Returns ST_OK or ST_EINVAL
 * (unknown device name: message logged). Deterministic for a topology. */
int st_topo_place(const st_topo_t *t, st_place_req_t *reqs, int n);

/* 1 if the topology has an OS device with this exact name ("nvme0n1"). */
int st_topo_has_device(const st_topo_t *t, const char *name);

/* Placement of a GPU's threads (docs/gpu.md): the cores next to the PCI
 * device with bus id `busid` — "0000:3b:00.0" or "3b:00.0", the form
 * cudaDeviceGetPCIBusId and st_gpu_device_info give (hex digits in either
 * case). cpus[0 .. min(n, max)) receive the OS index of the first PU of each
 * core in the cpuset of the device's first non-I/O ancestor (its NUMA node
 * or package), in core order; *numa (may be NULL) the OS index of that
 * NUMA node, -1 when the locality spans several. Returns the number n of
 * such cores (>= 1; may exceed max), ST_ENOENT when the topology has no such
 * PCI device (a machine without that GPU, or hwloc built without PCI
 * support), ST_EINVAL for a malformed bus id (logged). Needs no CUDA.
 * Thread-safe (read-only). */
int st_topo_pci_cpus(const st_topo_t *t, const char *busid, int *cpus, int max, int *numa);

/* Prints packages, cores, NUMA nodes and I/O devices with their locality. */
void st_topo_print(const st_topo_t *t, FILE *f);

/* Pins the calling thread to OS cpu `cpu` (-1: no-op). Returns ST_OK or -errno. */
int st_topo_bind_self(const st_topo_t *t, int cpu);

#endif
