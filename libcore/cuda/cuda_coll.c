/*
 * cuda_coll.c: what the cuda backend exchanges with its peers
 * and hands back: the TP all-reduce after the row-parallel products
 * (over NCCL when the backend owns a communicator, set up in comm_init
 * with rank 0's unique id travelling through the caller's all_gather,
 * non-blocking and waited for up to MEDHA_NCCL_TIMEOUT, as is an
 * all-reduce still connecting; any NCCL failure aborts it, and the
 * next call makes a new one;
 * else through the caller's all_reduce, or its all_gather and a sum in
 * rank order, in host memory), the KVP merge (each merged sequence's
 * partial outputs and log-sum-exps copied to the host and exchanged as
 * the cpu backend exchanges them, then folded on the GPU by
 * medha_k_attn_merge in group order, so every group holds the same
 * bits), and the logits and sampled tokens.
 *
 * Sampling: a greedy sampler's token is the argmax taken on the GPU
 * (medha_k_argmax: the lowest id on ties, as medha_sample_greedy); any
 * other sampler gets its row copied to the host and medha_sample(), so
 * that its draws are the cpu backend's exactly (medha_k_sample is not
 * used: its order of top-k, top-p and temperature would have to match
 * sample.c's bit for bit).
 */
#include "cuda/cuda_impl.h"

#include "model/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Pinned host room for n floats in c->s.hb. */
int
cuda_stage(struct medha_cuda *c, size_t n, char *why, size_t whylen)
{
	int rc;

	if (n <= c->s.hb_cap)
		return 0;
	cudaFreeHost(c->s.hb);
	c->s.hb = NULL;
	c->s.hb_cap = 0;
	if ((rc = cuda_ok(cudaMallocHost((void **)&c->s.hb, n * sizeof(float)),
	         "pinned host staging", why, whylen)) != 0)
		return rc;
	c->s.hb_cap = n;
	return 0;
}

/* The communicator given up: aborted (its kernels return), and the
   decode graphs that captured its all-reduces dropped; the next call
   with peers makes a new one (cuda_comm_init). */
void
cuda_nccl_abort(struct medha_cuda *c)
{
	c->lib.nc.ncclCommAbort(c->lib.nccl);
	c->lib.nccl = NULL;
	cudaStreamSynchronize(c->st);
	cuda_graph_free(c);
}

/*
 * Wait for the stream. With a NCCL communicator a TP peer that died
 * mid-step leaves this rank's all-reduce waiting for ever (NCCL notices
 * no dead process on its own): poll the stream and NCCL's asynchronous
 * error, and after nccl_timeout seconds without the step done, or on
 * such an error, abort the communicator and fail the call, so that the
 * worker reports the batch failed rather than hang.
 */
int
cuda_sync(struct medha_cuda *c, const char *what, char *why, size_t whylen)
{
	const double t0 = medha_now();
	ncclResult_t ae;
	cudaError_t e;
	int spins = 0;

	if (c->lib.nccl == NULL)
		return cuda_ok(cudaStreamSynchronize(c->st), what, why, whylen);
	while ((e = cudaStreamQuery(c->st)) == cudaErrorNotReady) {
		struct timespec ts = {0, 20000};
		if (c->lib.nc.ncclCommGetAsyncError(c->lib.nccl, &ae) ==
		        ncclSuccess &&
		    ae != ncclSuccess && ae != ncclInProgress) {
			cuda_nccl_abort(c);
			return medha_why(why, whylen, MEDHA_EIO,
			    "cuda: %s: NCCL (TP rank %d of %d): %s; "
			    "communicator aborted",
			    what, c->tpr, c->tp,
			    c->lib.nc.ncclGetErrorString(ae));
		}
		if (++spins < 1000)
			continue; /* a step's end is usually close */
		if (medha_now() - t0 > c->lib.nccl_timeout) {
			cuda_nccl_abort(c);
			return medha_why(why, whylen, MEDHA_ETIMEOUT,
			    "cuda: %s: not done after %g s (TP rank %d of %d: "
			    "a peer gone?); NCCL communicator aborted",
			    what, c->lib.nccl_timeout, c->tpr, c->tp);
		}
		nanosleep(&ts, NULL);
	}
	if (e != cudaSuccess)
		return cuda_err(why, whylen, e, what);
	return 0;
}

