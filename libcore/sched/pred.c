/*
 * pred.c: the runtime predictor's built-in GPUs and models, model shapes
 * read from GGUF headers, and the analytic cost model (pred.h).
 *
 * Every operator is a roofline: time = max(FLOPs / (peak * efficiency),
 * bytes / (HBM bandwidth * efficiency)), per layer and per worker of a TP
 * group, times the layers of one pipeline stage. Collectives are ring
 * all-reduces or sends over NVLink inside a node and InfiniBand across
 * nodes, each with a fixed latency. Each medha_pred_* function takes its
 * time from the measured table (pred_table.c) when that has the operator
 * and from the formulas here otherwise. All are pure, allocate nothing,
 * cost O(1) (O(log n) with a table) and never decrease when a token or kv
 * argument grows: the scheduler binary-searches chunk sizes over them.
 */
#include "sched/pred.h"
#include "model/gguf.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define ACT_RESERVE GIB /* activations and workspace, per worker */

static const struct medha_gpu gpus[] = {
    /*
     * name, peak bf16, HBM, capacity, NVLink (one direction), IB per
     * GPU, GPUs per node, eff flops/attn/bw/link, launch, comm latency.
     */
    {"a100", 312e12, 2.039e12, 80e9, 300e9, 25e9, 8, 0.6, 0.5, 0.8, 0.7, 30e-6,
        10e-6},
    {"h100", 989e12, 3.35e12, 80e9, 450e9, 50e9, 8, 0.6, 0.5, 0.8, 0.7, 30e-6,
        10e-6},
};

