/*
 * registry.c: the backends by name (engine/backend.h): what each kind
 * can do and how to open it from one set of parameters, so that the
 * programs and the servers ask the registry instead of comparing names.
 * "cuda" is known everywhere (a scheduler drives cuda workers, the
 * predictor models GPUs) and has an opener where the CUDA backend is
 * built in (MEDHA_CUDA: the Makefile's CUDA=1). The registry's device
 * questions are devices.c's.
 */
#include "engine/backend.h"
#include "engine/backend_cpu.h"
#include "engine/backend_sim.h"
#ifdef MEDHA_CUDA
#include "engine/backend_cuda.h"
#endif

#include <string.h>

static int
open_cpu(struct medha_backend **be, const struct medha_backend_params *p,
    char *why, size_t whylen)
{
	struct medha_backend_cpu_opts o = {0};

	o.n_threads = p->n_threads;
	o.max_seqs = p->max_seqs;
	o.kv_blocks = p->kv_blocks;
	o.kv_type = p->kv_type;
	o.ref = p->ref;
	o.window_kv = p->window_kv;
	o.spp = p->spp;
	o.stage = p->stage;
	o.tp = p->tp;
	o.tp_rank = p->tp_rank;
	o.ep = p->ep;
	return medha_backend_cpu_open(be, p->model, &o, why, whylen);
}

static int
open_sim(struct medha_backend **be, const struct medha_backend_params *p,
    char *why, size_t whylen)
{
	struct medha_backend_sim_opts o = {0};

	o.gpu = p->gpu;
	o.model = p->model;
	o.tp = p->tp;
	o.ep = p->ep;
	o.spp = p->spp;
	o.kvp = p->kvp;
	o.stage = p->stage;
	o.max_seqs = p->max_seqs;
	o.kv_blocks = p->kv_blocks;
	o.speed = p->speed;
	return medha_backend_sim_open(be, &o, why, whylen);
}

static const struct medha_backend_kind kinds[] = {
	{"cpu",
	    MEDHA_BACKEND_COMPUTES | MEDHA_BACKEND_TP | MEDHA_BACKEND_SPP |
	        MEDHA_BACKEND_KVP | MEDHA_BACKEND_FILL | MEDHA_BACKEND_FORK |
	        MEDHA_BACKEND_EP,
	    "the model on this machine's CPUs (the reference)", open_cpu},
	{"sim",
	    MEDHA_BACKEND_TP | MEDHA_BACKEND_SPP | MEDHA_BACKEND_KVP |
	        MEDHA_BACKEND_FORK | MEDHA_BACKEND_EP,
	    "waits the time the predictor gives a batch; no numerics",
	    open_sim},
	{"cuda",
	    MEDHA_BACKEND_COMPUTES | MEDHA_BACKEND_TP | MEDHA_BACKEND_SPP |
	        MEDHA_BACKEND_KVP | MEDHA_BACKEND_FILL | MEDHA_BACKEND_GPU |
	        MEDHA_BACKEND_FORK,
#ifdef MEDHA_CUDA
	    "the model on an NVIDIA GPU (cuBLASLt, NCCL)",
	    medha_backend_cuda_open},
#else
	    "the model on an NVIDIA GPU (not built into this program)", NULL},
#endif
};

const struct medha_backend_kind *
medha_backend_kinds(int *n)
{
	*n = (int)(sizeof(kinds) / sizeof(kinds[0]));
	return kinds;
}

const struct medha_backend_kind *
medha_backend_find(const char *name)
{
	for (size_t i = 0; name != NULL && i < sizeof(kinds) / sizeof(kinds[0]);
	     i++)
		if (strcmp(kinds[i].name, name) == 0)
			return &kinds[i];
	return NULL;
}

int
medha_backend_open(struct medha_backend **be, const char *name,
    const struct medha_backend_params *p, char *why, size_t whylen)
{
	const struct medha_backend_kind *k = medha_backend_find(name);

	*be = NULL;
	if (k == NULL)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "backend %s: unknown (cpu, sim or cuda)", name);
	if (k->open == NULL)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "backend %s: not built into this program", name);
	if (p->ep && !(k->caps & MEDHA_BACKEND_EP))
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "backend %s: no expert parallelism (--ep): its TP ranks "
		    "split every expert's rows; the cpu and sim backends "
		    "split experts whole",
		    name);
	return k->open(be, p, why, whylen);
}
