/*
 * backend_cuda.c: the cuda backend (backend_cuda.h): the GPU forward
 * pass of cuda/ behind the backend interface. What is the interface's
 * is here: the parameters as the room's options, a model path opened
 * (or a shape name resolved by the predictor's table), the forward
 * call's struct medha_fwd as the room's struct medha_cuda_call, the
 * caller's struct medha_comm as host-memory collectives (the KVP
 * exchange through medha_kvp_exchange, as every backend trades), the
 * function table.
 */
#include "engine/backend_cuda.h"

#include "cuda/cuda.h"
#include "model/gguf.h"
#include "sched/pred.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cuda_adapter {
	struct medha_cuda *cu;
	const struct medha_comm *cm; /* the call's (or comm_init's) */
	const struct medha_fwd *f;   /* the call running */
};

/* ---- the caller's collectives, in host memory ---- */

static int
co_gather(void *arg, int layer, int kind, const void *mine, size_t len,
    void *all, char *why, size_t whylen)
{
	const struct medha_comm *cm = ((struct cuda_adapter *)arg)->cm;

	return cm->all_gather(cm->arg, layer, kind, mine, len, all,
	    MEDHA_MEM_HOST, why, whylen);
}

static int
co_reduce(void *arg, int layer, int kind, float *x, size_t n, char *why,
    size_t whylen)
{
	const struct medha_comm *cm = ((struct cuda_adapter *)arg)->cm;

	return cm->all_reduce(cm->arg, layer, kind, x, n, MEDHA_MEM_HOST, why,
	    whylen);
}

static int
co_exchange(void *arg, int layer, const float *out, const float *lse,
    size_t ro, size_t rl, float **buf, size_t *cap, size_t *at, char *why,
    size_t whylen)
{
	const struct cuda_adapter *a = arg;

	return medha_kvp_exchange(a->f->b, a->f->kv, a->cm, layer, out, lse,
	    ro, rl, buf, cap, at, why, whylen);
}

/* cm as the room's collectives (a->cm set to it) */
static void
coll_of(struct cuda_adapter *a, const struct medha_comm *cm,
    struct medha_cuda_coll *co)
{
	a->cm = cm;
	*co = (struct medha_cuda_coll){
	    .all_gather = cm->all_gather != NULL ? co_gather : NULL,
	    .all_reduce = cm->all_reduce != NULL ? co_reduce : NULL,
	    .kvp_exchange = co_exchange,
	    .tp = cm->tp,
	    .tp_rank = cm->tp_rank,
	    .kvp = cm->kvp,
	    .kvp_rank = cm->kvp_rank,
	    .arg = a};
}

/* ---- the function table ---- */

static int
cuda_forward(void *impl, const struct medha_fwd *f, char *why, size_t whylen)
{
	struct cuda_adapter *a = impl;
	struct medha_cuda_coll co;
	struct medha_cuda_times t = {0};
	struct medha_cuda_call k = {.b = f->b,
	    .layer_lo = f->layer_lo,
	    .layer_hi = f->layer_hi,
	    .h_in = f->h_in,
	    .h_out = f->h_out,
	    .logits = f->logits,
	    .samplers = f->samplers,
	    .tokens = f->tokens,
	    .kv = f->kv,
	    .times = f->times != NULL ? &t : NULL};
	int rc;

	a->f = f;
	if (f->comm != NULL) {
		coll_of(a, f->comm, &co);
		k.coll = &co;
	}
	rc = medha_cuda_forward(a->cu, &k, why, whylen);
	if (f->times != NULL && t.split) {
		f->times->attn = t.attn;
		f->times->merge = t.merge;
		f->times->head = t.head;
		f->times->split = 1;
	}
	a->f = NULL;
	a->cm = NULL;
	return rc;
}

static int
cuda_comm_init(void *impl, const struct medha_comm *cm, char *why,
    size_t whylen)
{
	struct cuda_adapter *a = impl;
	struct medha_cuda_coll co;
	int rc;

	if (cm == NULL)
		return medha_cuda_comm_init(a->cu, NULL, why, whylen);
	coll_of(a, cm, &co);
	rc = medha_cuda_comm_init(a->cu, &co, why, whylen);
	a->cm = NULL;
	return rc;
}

static int
cuda_seq_alloc(void *impl, int *seq)
{
	return medha_cuda_seq_alloc(((struct cuda_adapter *)impl)->cu, seq);
}

static void
cuda_seq_free(void *impl, int seq)
{
	medha_cuda_seq_free(((struct cuda_adapter *)impl)->cu, seq);
}

static int64_t
cuda_seq_len(void *impl, int seq)
{
	return medha_cuda_seq_len(((struct cuda_adapter *)impl)->cu, seq);
}

static int64_t
cuda_free_blocks(void *impl)
{
	return medha_cuda_free_blocks(((struct cuda_adapter *)impl)->cu);
}

static int
cuda_seq_fill(void *impl, int seq, int64_t n)
{
	return medha_cuda_seq_fill(((struct cuda_adapter *)impl)->cu, seq, n);
}

