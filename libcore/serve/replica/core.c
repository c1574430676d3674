/*
 * core.c: the replica's scheduler core, its predictor and its
 * tokenizer (core.h), made when the first worker says HELLO (its
 * backend, model, device and layout; -m names the model instead), and
 * made again for a worker of another model or layout once nothing holds
 * state on the old one (rep_core_model_check, rep_core_layout_check).
 * Calls nothing of the replica's: workers.c makes it, every file reads
 * it. The "cpu" device is
 * measured on this machine (engine/measure.h), the products on the
 * model's own weights where the GGUF is at hand.
 */
#include "serve/replica/core.h"

#include "model/gguf.h"
#include "sched/batchcost.h"
#include "engine/backend.h"
#include "engine/measure.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the core and its predictor, from the first worker ---- */

static int
is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* One of the layers' weight matrices (not embeddings, norms, head). */
static int
layer_matrix(const struct medha_tensor *t)
{
	return t->n_dims == 2 && strncmp(t->name, "blk.", 4) == 0;
}

/*
 * The cpu device's products measured on the layers' matrices of g
 * (engine/measure.c); *rate 0 where they could not be. 0 or MEDHA_ENOMEM.
 */
static int
measure_products(struct medha_gpu *cpu, const struct medha_gguf *g,
    int threads, double *rate)
{
	const struct medha_tensor *t, **w = NULL;
	int n = 0, cap = 0, rc;

	*rate = 0;
	for (uint64_t i = 0; (t = medha_gguf_tensor_at(g, i)) != NULL; i++)
		if (layer_matrix(t)) {
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				void *p = medha_reallocarray(w, (size_t)cap,
				    sizeof(*w));
				if (p == NULL) {
					free(w);
					return MEDHA_ENOMEM;
				}
				w = p;
			}
			w[n++] = t;
		}
	rc = n > 0 ? medha_gpu_measure_products(cpu, w, n, threads, rate)
	           : MEDHA_EINVAL;
	free(w);
	if (rc == MEDHA_ENOMEM)
		return rc;
	if (rc != 0)
		*rate = 0;
	return 0;
}

/* Bytes per weight of the layers' matrices as g stores them (0: none). */
static double
stored_weight_bytes(const struct medha_gguf *g)
{
	const struct medha_tensor *t;
	double bytes = 0, n = 0;

	for (uint64_t i = 0; (t = medha_gguf_tensor_at(g, i)) != NULL; i++)
		if (layer_matrix(t)) {
			bytes += (double)t->nbytes;
			n += (double)t->ne[0] * (double)t->ne[1];
		}
	return n > 0 ? bytes / n : 0;
}

static int
make_core_on(struct rep_core *c, const struct medha_replica_config *cfg,
    const struct medha_msg_hello *h, const char *model,
    const struct medha_gguf *gg, struct medha_pred_model *mp, char *why,
    size_t whylen);

int
rep_core_init(struct rep_core *c, const struct medha_replica_config *cfg,
    char *why, size_t whylen)
{
	int rc;

	memset(c, 0, sizeof(*c));
	/* -m: the one model the workers may serve, fingerprinted once */
	if (cfg->model != NULL &&
	    (rc = medha_model_fingerprint(cfg->model, c->fp, why, whylen)) != 0)
		return rc;
	c->fp_fixed = cfg->model != NULL;
	return 0;
}

void
rep_core_free(struct rep_core *c)
{
	medha_sched_free(c->sched);
	if (c->have_pred)
		medha_pred_free(&c->pred);
	medha_tok_close(c->tok);
	memset(c, 0, sizeof(*c));
}

/*
 * The model the first worker's HELLO serves (-m overrides the one it
 * names), resolved and checked against the HELLO, building nothing.
 */
int
rep_core_model(const struct medha_replica_config *cfg,
    const struct medha_msg_hello *h, struct medha_pred_model *m, char *why,
    size_t whylen)
{
	const char *model = cfg->model != NULL ? cfg->model : h->model;
	int rc;

	/* a path a worker names is never opened here: its error would
	   describe any file of this host (what it holds, whether it is
	   there); the operator names the file with -m */
	if (cfg->model == NULL) {
		if (medha_model_builtin(model, m) != 0)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "model \"%.64s\": no built-in model, and the "
			    "scheduler opens no file a worker names: start "
			    "medha-sched with -m MODEL.gguf",
			    model);
	} else if ((rc = medha_model_resolve_why(model, m, why, whylen)) != 0)
		return rc;
	if (m->c.vocab != h->vocab || m->c.dim != h->dim)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "model %s (vocab %d, dim %d) is not the worker's "
		    "(vocab %d, dim %d)",
		    model, m->c.vocab, m->c.dim, h->vocab, h->dim);
	if (strcmp(h->gpu, "cpu") != 0 && medha_gpu_find(h->gpu) == NULL)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "device %s: unknown", h->gpu);
	return 0;
}

/*
 * The scheduler core, its predictor and the tokenizer, from the first
 * worker's HELLO and its model m (rep_core_model).
 */
