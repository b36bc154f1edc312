/*
 * device.cu — devices, memory, streams and copies of the GPU backend
 * (contract: gpu.h), and the CUDA error mapping every .cu file uses.
 *
 * No state of its own: the current device is CUDA's per-thread current
 * device. Error mapping: allocation failures are ST_ENOMEM, a missing
 * device or driver ST_GPU_ENODEV, bad arguments ST_EINVAL, and everything
 * else ST_EIO (the job should stop: most device errors are sticky).
 */
#include "cuda/gpu_internal.cuh"

#include <string.h>

int st__gpu_cuda_fail(cudaError_t e, const char *call, const char *file, int line)
{
	st_error("gpu: %s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorString(e),
		 cudaGetErrorName(e));
	switch (e) {
	case cudaErrorMemoryAllocation:
		return ST_ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
		return ST_GPU_ENODEV;
	case cudaErrorInvalidValue:
		return ST_EINVAL;
	default:
		return ST_EIO;
	}
}

extern "C" int st_gpu_device_count(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		/* No driver, no device, or a driver older than this runtime: all
		 * mean "no usable GPU here", which is a normal configuration. The
		 * sticky error is cleared so later calls start clean. */
		st_debug("gpu: no usable CUDA device: %s", cudaGetErrorString(e));
		(void)cudaGetLastError();
		return 0;
	}
	return n;
}

extern "C" int st_gpu_use(int dev)
{
	CU(cudaSetDevice(dev));
	return ST_OK;
}

extern "C" int st_gpu_device_info(int dev, char *name, size_t name_len, size_t *mem_bytes,
				  char *busid, size_t busid_len)
{
	cudaDeviceProp p;
	CU(cudaGetDeviceProperties(&p, dev));
	if (name && name_len) {
		strncpy(name, p.name, name_len - 1);
		name[name_len - 1] = '\0';
	}
	if (mem_bytes)
		*mem_bytes = p.totalGlobalMem;
	if (busid && busid_len)
		CU(cudaDeviceGetPCIBusId(busid, (int)busid_len, dev));
	return ST_OK;
}

extern "C" int st_gpu_alloc(void **p, size_t bytes)
{
	*p = NULL;
	if (bytes == 0)
		return ST_OK;
	CU(cudaMalloc(p, bytes));
	return ST_OK;
}

extern "C" void st_gpu_free(void *p)
{
	if (p && cudaFree(p) != cudaSuccess)
		st_warn("gpu: cudaFree(%p) failed: %s", p, cudaGetErrorString(cudaGetLastError()));
}

extern "C" int st_gpu_host_alloc(void **p, size_t bytes)
{
	*p = NULL;
	if (bytes == 0)
		return ST_OK;
	CU(cudaHostAlloc(p, bytes, cudaHostAllocDefault));
	return ST_OK;
}

extern "C" void st_gpu_host_free(void *p)
{
	if (p && cudaFreeHost(p) != cudaSuccess)
		st_warn("gpu: cudaFreeHost(%p) failed: %s", p,
			cudaGetErrorString(cudaGetLastError()));
}

extern "C" int st_gpu_stream_create(st_gpu_stream_t **out)
{
	cudaStream_t s;
	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	*out = (st_gpu_stream_t *)(void *)s;
	return ST_OK;
}

extern "C" void st_gpu_stream_destroy(st_gpu_stream_t *s)
{
	if (s && cudaStreamDestroy(cu_stream(s)) != cudaSuccess)
		st_warn("gpu: cudaStreamDestroy failed: %s",
			cudaGetErrorString(cudaGetLastError()));
}

extern "C" int st_gpu_stream_sync(st_gpu_stream_t *s)
{
	CU(cudaStreamSynchronize(cu_stream(s)));
	return ST_OK;
}

extern "C" int st_gpu_upload(void *d_dst, const void *src, size_t bytes, st_gpu_stream_t *s)
{
	if (bytes)
		CU(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice, cu_stream(s)));
	return ST_OK;
}

extern "C" int st_gpu_download(void *dst, const void *d_src, size_t bytes, st_gpu_stream_t *s)
{
	if (bytes)
		CU(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost, cu_stream(s)));
	return ST_OK;
}

extern "C" int st_gpu_copy(void *d_dst, const void *d_src, size_t bytes, st_gpu_stream_t *s)
{
	if (bytes)
		CU(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, cu_stream(s)));
	return ST_OK;
}

extern "C" int st_gpu_copy2d(float *d_dst, size_t dpitch, const float *d_src, size_t spitch,
			     size_t cols, size_t rows, st_gpu_stream_t *s)
{
	if (cols && rows)
		CU(cudaMemcpy2DAsync(d_dst, dpitch * sizeof(float), d_src, spitch * sizeof(float),
				     cols * sizeof(float), rows, cudaMemcpyDeviceToDevice,
				     cu_stream(s)));
	return ST_OK;
}

extern "C" int st_gpu_zero(void *d_dst, size_t bytes, st_gpu_stream_t *s)
{
	if (bytes)
		CU(cudaMemsetAsync(d_dst, 0, bytes, cu_stream(s)));
	return ST_OK;
}