static int
cuda_seq_fork(void *impl, int dst, int src, int64_t from, int64_t to)
{
	return medha_cuda_seq_fork(((struct cuda_adapter *)impl)->cu, dst, src,
	    from, to);
}

static int
cuda_seq_trim(void *impl, int seq, int64_t n)
{
	return medha_cuda_seq_trim(((struct cuda_adapter *)impl)->cu, seq, n);
}

static void
cuda_idle(void *impl)
{
	(void)impl; /* no threads to put to sleep: the GPU idles itself */
}

static void
cuda_close(void *impl)
{
	struct cuda_adapter *a = impl;

	if (a == NULL)
		return;
	medha_cuda_close(a->cu);
	free(a);
}

static const struct medha_backend_ops cuda_ops = {
    .seq_alloc = cuda_seq_alloc,
    .seq_free = cuda_seq_free,
    .forward = cuda_forward,
    .close = cuda_close,
    .seq_len = cuda_seq_len,
    .free_blocks = cuda_free_blocks,
    .idle = cuda_idle,
    .comm_init = cuda_comm_init,
    .seq_fill = cuda_seq_fill,
    .seq_fork = cuda_seq_fork,
    .seq_trim = cuda_seq_trim,
};

/* ---- opening one ---- */

/* The room on m, or (m NULL) random weights of shape sh, as a backend. */
static int
make(struct medha_backend **be, const struct medha_model *m,
    const struct medha_model_config *sh, const struct medha_backend_params *p,
    char *why, size_t whylen)
{
	const struct medha_cuda_opts o = {.device = p->device,
	    .spp = p->spp,
	    .stage = p->stage,
	    .tp = p->tp,
	    .tp_rank = p->tp_rank,
	    .max_seqs = p->max_seqs,
	    .kv_blocks = p->kv_blocks,
	    .kv_type = p->kv_type,
	    .mem_util = p->mem_util,
	    .nccl = p->coll == MEDHA_COLL_NCCL,
	    .seed = p->seed};
	struct medha_cuda_info ci;
	struct medha_backend_info in;
	struct cuda_adapter *a;
	int rc;

	*be = NULL;
	if ((a = calloc(1, sizeof(*a))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	if ((rc = medha_cuda_open(&a->cu, m, sh, &o, why, whylen)) != 0) {
		free(a);
		return rc;
	}
	medha_cuda_info(a->cu, &ci);
	in = (struct medha_backend_info){.name = "cuda",
	    .shape = ci.c,
	    .layer_lo = ci.layer_lo,
	    .layer_hi = ci.layer_hi,
	    .block_size = MEDHA_KV_BLOCK,
	    .n_blocks = ci.n_blocks,
	    .max_seqs = ci.max_seqs,
	    .kv_type = ci.kv_type,
	    .tp = ci.tp,
	    .tp_rank = ci.tp_rank};
	if ((rc = medha_backend_new(be, &cuda_ops, a, &in)) != 0) {
		cuda_close(a);
		return medha_why(why, whylen, rc, "out of memory");
	}
	return 0;
}

int
medha_backend_cuda_init(struct medha_backend **be, const struct medha_model *m,
    const struct medha_backend_params *p, char *why, size_t whylen)
{
	return make(be, m, &m->c, p, why, whylen);
}

int
medha_backend_cuda_open(struct medha_backend **be,
    const struct medha_backend_params *p, char *why, size_t whylen)
{
	struct medha_gguf *g = NULL;
	struct medha_model *m = NULL;
	struct medha_pred_model pm;
	char w[256]; /* (a file that does not resolve: the load says why) */
	int rc, n;

	*be = NULL;
	if (p->model == NULL)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: no model (a GGUF path or a shape name)");
	/* what the kernels cannot run, from the file's metadata (or the
	   shape's name) alone; then no device: said before reading a 16 GB
	   file */
	if (medha_model_resolve_why(p->model, &pm, w, sizeof(w)) == 0 &&
	    (rc = medha_cuda_runnable(&pm.c, why, whylen)) != 0)
		return rc;
	if ((rc = medha_cuda_devices(&n, why, whylen)) != 0)
		return rc;
	if (access(p->model, R_OK) == 0) {
		if ((rc = medha_gguf_open(&g, p->model, why, whylen)) != 0 ||
		    (rc = medha_model_load(&m, g, why, whylen)) != 0) {
			medha_gguf_close(g);
			return rc;
		}
		/* the weights are copied to the device: the file goes */
		rc = medha_backend_cuda_init(be, m, p, why, whylen);
		medha_model_free(m);
		medha_gguf_close(g);
		return rc;
	}
	if (medha_model_resolve(p->model, &pm) != 0)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "cuda: model %s: no such file, nor a shape name "
		    "(llama3-8b, llama3-70b, llama3.1-70b, smollm2-135m)",
		    p->model);
	/* a shape of another family (qwen3-32b): as from a file */
	return make(be, NULL, &pm.c, p, why, whylen);
}