int
rep_core_make(struct rep_core *c, const struct medha_replica_config *cfg,
    const struct medha_msg_hello *h, struct medha_pred_model *m, char *why,
    size_t whylen)
{
	const char *model = cfg->model != NULL ? cfg->model : h->model;
	struct medha_gguf *gg = NULL; /* the model's file, if it is one */
	int rc;

	if (cfg->model != NULL && is_file(model) &&
	    medha_gguf_open(&gg, model, NULL, 0) != 0)
		gg = NULL;
	rc = make_core_on(c, cfg, h, model, gg, m, why, whylen);
	medha_gguf_close(gg);
	if (rc != 0 && c->have_pred) { /* none made */
		medha_pred_free(&c->pred);
		c->have_pred = 0;
	}
	return rc;
}

int
rep_core_model_check(const struct rep_core *c,
    const struct medha_msg_hello *h, int idle, char *why, size_t whylen)
{
	if (h->fingerprint[0] == '\0')
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "no model fingerprint in the HELLO (a worker of another "
		    "version?)");
	if (c->fp[0] != '\0' && strcmp(h->fingerprint, c->fp) == 0)
		return 0;
	if (c->fp[0] == '\0' && c->sched == NULL)
		return 0;
	if (c->fp_fixed)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "the worker's model %.64s (fingerprint %.12s) is not the "
		    "replica's -m (fingerprint %.12s)",
		    h->model, h->fingerprint, c->fp);
	if (!idle)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "the worker's model %.64s (fingerprint %.12s) is not the "
		    "one the replica's workers serve (fingerprint %.12s)",
		    h->model, h->fingerprint, c->fp);
	/* no worker and nothing in flight: the replica takes the new
	   model (a first worker started on the wrong file, or a
	   stranger's HELLO that came first, must not fix it for good),
	   once the rest of h is found good (rep_core_drop) */
	return 1;
}

static int
same_layout(const struct rep_core *c, const struct medha_msg_hello *h)
{
	return h->tp == c->tp && h->spp == c->spp && h->kvp == c->kvp;
}

int
rep_core_layout_check(const struct rep_core *c,
    const struct medha_msg_hello *h, int nworkers, int idle, int64_t waiting,
    char *why, size_t whylen)
{
	if (c->sched == NULL || same_layout(c, h))
		return 0;
	if (nworkers > 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layout tp %d x spp %d x kvp %d is not that of the "
		    "workers there (tp %d x spp %d x kvp %d)",
		    h->tp, h->spp, h->kvp, c->tp, c->spp, c->kvp);
	if (!idle)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layout tp %d x spp %d x kvp %d is not the one the "
		    "replica's core was made for (tp %d x spp %d x kvp %d), "
		    "and %lld requests wait on it: it changes once none is "
		    "left",
		    h->tp, h->spp, h->kvp, c->tp, c->spp, c->kvp,
		    (long long)waiting);
	/* no worker and nothing in flight: a new core for the new layout
	   (its predictor, KVP groups and ring of batches in flight), once
	   the rest of h is found good (rep_core_drop) */
	return 1;
}

void
rep_core_drop(struct rep_core *c, const struct medha_msg_hello *h)
{
	if (strcmp(h->fingerprint, c->fp) != 0)
		medha_log(MEDHA_LOG_WARN,
		    "model changes from fingerprint %.12s to %.12s (%.64s): "
		    "no worker was connected",
		    c->fp, h->fingerprint, h->model);
	if (!same_layout(c, h))
		medha_log(MEDHA_LOG_WARN,
		    "layout changes from tp %d x spp %d x kvp %d to tp %d x "
		    "spp %d x kvp %d: no worker was connected, nothing in "
		    "flight; a new scheduler core",
		    c->tp, c->spp, c->kvp, h->tp, h->spp, h->kvp);
	medha_sched_free(c->sched);
	c->sched = NULL;
	if (c->have_pred)
		medha_pred_free(&c->pred);
	c->have_pred = 0;
	medha_tok_close(c->tok);
	c->tok = NULL;
	if (!c->fp_fixed) /* -m's stays the replica's */
		c->fp[0] = '\0';
	c->n_layers = 0;
}

