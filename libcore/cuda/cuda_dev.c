/*
 * cuda_dev.c: the devices (cuda.h), for the registry's device questions
 * (engine/backend.h: medha_backend_device): how many, and what each is,
 * from the runtime's properties (no context made, no memory taken).
 */
#include "cuda/cuda_impl.h"

#include <stdio.h>
#include <string.h>

int
medha_cuda_devices(int *n, char *why, size_t whylen)
{
	cudaError_t e = cudaGetDeviceCount(n);

	if (e != cudaSuccess || *n < 1) {
		*n = 0;
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: no CUDA device: %s",
		    e != cudaSuccess ? cudaGetErrorString(e) : "none found");
	}
	return 0;
}

int
medha_cuda_device(int index, struct medha_cuda_device *d, char *why,
    size_t whylen)
{
	struct cudaDeviceProp prop;
	cudaError_t e;
	int n, rc;

	memset(d, 0, sizeof(*d));
	if ((rc = medha_cuda_devices(&n, why, whylen)) != 0)
		return rc;
	if (index < 0 || index >= n)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: device %d: there are %d (0 to %d)", index, n, n - 1);
	if ((e = cudaGetDeviceProperties(&prop, index)) != cudaSuccess)
		return cuda_err(why, whylen, e, "cudaGetDeviceProperties");
	snprintf(d->name, sizeof(d->name), "%s", prop.name);
	d->mem_bytes = prop.totalGlobalMem;
	d->cc_major = prop.major;
	d->cc_minor = prop.minor;
	d->sms = prop.multiProcessorCount;
	return 0;
}