static const struct medha_model models[] = {
    /* name, layers, hidden, heads, kv heads, head dim, ffn, vocab, w, kv */
    {"llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 2, 2},
    {"llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 2, 2},
    {"smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, 2, 2},
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *op_names[MEDHA_OP_COUNT] = {
    "linear",
    "attn_prefill",
    "attn_decode",
    "spp_send",
    "kvp_merge",
    "lm_head",
};

const char *
medha_op_name(int op)
{
	if (op < 0 || op >= MEDHA_OP_COUNT)
		return NULL;
	return op_names[op];
}

int
medha_op_find(const char *name)
{
	int i;

	for (i = 0; i < MEDHA_OP_COUNT; i++)
		if (strcmp(name, op_names[i]) == 0)
			return i;
	return MEDHA_ENOTFOUND;
}

const struct medha_gpu *
medha_gpu_find(const char *name)
{
	size_t i;

	if (name == NULL)
		return NULL;
	for (i = 0; i < NELEM(gpus); i++)
		if (strcasecmp(name, gpus[i].name) == 0)
			return &gpus[i];
	return NULL;
}

/* ---------------------------------------------------------------- */
/* Model shapes: built-in names and GGUF headers                      */

/* One positive integer hyper-parameter "{arch}.{what}" within [1, max]. */
static int
gguf_int(struct medha_gguf *g, const char *arch, const char *what, uint64_t max,
    int *out, char *why, size_t whylen)
{
	char key[128];
	uint64_t v;
	int rc;

	snprintf(key, sizeof(key), "%s.%s", arch, what);
	rc = medha_gguf_get_u64(g, key, &v);
	if (rc == MEDHA_ENOTFOUND) {
		medha_why(why, whylen, 0, "missing key %s", key);
		return MEDHA_EFORMAT;
	}
	if (rc != 0 || v < 1 || v > max) {
		medha_why(why, whylen, 0, "key %s: %s", key,
		    rc == MEDHA_EFORMAT ? "not an integer" : "out of range");
		return rc == MEDHA_EFORMAT ? rc : MEDHA_ERANGE;
	}
	*out = (int)v;
	return 0;
}

/* Shape of the model in the GGUF file at path. */
static int
model_from_gguf(const char *path, struct medha_model *m, char *why,
    size_t whylen)
{
	struct medha_gguf *g;
	char arch[32], key[128];
	const char *base;
	uint64_t n;
	size_t len;
	int rc;

	if ((rc = medha_gguf_open(&g, path, why, whylen)) != 0)
		return rc;
	memset(m, 0, sizeof(*m));
	rc = medha_gguf_get_strbuf(g, "general.architecture", arch,
	    sizeof(arch));
	if (rc != 0) {
		medha_why(why, whylen, 0, "general.architecture: %s",
		    medha_strerror(rc));
		rc = MEDHA_EFORMAT;
		goto out;
	}
	if (strcmp(arch, "llama") != 0) {
		medha_why(why, whylen, 0,
		    "architecture \"%s\" not supported "
		    "(llama only)",
		    arch);
		rc = MEDHA_EUNSUP;
		goto out;
	}
	if ((rc = gguf_int(g, arch, "block_count", 1 << 16, &m->n_layers, why,
	         whylen)) != 0 ||
	    (rc = gguf_int(g, arch, "embedding_length", 1 << 20, &m->hidden,
	         why, whylen)) != 0 ||
	    (rc = gguf_int(g, arch, "attention.head_count", 1 << 16,
	         &m->n_heads, why, whylen)) != 0 ||
	    (rc = gguf_int(g, arch, "feed_forward_length", 1 << 24, &m->ffn,
	         why, whylen)) != 0)
		goto out;
	snprintf(key, sizeof(key), "%s.attention.head_count_kv", arch);
	m->n_kv_heads = m->n_heads;
	if (medha_gguf_find(g, key) >= 0 &&
	    (rc = gguf_int(g, arch, "attention.head_count_kv",
	         (uint64_t)m->n_heads, &m->n_kv_heads, why, whylen)) != 0)
		goto out;
	snprintf(key, sizeof(key), "%s.attention.key_length", arch);
	m->head_dim = m->hidden / m->n_heads;
	if (medha_gguf_find(g, key) >= 0 &&
	    (rc = gguf_int(g, arch, "attention.key_length", 1 << 16,
	         &m->head_dim, why, whylen)) != 0)
		goto out;
	if (m->head_dim < 1 || m->n_heads % m->n_kv_heads != 0) {
		medha_why(why, whylen, 0, "bad attention shape (%s)",
		    m->head_dim < 1 ? "head dimension 0"
		                    : "query heads not a multiple of kv heads");
		rc = MEDHA_EFORMAT;
		goto out;
	}
	snprintf(key, sizeof(key), "%s.vocab_size", arch);
	if (medha_gguf_find(g, key) >= 0) {
		if ((rc = gguf_int(g, arch, "vocab_size", 1 << 24, &m->vocab,
		         why, whylen)) != 0)
			goto out;
	} else if (medha_gguf_arr_len(g, "tokenizer.ggml.tokens", &n, NULL) ==
	        0 &&
	    n >= 1 && n <= (1 << 24)) {
		m->vocab = (int)n;
	} else {
		medha_why(why, whylen, 0,
		    "no vocabulary size (%s.vocab_size or "
		    "%s)",
		    arch, "tokenizer.ggml.tokens");
		rc = MEDHA_EFORMAT;
		goto out;
	}
	if (medha_gguf_get_strbuf(g, "general.name", m->name,
	        sizeof(m->name)) != 0 ||
	    m->name[0] == '\0') {
		base = strrchr(path, '/');
		base = base != NULL ? base + 1 : path;
		len = strlen(base);
		if (len > 5 && strcasecmp(base + len - 5, ".gguf") == 0)
			len -= 5;
		if (len > sizeof(m->name) - 1)
			len = sizeof(m->name) - 1;
		memcpy(m->name, base, len);
		m->name[len] = '\0';
	}
	m->w_bytes = 2;
	m->kv_bytes = 2;
	rc = 0;
out:
	medha_gguf_close(g);
	return rc;
}

int
medha_model_resolve_why(const char *name, struct medha_model *m, char *why,
    size_t whylen)
{
	struct stat st;
	size_t i;

	MEDHA_ASSERT(name != NULL && m != NULL);
	for (i = 0; i < NELEM(models); i++)
		if (strcasecmp(name, models[i].name) == 0) {
			*m = models[i];
			return 0;
		}
	if (stat(name, &st) != 0 || !S_ISREG(st.st_mode) ||
	    access(name, R_OK) != 0) {
		medha_why(why, whylen, 0,
		    "unknown model \"%s\" (neither a built-in "
		    "name nor a readable file)",
		    name);
		return MEDHA_ENOTFOUND;
	}
	return model_from_gguf(name, m, why, whylen);
}

int
medha_model_resolve(const char *name, struct medha_model *m)
{
	char why[256];
	int rc;

	why[0] = '\0';
	rc = medha_model_resolve_why(name, m, why, sizeof(why));
	if (rc != 0 && rc != MEDHA_ENOTFOUND)
		medha_log(MEDHA_LOG_WARN, "%s: %s", name, why);
	return rc;
}

double
medha_model_layer_params(const struct medha_model *m)
{
	double h = m->hidden, d = m->head_dim;

	return h * m->n_heads * d + 2 * h * m->n_kv_heads * d +
	    m->n_heads * d * h + 3 * h * m->ffn;
}

int
medha_pred_init(struct medha_pred *p, const struct medha_gpu *g,
    const struct medha_model *m, int tp, int spp, int kvp)
{
	MEDHA_ASSERT(p != NULL && g != NULL && m != NULL);
	memset(p, 0, sizeof(*p));
	if (tp < 1 || spp < 1 || kvp < 1 || m->n_layers < 1 ||
	    spp > m->n_layers)
		return MEDHA_EINVAL;
	if (m->hidden < 1 || m->n_heads < 1 || m->n_kv_heads < 1 ||
	    m->head_dim < 1 || m->ffn < 1 || m->vocab < 1 ||
	    !(m->w_bytes > 0) || !(m->kv_bytes > 0))
		return MEDHA_EINVAL;
	p->gpu = *g;
	p->model = *m;
	p->tp = tp;
	p->spp = spp;
	p->kvp = kvp;
	p->stage_layers = (m->n_layers + spp - 1) / spp;
	p->table = NULL;
	return 0;
}

/* ---------------------------------------------------------------- */
/* The analytic model: per layer, per worker                          */

static double
roofline(const struct medha_pred *p, double flops, double bytes, double eff)
{
	double tc = flops / (p->gpu.peak_flops * eff);
	double tm = bytes / (p->gpu.hbm_bw * p->gpu.eff_bw);

	return tc > tm ? tc : tm;
}

/* KV heads one worker holds: ceil(hkv / tp), replicated when tp > hkv. */
static double
kv_heads_local(const struct medha_pred *p)
{
	return (double)((p->model.n_kv_heads + p->tp - 1) / p->tp);
}

/*
 * QKV, O and MLP GEMMs of T tokens: all weights read once, activations
 * read and written in bf16 (per token: hidden state in and out of the
 * attention block and the MLP, 2 * hidden; gate and up outputs, 2 * ffn;
 * Q, K and V, (hq + 2 hkv) d; the sharded ones divided by tp). This is
 * an approximation of the traffic, not a kernel-by-kernel count. With
 * tp > 1, two ring all-reduces of the T x hidden bf16 output per layer.
 */
static double
an_linear(const struct medha_pred *p, double T)
{
	const struct medha_model *m = &p->model;
	double tp = p->tp, P = medha_model_layer_params(m);
	double flops, bytes, t, ar, link;

	if (!(T > 0))
		return 0;
	flops = 2 * T * P / tp;
	bytes = P * m->w_bytes / tp +
	    2 * T *
	        (2.0 * m->hidden + 2.0 * m->ffn / tp +
	            (m->n_heads + 2.0 * m->n_kv_heads) * m->head_dim / tp);
	t = roofline(p, flops, bytes, p->gpu.eff_flops) + p->gpu.launch_s;
	if (p->tp > 1) {
		link = p->tp <= p->gpu.gpus_per_node ? p->gpu.nvlink_bw
		                                     : p->gpu.net_bw;
		ar = 2 * (tp - 1) / tp * (T * m->hidden * 2) /
		        (link * p->gpu.eff_link) +
		    p->gpu.comm_lat_s;
		t += 2 * ar;
	}
	return t;
}

/* Causal attention of a chunk of c tokens after kv cached ones. */
static double
an_attn_prefill(const struct medha_pred *p, double c, double kv)
{
	const struct medha_model *m = &p->model;
	double tp = p->tp, d = m->head_dim, hq = m->n_heads;
	double flops, bytes;

	if (!(c > 0))
		return 0;
	if (!(kv > 0))
		kv = 0;
	flops = 4 * c * (kv + (c + 1) / 2.0) * d * hq / tp;
	bytes = (kv + c) * 2 * d * kv_heads_local(p) * m->kv_bytes +
	    2 * c * d * hq / tp * 2;
	return roofline(p, flops, bytes, p->gpu.eff_attn);
}

/* n decode queries against K cached tokens in all. */
static double
an_attn_decode(const struct medha_pred *p, double n, double K)
{
	const struct medha_model *m = &p->model;
	double tp = p->tp, d = m->head_dim, hq = m->n_heads;
	double flops, bytes;

	if (!(n > 0))
		return 0;
	if (!(K > 0))
		K = 0;
	flops = 4 * K * d * hq / tp;
	bytes =
	    K * 2 * d * kv_heads_local(p) * m->kv_bytes + n * d * hq / tp * 4;
	return roofline(p, flops, bytes, p->gpu.eff_attn);
}

/* One stage boundary: each TP rank sends its 1/tp of T hidden states. */
static double
an_spp_send(const struct medha_pred *p, double T)
{
	double link;

	if (p->spp == 1 || !(T > 0))
		return 0;
	link = p->tp * p->spp > p->gpu.gpus_per_node ? p->gpu.net_bw
	                                             : p->gpu.nvlink_bw;
	return T * p->model.hidden * 2 / p->tp / (link * p->gpu.eff_link) +
	    p->gpu.comm_lat_s;
}

/* All-gather of partial outputs and log-sum-exps from g KVP groups. */
static double
an_kvp_merge(const struct medha_pred *p, double T, double g)
{
	const struct medha_model *m = &p->model;
	double hq = (double)m->n_heads / p->tp, bytes;

	if (!(g > 1) || !(T > 0))
		return 0;
	bytes = T * hq * m->head_dim * 2 + T * hq * 4;
	return (g - 1) * bytes / (p->gpu.net_bw * p->gpu.eff_link) +
	    p->gpu.comm_lat_s;
}

/* Logits of n last tokens: the whole op, once. */
static double
an_lm_head(const struct medha_pred *p, double n)
{
	const struct medha_model *m = &p->model;
	double hv = (double)m->hidden * m->vocab;

	if (!(n > 0))
		return 0;
	return roofline(p, 2 * n * hv / p->tp, hv * m->w_bytes / p->tp,
	    p->gpu.eff_flops);
}

double
medha_pred_analytic(const struct medha_pred *p, int op, int64_t tokens,
    int64_t kv)
{
	double L = p->stage_layers, t = (double)tokens, k = (double)kv;

	switch (op) {
	case MEDHA_OP_LINEAR: return L * an_linear(p, t);
	case MEDHA_OP_ATTN_PREFILL: return L * an_attn_prefill(p, t, k);
	case MEDHA_OP_ATTN_DECODE: return L * an_attn_decode(p, t, k);
	case MEDHA_OP_SPP_SEND: return an_spp_send(p, t);
	case MEDHA_OP_KVP_MERGE: return L * an_kvp_merge(p, t, k);
	case MEDHA_OP_LM_HEAD: return an_lm_head(p, t);
	}
	return 0;
}

/* ---------------------------------------------------------------- */
/* The operators: table first, analytic otherwise                     */

double
medha_pred_linear(const struct medha_pred *p, int64_t tokens)
{
	double s;

	if (tokens <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_LINEAR, (double)tokens, 0,
	        &s))
		return s * p->stage_layers;
	return p->stage_layers * an_linear(p, (double)tokens);
}

double
medha_pred_attn_prefill(const struct medha_pred *p, int64_t chunk, int64_t kv)
{
	double s;

	if (chunk <= 0)
		return 0;
	if (kv < 0)
		kv = 0;
	if (medha_table_lookup(p->table, MEDHA_OP_ATTN_PREFILL, (double)chunk,
	        (double)kv, &s))
		return s * p->stage_layers;
	return p->stage_layers * an_attn_prefill(p, (double)chunk, (double)kv);
}

double
medha_pred_attn_decode(const struct medha_pred *p, int64_t n_seqs,
    int64_t kv_total)
{
	double s;

	if (n_seqs <= 0)
		return 0;
	if (kv_total < 0)
		kv_total = 0;
	if (medha_table_lookup(p->table, MEDHA_OP_ATTN_DECODE, (double)n_seqs,
	        (double)kv_total, &s))
		return s * p->stage_layers;
	return p->stage_layers *
	    an_attn_decode(p, (double)n_seqs, (double)kv_total);
}

double
medha_pred_spp_send(const struct medha_pred *p, int64_t tokens)
{
	double s;

	if (p->spp == 1 || tokens <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_SPP_SEND, (double)tokens, 0,
	        &s))
		return s;
	return an_spp_send(p, (double)tokens);
}

double
medha_pred_kvp_merge(const struct medha_pred *p, int64_t tokens, int groups)
{
	double s;

	if (groups <= 1 || tokens <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_KVP_MERGE, (double)tokens,
	        (double)groups, &s))
		return s * p->stage_layers;
	return p->stage_layers *
	    an_kvp_merge(p, (double)tokens, (double)groups);
}

double
medha_pred_lm_head(const struct medha_pred *p, int64_t n_seqs)
{
	double s;

	if (n_seqs <= 0)
		return 0;
	if (medha_table_lookup(p->table, MEDHA_OP_LM_HEAD, (double)n_seqs, 0,
	        &s))
		return s;
	return an_lm_head(p, (double)n_seqs);
}

/* ---------------------------------------------------------------- */
/* Memory                                                             */

/*
 * The stage's layers plus both the embedding (stage 0) and the output
 * head (last stage): counting both on every stage errs on the safe side.
 */
double
medha_pred_weight_bytes(const struct medha_pred *p)
{
	const struct medha_model *m = &p->model;

	return (p->stage_layers * medha_model_layer_params(m) +
	           2.0 * m->vocab * m->hidden) *
	    m->w_bytes / p->tp;
}

double
medha_pred_kv_bytes_per_token(const struct medha_pred *p)
{
	return 2.0 * p->stage_layers * kv_heads_local(p) * p->model.head_dim *
	    p->model.kv_bytes;
}

int64_t
medha_pred_kv_capacity(const struct medha_pred *p, double mem_util)
{
	double free_b, n;

	free_b = p->gpu.mem_bytes * mem_util - medha_pred_weight_bytes(p) -
	    ACT_RESERVE;
	if (!(free_b > 0))
		return 0;
	n = floor(free_b / medha_pred_kv_bytes_per_token(p));
	if (n >= 9.2e18)
		return INT64_MAX;
	return (int64_t)n;
}