/* rep_core_make() on the resolved model m and its open file gg (or NULL). */
static int
make_core_on(struct rep_core *c, const struct medha_replica_config *cfg,
    const struct medha_msg_hello *h, const char *model,
    const struct medha_gguf *gg, struct medha_pred_model *mp, char *why,
    size_t whylen)
{
	struct medha_pred_model m = *mp;
	struct medha_gpu cpu;
	const struct medha_gpu *g;
	struct medha_sched_config sc = cfg->sched;
	int rc;

	if (strcmp(h->gpu, "cpu") == 0) {
		/* the cpu backend serves weights as stored, KV in f32 */
		double wb = gg != NULL ? stored_weight_bytes(gg) : 0;
		if (wb > 0)
			m.w_bytes = wb;
		m.kv_bytes = 4;
		double prod = 0;
		if (medha_gpu_measure_cpu(&cpu, cfg->cpu_threads) != 0 ||
		    (gg != NULL && measure_products(&cpu, gg,
		                       cfg->cpu_threads, &prod) != 0))
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		g = &cpu;
		char pr[96];
		if (prod > 0)
			snprintf(pr, sizeof(pr),
			    "products of the model's weights %.1f GFLOP/s",
			    prod / 1e9);
		else
			snprintf(pr, sizeof(pr),
			    "products guessed at %.0f%% of that",
			    100 * cpu.eff_flops);
		medha_log(MEDHA_LOG_INFO,
		    "cpu device: %.1f GB/s read, %.1f GFLOP/s (%d threads), "
		    "%s; weights %.2f bytes each",
		    cpu.hbm_bw / 1e9, cpu.peak_flops / 1e9, cfg->cpu_threads,
		    pr, m.w_bytes);
	} else if ((g = medha_gpu_find(h->gpu)) == NULL) /* rep_core_model */
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "device %s: unknown", h->gpu);
	if ((rc = medha_pred_init(&c->pred, g, &m, h->tp, h->spp, h->kvp)) != 0)
		return medha_why(why, whylen, rc, "predictor: bad layout");
	c->have_pred = 1;
	/* the workers split the experts whole (--ep): its costs */
	if ((h->caps & MEDHA_HELLO_EP) &&
	    (rc = medha_pred_set_ep(&c->pred, why, whylen)) != 0)
		return rc;
	if (cfg->predictor != NULL &&
	    (rc = medha_pred_load_table(&c->pred, cfg->predictor, why,
	         whylen)) != 0)
		return rc;
	if (cfg->target_auto && sc.chunk == 0) {
		/* the smallest chunk must fit beside decodes, or a prefill
		 * never joins a running batch and requests run one by one */
		double lone = medha_cost_lone(&c->pred, 32, 0).latency;
		if (2 * lone > sc.target) {
			medha_log(MEDHA_LOG_INFO,
			    "target batch time %.0f ms: a 32-token chunk alone "
			    "takes %.0f ms on %s",
			    2e3 * lone, 1e3 * lone, g->name);
			sc.target = 2 * lone;
		}
	}
	sc.block_size = h->block_size;
	sc.kv_blocks = h->n_blocks;
	sc.max_seqs = h->max_seqs;
	/* prefix caching where the workers can share KV blocks */
	sc.prefix_cache = sc.prefix_cache &&
	    (medha_backend_find(h->backend)->caps & MEDHA_BACKEND_FORK);
	/* workers whose window layers give back what their window no
	   longer sees, the prefix index's blocks among them: a request
	   reserves per layer type, and a prefix hit is taken only where
	   its owners' window layers still hold what it needs
	   (sched_prefix.c); across KVP groups (positions of a piece) no
	   prefix is shared */
	sc.window_kv = (h->caps & MEDHA_HELLO_WINDOW_KV) != 0;
	sc.window_exact = sc.window_kv && sc.prefix_cache;
	if (sc.window_exact && h->kvp > 1) {
		medha_log(MEDHA_LOG_INFO,
		    "the workers keep only their windows' KV (--window-kv) "
		    "over %d KVP groups: prefix caching off", h->kvp);
		sc.prefix_cache = 0;
		sc.window_exact = 0;
	}
	if (sc.kvp_max_tokens % sc.block_size != 0)
		sc.kvp_max_tokens -= sc.kvp_max_tokens % sc.block_size;
	if ((rc = medha_sched_init(&c->sched, &sc, &c->pred)) != 0)
		return medha_why(why, whylen, rc, "scheduler: %s",
		    medha_strerror(rc));
	/* a backend that computes nothing makes no text (sim) */
	c->sim = !(medha_backend_find(h->backend)->caps & MEDHA_BACKEND_COMPUTES);
	c->prefix = sc.prefix_cache;
	c->caps = h->caps;
	c->n_layers = m.c.n_layers;
	c->tp = h->tp;
	c->spp = h->spp;
	c->kvp = h->kvp;
	c->vocab = h->vocab;
	c->ctx_len = c->sim ? 0 : m.c.ctx_len;
	snprintf(c->model, sizeof(c->model), "%s", model);
	snprintf(c->backend, sizeof(c->backend), "%s", h->backend);
	if (gg != NULL) {
		char w2[256];
		if (medha_tok_open(&c->tok, gg, w2, sizeof(w2)) != 0)
			medha_log(MEDHA_LOG_WARN,
			    "%s: no tokenizer (%s): token ids only", model, w2);
	}
	if (c->tok == NULL)
		medha_log(MEDHA_LOG_WARN,
		    "no tokenizer for %s: text prompts are refused", model);
	/* the longest token's bytes bound what a context's worth of
	   tokens can cover (intake.c: text_fits) */
	c->max_piece = 1;
	for (size_t i = 0; c->tok != NULL && i < medha_tok_n_vocab(c->tok);
	     i++) {
		const char *p;
		size_t l;
		if (medha_tok_piece(c->tok, (int32_t)i, &p, &l) == 0 &&
		    l > c->max_piece)
			c->max_piece = l;
	}
	/* the model's fingerprint, where -m gave none: the first
	   worker's */
	if (c->fp[0] == '\0')
		memcpy(c->fp, h->fingerprint, sizeof(c->fp));
	return 0;
}
