/*
 * devices.c: the registry's device questions (engine/backend.h:
 * medha_backend_device), as ggml-backend's device registry answers
 * them: a device's name, memory and compute capability, so that no
 * program includes a vendor's headers to name its GPU (cmd/common.c
 * asks here for the predictor's device). Apart from registry.c's table
 * of openers: a program that asks links the devices' descriptions
 * (cuda/cuda_dev.c, the CUDA runtime's properties), not a backend.
 */
#include "engine/backend.h"
#ifdef MEDHA_CUDA
#include "cuda/cuda.h"
#endif

#include <stdio.h>
#include <string.h>

#ifdef MEDHA_CUDA
static int
cuda_device(int index, struct medha_backend_device *d, char *why,
    size_t whylen)
{
	struct medha_cuda_device cd;
	int rc;

	if ((rc = medha_cuda_device(index, &cd, why, whylen)) != 0)
		return rc;
	snprintf(d->name, sizeof(d->name), "%s", cd.name);
	d->mem_bytes = cd.mem_bytes;
	d->cc_major = cd.cc_major;
	d->cc_minor = cd.cc_minor;
	d->units = cd.sms;
	return 0;
}
#endif

/* Each kind the registry knows (registry.c) and how it describes its
   devices: NULL for a kind without (it runs on this machine), or not
   built into this program. */
static const struct {
	const char *name;
	int (*device)(int index, struct medha_backend_device *d, char *why,
	    size_t whylen);
	int built;
} kinds[] = {
	{"cpu", NULL, 1},
	{"sim", NULL, 1},
#ifdef MEDHA_CUDA
	{"cuda", cuda_device, 1},
#else
	{"cuda", NULL, 0},
#endif
};

int
medha_backend_device(const char *name, int index,
    struct medha_backend_device *d, char *why, size_t whylen)
{
	memset(d, 0, sizeof(*d));
	for (size_t i = 0; name != NULL && i < sizeof(kinds) / sizeof(kinds[0]);
	     i++) {
		if (strcmp(kinds[i].name, name) != 0)
			continue;
		if (kinds[i].device == NULL)
			return medha_why(why, whylen, MEDHA_EUNSUP,
			    "backend %s: no devices to describe (%s)", name,
			    kinds[i].built ? "it runs on this machine"
			                   : "not built into this program");
		return kinds[i].device(index, d, why, whylen);
	}
	return medha_why(why, whylen, MEDHA_EUNSUP,
	    "backend %s: unknown (cpu, sim or cuda)", name ? name : "(none)");
}