/*
 * Wait while the communicator's state is ncclInProgress (a non-blocking
 * init, or an operation connecting): 0 once it is ncclSuccess; else the
 * communicator aborted and an error naming what: its state's, or
 * MEDHA_ETIMEOUT after nccl_timeout seconds (a peer that died after the
 * id exchange, or that never connects, would otherwise hang the worker
 * for ever: the step watchdog, cuda_sync, does not cover these).
 */
static int
nccl_wait(struct medha_cuda *c, const char *what, char *why, size_t whylen)
{
	const double t0 = medha_now();
	struct timespec ts = {0, 200000};
	ncclResult_t st = ncclInProgress;

	for (;;) {
		if (c->lib.nc.ncclCommGetAsyncError(c->lib.nccl, &st) !=
		    ncclSuccess)
			st = ncclInternalError;
		if (st != ncclInProgress)
			break;
		if (medha_now() - t0 > c->lib.nccl_timeout) {
			cuda_nccl_abort(c);
			return medha_why(why, whylen, MEDHA_ETIMEOUT,
			    "cuda: %s (TP rank %d of %d): not done after %g s "
			    "(MEDHA_NCCL_TIMEOUT; a peer gone?); communicator "
			    "aborted",
			    what, c->tpr, c->tp, c->lib.nccl_timeout);
		}
		nanosleep(&ts, NULL);
	}
	if (st == ncclSuccess)
		return 0;
	cuda_nccl_abort(c);
	return medha_why(why, whylen, MEDHA_EIO,
	    "cuda: %s (TP rank %d of %d): %s; communicator aborted", what,
	    c->tpr, c->tp, c->lib.nc.ncclGetErrorString(st));
}

/* This rank's communicator of id: non-blocking where NCCL has the
   config (2.14+), waited for up to nccl_timeout. */
static int
comm_make(struct medha_cuda *c, ncclUniqueId id, char *why, size_t whylen)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	int st;

	cfg.blocking = 0;
	c->lib.nccl = NULL;
	st = c->lib.nc.ncclCommInitRankConfig != NULL
	    ? c->lib.nc.ncclCommInitRankConfig(&c->lib.nccl, c->tp, id, c->tpr,
	          &cfg)
	    : c->lib.nc.ncclCommInitRank(&c->lib.nccl, c->tp, id, c->tpr);
	if (st != ncclSuccess && st != ncclInProgress) {
		if (c->lib.nccl != NULL)
			c->lib.nc.ncclCommAbort(c->lib.nccl);
		c->lib.nccl = NULL;
		return medha_why(why, whylen, MEDHA_EIO,
		    "cuda: ncclCommInitRank (rank %d of %d): %s (two ranks "
		    "on one GPU need the host collectives, --coll nng)",
		    c->tpr, c->tp, c->lib.nc.ncclGetErrorString(st));
	}
	return nccl_wait(c, "ncclCommInitRank", why, whylen);
}

