/*
 * registry.c: the backends by name (engine/backend.h): what each kind
 * can do and how to open it from one set of parameters, so that the
 * programs and the servers ask the registry instead of comparing names.
 * "cuda" is known everywhere (a scheduler drives cuda workers, the
 * predictor models GPUs) and has an opener where the CUDA backend is
 * built in (MEDHA_CUDA: the Makefile's CUDA=1).
 */
#include "engine/backend.h"
#include "engine/backend_cpu.h"
#include "engine/backend_sim.h"
#include "sched/pred.h"
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
	o.spp = p->spp;
	o.kvp = p->kvp;
	o.stage = p->stage;
	o.max_seqs = p->max_seqs;
	o.kv_blocks = p->kv_blocks;
	o.speed = p->speed;
	return medha_backend_sim_open(be, &o, why, whylen);
}

#ifdef MEDHA_CUDA
/*
 * The cuda backend has no routed FFN yet (issue 41, item 3): a model
 * with experts, a file or a shape name, is refused here by name before
 * the backend reads its weights (it would find no dense FFN in a routed
 * layer). Anything else, or a model that does not resolve, goes on to
 * the backend and its own reasons.
 */
static int
open_cuda(struct medha_backend **be, const struct medha_backend_params *p,
    char *why, size_t whylen)
{
	struct medha_pred_model pm;
	char w[256];

	if (p->model != NULL &&
	    medha_model_resolve_why(p->model, &pm, w, sizeof(w)) == 0 &&
	    pm.c.a.n_expert > 0)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "cuda: %s: a mixture of experts (%s, %d experts) is not "
		    "supported by the cuda backend yet (the cpu backend runs "
		    "it)",
		    p->model, pm.c.a.name, pm.c.a.n_expert);
	return medha_backend_cuda_open(be, p, why, whylen);
}
#endif

static const struct medha_backend_kind kinds[] = {
	{"cpu",
	    MEDHA_BACKEND_COMPUTES | MEDHA_BACKEND_TP | MEDHA_BACKEND_SPP |
	        MEDHA_BACKEND_KVP | MEDHA_BACKEND_FILL | MEDHA_BACKEND_FORK,
	    "the model on this machine's CPUs (the reference)", open_cpu},
	{"sim",
	    MEDHA_BACKEND_TP | MEDHA_BACKEND_SPP | MEDHA_BACKEND_KVP |
	        MEDHA_BACKEND_FORK,
	    "waits the time the predictor gives a batch; no numerics",
	    open_sim},
	{"cuda",
	    MEDHA_BACKEND_COMPUTES | MEDHA_BACKEND_TP | MEDHA_BACKEND_SPP |
	        MEDHA_BACKEND_KVP | MEDHA_BACKEND_FILL | MEDHA_BACKEND_GPU |
	        MEDHA_BACKEND_FORK,
#ifdef MEDHA_CUDA
	    "the model on an NVIDIA GPU (cuBLASLt, NCCL)", open_cuda},
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
	return k->open(be, p, why, whylen);
}