int
medha_cuda_comm_init(struct medha_cuda *c, const struct medha_cuda_coll *cm,
    char *why, size_t whylen)
{
	ncclUniqueId *all, id, none;
	int rc, st = ncclSuccess;

	if (c->tp == 1 || !c->use_nccl)
		return 0; /* the caller's collectives, in each call */
	if (cm == NULL || cm->all_gather == NULL || cm->tp != c->tp ||
	    cm->tp_rank != c->tpr)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "cuda: NCCL for TP rank %d of %d: collectives of rank %d "
		    "of %d",
		    c->tpr, c->tp, cm ? cm->tp_rank : -1, cm ? cm->tp : 0);
	if ((rc = cuda_nccl_load(c, why, whylen)) != 0)
		return rc;
	if (c->lib.nccl != NULL) {
		/* a new peer table (a rank restarted): the old communicator
		   has a rank that is gone, which a destroy may wait for (an
		   abort does not), and the decode graphs captured its
		   all-reduces */
		if ((rc = cuda_sync(c, "the old communicator's work", why,
		         whylen)) != 0)
			return rc;
		cuda_nccl_abort(c);
	}
	memset(&id, 0, sizeof(id));
	memset(&none, 0, sizeof(none));
	/* rank 0 sends its id even when it has none (all zeros), so that
	   the others are not left waiting in the gather: each fails */
	if (c->tpr == 0 && (st = c->lib.nc.ncclGetUniqueId(&id)) != ncclSuccess)
		memset(&id, 0, sizeof(id));
	if ((all = calloc((size_t)c->tp, sizeof(id))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	/* layer -1: a tag no layer's collective uses */
	if ((rc = cm->all_gather(cm->arg, -1, 0, &id, sizeof(id), all,
	         why, whylen)) != 0) {
		free(all);
		return rc;
	}
	id = all[0];
	free(all);
	if (st != ncclSuccess)
		return medha_why(why, whylen, MEDHA_EIO,
		    "cuda: ncclGetUniqueId: %s",
		    c->lib.nc.ncclGetErrorString(st));
	if (memcmp(&id, &none, sizeof(id)) == 0)
		return medha_why(why, whylen, MEDHA_EIO,
		    "cuda: TP rank 0 has no NCCL id (its ncclGetUniqueId "
		    "failed: see its log)");
	if ((rc = cuda_ok(cudaSetDevice(c->dev), "cudaSetDevice", why,
	         whylen)) != 0)
		return rc;
	return comm_make(c, id, why, whylen);
}

/* x (n floats, host) summed over the ranks by the caller's collectives:
   its all_reduce, or an all_gather and a sum in rank order. */
static int
host_reduce(struct medha_cuda *c, int layer, int kind, float *x, size_t n,
    char *why, size_t whylen)
{
	const struct medha_cuda_coll *cm = c->rt.f->coll;
	float *all;
	int rc;

	if (cm->all_reduce != NULL)
		return cm->all_reduce(cm->arg, layer, kind, x, n, why, whylen);
	if ((all = malloc((size_t)c->tp * n * sizeof(float))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	if ((rc = cm->all_gather(cm->arg, layer, kind, x, n * sizeof(float),
	         all, why, whylen)) == 0)
		for (size_t i = 0; i < n; i++) {
			float s = all[i];
			for (int r = 1; r < c->tp; r++)
				s += all[(size_t)r * n + i];
			x[i] = s;
		}
	free(all);
	return rc;
}

/* y (n floats, device): the sum of every TP rank's y. */
int
cuda_all_reduce(struct medha_cuda *c, int layer, int kind, float *y, size_t n,
    char *why, size_t whylen)
{
	int rc, st;

	if (c->lib.nccl != NULL) {
		st = c->lib.nc.ncclAllReduce(y, y, n, ncclFloat, ncclSum,
		    c->lib.nccl, c->st);
		/* a non-blocking communicator may still be connecting */
		if (st == ncclInProgress)
			return nccl_wait(c, "ncclAllReduce", why, whylen);
		if (st != ncclSuccess) {
			/* given up: the peers, whose all-reduce fails or
			   times out too, make a new one with this rank at
			   the next call */
			cuda_nccl_abort(c);
			return medha_why(why, whylen, MEDHA_EIO,
			    "cuda: ncclAllReduce (TP rank %d of %d): %s; "
			    "communicator aborted",
			    c->tpr, c->tp, c->lib.nc.ncclGetErrorString(st));
		}
		return 0;
	}
	if ((rc = cuda_stage(c, n, why, whylen)) != 0)
		return rc;
	if ((rc = cuda_ok(cudaMemcpyAsync(c->s.hb, y, n * sizeof(float),
	                      cudaMemcpyDeviceToHost, c->st),
	         "TP partial sums to the host", why, whylen)) != 0)
		return rc;
	if ((rc = cuda_ok(cudaStreamSynchronize(c->st),
	         "TP partial sums to the host", why, whylen)) != 0)
		return rc;
	if ((rc = host_reduce(c, layer, kind, c->s.hb, n, why, whylen)) != 0)
		return rc;
	if ((rc = cuda_ok(cudaMemcpyAsync(y, c->s.hb, n * sizeof(float),
	                      cudaMemcpyHostToDevice, c->st),
	         "TP sums to the device", why, whylen)) != 0)
		return rc;
	/* hb is read by that copy: wait before it is written again */
	return cuda_ok(cudaStreamSynchronize(c->st), "TP sums to the device",
	    why, whylen);
}

/* ---- KVP ---- */

/* The exchange with every other group; c->s.mrg + at[g]: group g's parts. */
static int
exchange(struct medha_cuda *c, int layer, const float *out, const float *lse,
    size_t *at, char *why, size_t whylen)
{
	const struct medha_cuda_coll *cm = c->rt.f->coll;

	return cm->kvp_exchange(cm->arg, layer, out, lse, (size_t)c->qd,
	    (size_t)c->nh, &c->s.mrg, &c->s.mrg_cap, at, why, whylen);
}

/*
 * The KVP merge of layer l: c->s.attf and c->s.lse (f32, every row) become
 * c->s.att (bf16): merged sequences' rows folded with the other groups'
 * parts in group order, the others' converted.
 */
int
cuda_kvp_merge(struct medha_cuda *c, int layer, int n_tokens, char *why,
    size_t whylen)
{
	const struct medha_batch *b = c->rt.f->b;
	const struct medha_batch_kv *kv = c->rt.f->kv;
	const int kvp = c->rt.f->coll->kvp, hd = c->c.head_dim;
	const size_t ro = (size_t)c->qd, rl = (size_t)c->nh, row = ro + rl;
	const size_t T = (size_t)n_tokens;
	size_t at[MEDHA_KVP_MAX + 1], cur[MEDHA_KVP_MAX], t0, nt;
	float *out, *lse, *dp;
	int rc, g;

	if (kvp < 1 || kvp > MEDHA_KVP_MAX || c->rt.f->coll->kvp_rank < 0 ||
	    c->rt.f->coll->kvp_rank >= kvp)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "KVP group %d of %d", c->rt.f->coll->kvp_rank, kvp);
	/* hb: out rows, then lse rows, then one sequence's parts */
	if ((rc = cuda_stage(c, T * row + (size_t)kvp * T * row, why,
	         whylen)) != 0)
		return rc;
	out = c->s.hb;
	lse = c->s.hb + T * ro;
	if ((rc = cuda_ok(cudaMemcpyAsync(out, c->s.attf,
	                      T * ro * sizeof(float), cudaMemcpyDeviceToHost,
	                      c->st),
	         "KVP parts to the host", why, whylen)) != 0)
		return rc;
	if ((rc = cuda_ok(cudaMemcpyAsync(lse, c->s.lse, T * rl * sizeof(float),
	                      cudaMemcpyDeviceToHost, c->st),
	         "KVP lse to the host", why, whylen)) != 0)
		return rc;
	if ((rc = cuda_ok(medha_k_f32_to_bf16(c->s.att, c->s.attf,
	                      (int64_t)(T * ro), c->st),
	         "medha_k_f32_to_bf16", why, whylen)) != 0)
		return rc;
	if ((rc = cuda_sync(c, "KVP parts to the host", why, whylen)) != 0)
		return rc;
	if ((rc = exchange(c, layer, out, lse, at, why, whylen)) != 0)
		return rc;
	for (g = 0; g < kvp; g++)
		cur[g] = at[g];
	dp = lse + T * rl; /* the device's parts are staged here */
	t0 = 0;
	for (int32_t e = 0; e < b->n_seqs; e++, t0 += nt) {
		int np = 0;
		float *po, *pl;
		nt = (size_t)b->seq[e].n_tokens;
		if (!kv[e].merge)
			continue;
		po = dp;
		for (g = 0; g < kvp; g++)
			np += (int)(kv[e].groups >> g & 1);
		pl = po + (size_t)np * nt * ro;
		np = 0;
		for (g = 0; g < kvp; g++) {
			if (!(kv[e].groups >> g & 1))
				continue;
			memcpy(po + (size_t)np * nt * ro, c->s.mrg + cur[g],
			    nt * ro * sizeof(float));
			memcpy(pl + (size_t)np * nt * rl,
			    c->s.mrg + cur[g] + nt * ro,
			    nt * rl * sizeof(float));
			cur[g] += nt * row;
			np++;
		}
		if ((size_t)np * nt * row > c->s.mrgd_cap) {
			if ((rc = cuda_sync(c, "the last merge", why,
			         whylen)) != 0)
				return rc;
			cudaFree(c->s.mrgd);
			c->s.mrgd_cap = 0;
			if ((rc = cuda_malloc((void **)&c->s.mrgd,
			         (size_t)np * nt * row * sizeof(float), why,
			         whylen, "KVP parts")) != 0)
				return rc;
			c->s.mrgd_cap = (size_t)np * nt * row;
		}
		/* parts, then their lses, as medha_k_attn_merge reads them */
		if ((rc = cuda_ok(cudaMemcpyAsync(c->s.mrgd, po,
		                      (size_t)np * nt * row * sizeof(float),
		                      cudaMemcpyHostToDevice, c->st),
		         "KVP parts to the device", why, whylen)) != 0)
			return rc;
		if ((rc = cuda_ok(medha_k_attn_merge(c->s.att + t0 * ro,
		                      c->s.mrgd,
		                      c->s.mrgd + (size_t)np * nt * ro, np,
		                      (int)nt, c->nh, hd, c->st),
		         "medha_k_attn_merge", why, whylen)) != 0)
			return rc;
		/* po is read by that copy */
		if ((rc = cuda_sync(c, "the KVP merge", why, whylen)) != 0)
			return rc;
	}
	return 0;
}

/* ---- what the call hands back ---- */

int
cuda_head_out(struct medha_cuda *c, const struct medha_cuda_call *f, int nrows,
    char *why, size_t whylen)
{
	const struct medha_batch *b = f->b;
	const int V = c->c.vocab;
	const float *rows = NULL;
	int r = 0, rc;

	if (f->logits != NULL)
		if ((rc = cuda_ok(cudaMemcpyAsync(f->logits, c->s.logits,
		                      (size_t)nrows * (size_t)V * sizeof(float),
		                      cudaMemcpyDeviceToHost, c->st),
		         "downloading logits", why, whylen)) != 0)
			return rc;
	/* a sampler other than greedy draws from its row on the host: the
	   caller's copy, or every row staged in one copy (not one round
	   trip a sequence) */
	if (f->logits != NULL)
		rows = f->logits;
	else
		for (int i = 0; f->samplers != NULL && i < b->n_seqs &&
		     rows == NULL; i++)
			if (f->samplers[i] != NULL &&
			    b->seq[i].logits == MEDHA_LOGITS_LAST &&
			    !medha_sampler_is_greedy(f->samplers[i])) {
				size_t n = (size_t)nrows * (size_t)V;
				if ((rc = cuda_stage(c, n, why, whylen)) != 0)
					return rc;
				if ((rc = cuda_ok(cudaMemcpyAsync(c->s.hb,
				                      c->s.logits,
				                      n * sizeof(float),
				                      cudaMemcpyDeviceToHost,
				                      c->st),
				         "downloading logits rows", why,
				         whylen)) != 0)
					return rc;
				rows = c->s.hb;
			}
	if ((rc = cuda_ok(cudaMemcpyAsync(c->s.hids, c->s.ids,
	                      (size_t)nrows * sizeof(int32_t),
	                      cudaMemcpyDeviceToHost, c->st),
	         "downloading the argmax", why, whylen)) != 0)
		return rc;
	if ((rc = cuda_sync(c, "downloading the argmax", why, whylen)) != 0)
		return rc;
	/* NaN or infinite logits would sample token 0 or nothing: an
	   error, as on the cpu backend; the argmax kernel marks such a
	   row -1 (no scan of rows x vocab floats here) */
	for (int i = 0; i < nrows; i++)
		if (c->s.hids[i] < 0)
			return medha_why(why, whylen, MEDHA_ERANGE,
			    "logits row %d: a token's logit is NaN or "
			    "infinite (the model's numbers overflow or are "
			    "NaN)",
			    i);
	if (f->samplers == NULL)
		return 0;
	for (int i = 0; i < b->n_seqs; i++) {
		const struct medha_batch_seq *s = &b->seq[i];
		struct medha_sampler *sp = f->samplers[i];
		int row = r;
		r += s->logits == MEDHA_LOGITS_ALL    ? s->n_tokens
		    : s->logits == MEDHA_LOGITS_LAST ? 1
		                                     : 0;
		if (sp == NULL || s->logits != MEDHA_LOGITS_LAST)
			continue;
		f->tokens[i] = medha_sampler_is_greedy(sp)
		    ? c->s.hids[row]
		    : medha_sample(sp, rows + (size_t)row * V);
	}
	return 0;
}
