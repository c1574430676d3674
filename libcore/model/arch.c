/*
 * arch.c: the architecture as data (struct medha_arch, model.h), filled
 * from each family's GGUF metadata as llama.cpp reads it
 * (src/llama-model.cpp's hyper-parameters, src/models/<arch>.cpp's
 * graphs), and what a layer's window and RoPE are. A key medha does not
 * act on is never passed over in silence: a scaling type, a window
 * pattern or an architecture it lacks is refused with the key's name.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
	A_LLAMA,
	A_QWEN2,
	A_QWEN3,
	A_GEMMA2,
	A_GEMMA3,
	A_PHI3,
	A_QWEN2MOE,
	A_QWEN3MOE,
	A_LLAMA4
};

static const char *const arch_names[] = {"llama", "qwen2", "qwen3", "gemma2",
    "gemma3", "phi3", "qwen2moe", "qwen3moe", "llama4"};

/* key "<arch>.<k>" into buf */
static const char *
akey(char *buf, size_t n, const char *arch, const char *k)
{
	snprintf(buf, n, "%s.%s", arch, k);
	return buf;
}

/* An optional float key: 0 and *v set, 1 absent, or an error. */
static int
opt_f(const struct medha_gguf *g, const char *arch, const char *k, float *v,
    char *why, size_t whylen)
{
	char key[128];
	double d;
	int rc;

	akey(key, sizeof(key), arch, k);
	if ((rc = medha_gguf_get_f64(g, key, &d)) == MEDHA_ENOTFOUND)
		return 1;
	if (rc != 0)
		return medha_why(why, whylen, rc, "metadata %s: %s", key,
		    medha_strerror(rc));
	if (!isfinite(d) || d < 0)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "metadata %s: %g is not a number >= 0", key, d);
	*v = (float)d;
	return 0;
}

/* An optional integer key in [lo, hi]: 0 and *v set, 1 absent, or error. */
static int
opt_i(const struct medha_gguf *g, const char *arch, const char *k, int64_t lo,
    int64_t hi, int64_t *v, char *why, size_t whylen)
{
	char key[128];
	int64_t x;
	int rc;

	akey(key, sizeof(key), arch, k);
	if ((rc = medha_gguf_get_i64(g, key, &x)) == MEDHA_ENOTFOUND)
		return 1;
	if (rc != 0)
		return medha_why(why, whylen, rc, "metadata %s: %s", key,
		    medha_strerror(rc));
	if (x < lo || x > hi)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "metadata %s: %lld is outside what medha does [%lld, "
		    "%lld]",
		    key, (long long)x, (long long)lo, (long long)hi);
	*v = x;
	return 0;
}

/* read_window's flags */
enum {
	W_NEED = 1, /* the key must be there */
	W_WIDE = 2  /* a window at least the context is no window */
};

/* The sliding window, if the file has one: checked against the context.
   A window larger than the context is refused, but with W_WIDE, where it
   is read as no window: a real Phi-3.5 says 262144 with a context of
   131072, and llama.cpp drops phi3 windows altogether. */
static int
read_window(const struct medha_gguf *g, const char *arch,
    struct medha_model_config *c, int flags, int64_t dflt, char *why,
    size_t whylen)
{
	char key[128];
	int64_t w = dflt;
	int rc;

	if ((rc = opt_i(g, arch, "attention.sliding_window", 0, INT32_MAX, &w,
	         why, whylen)) < 0)
		return rc;
	if (rc == 1 && (flags & W_NEED))
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "missing key %s",
		    akey(key, sizeof(key), arch, "attention.sliding_window"));
	if ((flags & W_WIDE) && c->ctx_len > 0 && w >= c->ctx_len)
		w = 0;
	/* (gemma2's default of 4096, where the key is absent, is not the
	   file's to answer for) */
	if (rc == 0 && w > 0 && c->ctx_len > 0 && w > c->ctx_len)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "metadata %s: a window of %lld is larger than the context "
		    "(%lld)",
		    akey(key, sizeof(key), arch, "attention.sliding_window"),
		    (long long)w, (long long)c->ctx_len);
	c->a.swa = (int)w;
	return 0;
}

/* rope.scaling.*: the type and what it needs */
static int
read_scaling(const struct medha_gguf *g, const char *arch,
    struct medha_model_config *c, char *why, size_t whylen)
{
	struct medha_arch *a = &c->a;
	char key[128], t[32] = "none";
	int64_t orig = c->ctx_len;
	int rc;

	akey(key, sizeof(key), arch, "rope.scaling.type");
	if (medha_gguf_find(g, key) >= 0 &&
	    (rc = medha_gguf_get_strbuf(g, key, t, sizeof(t))) != 0)
		return medha_why(why, whylen, rc, "metadata %s: %s", key,
		    medha_strerror(rc));
	if (strcmp(t, "none") == 0)
		a->rope_scaling = MEDHA_ROPE_SCALING_NONE;
	else if (strcmp(t, "linear") == 0)
		a->rope_scaling = MEDHA_ROPE_SCALING_LINEAR;
	else if (strcmp(t, "yarn") == 0)
		a->rope_scaling = MEDHA_ROPE_SCALING_YARN;
	else if (strcmp(t, "longrope") == 0)
		a->rope_scaling = MEDHA_ROPE_SCALING_LONGROPE;
	else
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "metadata %s: rope scaling \"%s\" is not supported "
		    "(none, linear, yarn, longrope)",
		    key, t);
	a->rope_factor = 1;
	a->yarn_attn_factor = 1;
	a->yarn_beta_fast = 32;
	a->yarn_beta_slow = 1;
	if ((rc = opt_f(g, arch, "rope.scaling.factor", &a->rope_factor, why,
	         whylen)) < 0 ||
	    (rc = opt_f(g, arch, "rope.scaling.attn_factor",
	         &a->yarn_attn_factor, why, whylen)) < 0 ||
	    (rc = opt_f(g, arch, "rope.scaling.yarn_beta_fast",
	         &a->yarn_beta_fast, why, whylen)) < 0 ||
	    (rc = opt_f(g, arch, "rope.scaling.yarn_beta_slow",
	         &a->yarn_beta_slow, why, whylen)) < 0 ||
	    (rc = opt_i(g, arch, "rope.scaling.original_context_length", 1,
	         INT32_MAX, &orig, why, whylen)) < 0)
		return rc;
	a->rope_orig_ctx = orig;
	if (a->rope_scaling == MEDHA_ROPE_SCALING_NONE)
		a->rope_factor = 1;
	if (!(a->rope_factor > 0))
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "metadata %s: %g is not a positive number",
		    akey(key, sizeof(key), arch, "rope.scaling.factor"),
		    (double)a->rope_factor);
	if (a->rope_scaling == MEDHA_ROPE_SCALING_YARN) {
		a->yarn_ext_factor = 1;
		if ((rc = opt_f(g, arch, "rope.scaling.yarn_ext_factor",
		         &a->yarn_ext_factor, why, whylen)) < 0)
			return rc;
		if (orig < 1)
			return medha_why(why, whylen, MEDHA_ENOTFOUND,
			    "missing key %s (yarn needs it)",
			    akey(key, sizeof(key), arch,
			        "rope.scaling.original_context_length"));
	}
	/* what changes YaRN's attention factor in llama.cpp, not here */
	if (medha_gguf_find(g, akey(key, sizeof(key), arch,
	                           "rope.scaling.yarn_log_multiplier")) >= 0 ||
	    medha_gguf_find(g, akey(key, sizeof(key), arch,
	                           "rope.scaling.yarn_attn_factor")) >= 0)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "metadata %s is not supported", key);
	return 0;
}

/*
 * The experts' keys (llama.cpp's hparams): a routed FFN where the file
 * has expert_count (need: it must, and a top-k). Keys that change the
 * routing in ways medha does not do are refused by name.
 */
static int
read_experts(const struct medha_gguf *g, const char *arch,
    struct medha_model_config *c, int need, char *why, size_t whylen)
{
	struct medha_arch *a = &c->a;
	char key[128];
	int64_t ne = 0, nu = 0, ef = 0, sf = 0, step = 1;
	float ws = 1;
	int rc;

	if ((rc = opt_i(g, arch, "expert_count", 0, 4096, &ne, why,
	         whylen)) < 0)
		return rc;
	if (ne == 0 && !need)
		return 0;
	if (ne < 1)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "missing key %s (%s has experts)",
		    akey(key, sizeof(key), arch, "expert_count"), arch);
	if ((rc = opt_i(g, arch, "expert_used_count", 1, ne, &nu, why,
	         whylen)) < 0)
		return rc;
	if (rc == 1)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "missing key %s",
		    akey(key, sizeof(key), arch, "expert_used_count"));
	if ((rc = opt_i(g, arch, "expert_feed_forward_length", 1, 1 << 20,
	         &ef, why, whylen)) < 0 ||
	    (rc = opt_i(g, arch, "expert_shared_feed_forward_length", 0,
	         1 << 20, &sf, why, whylen)) < 0 ||
	    (rc = opt_i(g, arch, "interleave_moe_layer_step", 1, 1024, &step,
	         why, whylen)) < 0 ||
	    (rc = opt_f(g, arch, "expert_weights_scale", &ws, why,
	         whylen)) < 0)
		return rc;
	if (ws != 0 && ws != 1)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "metadata %s: a scale of %g is not supported (1)",
		    akey(key, sizeof(key), arch, "expert_weights_scale"),
		    (double)ws);
	if (medha_gguf_find(g, akey(key, sizeof(key), arch,
	                           "expert_gating_func")) >= 0 ||
	    medha_gguf_find(g, akey(key, sizeof(key), arch,
	                           "expert_group_count")) >= 0)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "metadata %s is not supported (%s routes by its own rule)",
		    key, arch);
	a->n_expert = (int)ne;
	a->n_expert_used = (int)nu;
	/* llama.cpp's default: the FFN's rows over the top-k */
	a->expert_ffn_dim = ef > 0 ? (int)ef : c->ffn_dim / (int)nu;
	a->shexp_ffn_dim = (int)sf;
	a->moe_step = (int)step;
	return 0;
}

/* Llama 4 (src/models/llama4.cpp): a routed FFN every
   interleave_moe_layer_step layers, with a shared expert of the
   experts' size, sigmoid top-k applied to the input; chunked attention
   of 8192 on three layers in four (sliding_window_pattern), the fourth
   without RoPE and with temperature tuning, L2 Q/K norm on the others;
   a file with attention.sliding_window 0 has none of that but the
   experts. */
static int
read_llama4(const struct medha_gguf *g, struct medha_model_config *c,
    char *why, size_t whylen)
{
	struct medha_arch *a = &c->a;
	int64_t w = -1, pat = 4;
	int rc;

	if ((rc = read_experts(g, "llama4", c, 1, why, whylen)) != 0)
		return rc;
	a->shexp_ffn_dim = a->expert_ffn_dim;
	a->moe_gating = MEDHA_MOE_SIGMOID;
	a->moe_weight_in = 1;
	if ((rc = opt_i(g, "llama4", "attention.sliding_window", 0, INT32_MAX,
	         &w, why, whylen)) < 0 ||
	    (rc = opt_i(g, "llama4", "attention.sliding_window_pattern", 1,
	         1024, &pat, why, whylen)) < 0)
		return rc;
	if (w == 0)
		return 0;
	a->chunk = 8192; /* llama.cpp's, whatever the file says */
	a->swa_pattern = (int)pat;
	a->nope_step = 4;
	a->qk_l2norm = c->a.n_expert != 128; /* Maverick: none */
	a->attn_temp_scale = 0.1f;
	a->attn_temp_floor = 8192;
	return 0;
}

int
medha_arch_check(const char *arch, char *why, size_t whylen)
{
	int id;

	for (id = 0; id < (int)(sizeof(arch_names) / sizeof(*arch_names));
	     id++)
		if (strcmp(arch, arch_names[id]) == 0)
			return id;
	return medha_why(why, whylen, MEDHA_EUNSUP,
	    "metadata general.architecture: \"%s\" is not supported "
	    "(llama, qwen2, qwen3, gemma2, gemma3, phi3, qwen2moe, "
	    "qwen3moe, llama4)",
	    arch);
}

/* The architecture's own keys and defaults into c->a. */
int
medha_arch_read(const struct medha_gguf *g, const char *arch,
    struct medha_model_config *c, char *why, size_t whylen)
{
	struct medha_arch *a = &c->a;
	char key[128];
	int id, rc;
	int64_t pat;

	if ((id = medha_arch_check(arch, why, whylen)) < 0)
		return id;
	memset(a, 0, sizeof(*a));
	snprintf(a->name, sizeof(a->name), "%s", arch);
	if ((rc = read_scaling(g, arch, c, why, whylen)) != 0)
		return rc;
	switch (id) {
	case A_LLAMA: /* Mistral v0.1: a window on every layer; Mixtral:
		                 experts, normalised softmax weights */
		rc = read_window(g, arch, c, 0, 0, why, whylen);
		if (rc == 0)
			rc = read_experts(g, arch, c, 0, why, whylen);
		/* llama.cpp's llama graph: experts of feed_forward_length
		   rows, no shared expert */
		a->expert_ffn_dim = c->ffn_dim;
		a->shexp_ffn_dim = 0;
		a->moe_norm_w = 1;
		break;
	case A_QWEN2MOE: /* a shared expert with a sigmoid gate */
		a->rope_type = MEDHA_ROPE_NEOX;
		a->qkv_bias = 1;
		if ((rc = read_experts(g, arch, c, 1, why, whylen)) != 0)
			return rc;
		if (a->shexp_ffn_dim == 0)
			a->shexp_ffn_dim = c->ffn_dim;
		a->shexp_gate = 1;
		rc = read_window(g, arch, c, 0, 0, why, whylen);
		break;
	case A_QWEN3MOE:
		a->rope_type = MEDHA_ROPE_NEOX;
		a->qk_norm = 1;
		a->moe_norm_w = 1;
		if ((rc = read_experts(g, arch, c, 1, why, whylen)) != 0)
			return rc;
		/* llama.cpp has no shared expert for qwen3moe */
		a->shexp_ffn_dim = 0;
		rc = read_window(g, arch, c, 0, 0, why, whylen);
		break;
	case A_LLAMA4:
		rc = read_llama4(g, c, why, whylen);
		break;
	case A_QWEN2:
		a->rope_type = MEDHA_ROPE_NEOX;
		a->qkv_bias = 1;
		rc = read_window(g, arch, c, 0, 0, why, whylen);
		break;
	case A_QWEN3:
		a->rope_type = MEDHA_ROPE_NEOX;
		a->qk_norm = 1;
		rc = read_window(g, arch, c, 0, 0, why, whylen);
		break;
	case A_PHI3:
		a->rope_type = MEDHA_ROPE_NEOX;
		a->fused_gate_up = 1;
		a->q_prescale = 1;
		rc = read_window(g, arch, c, W_WIDE, 0, why, whylen);
		break;
	case A_GEMMA2:
	case A_GEMMA3:
		a->rope_type = MEDHA_ROPE_NEOX;
		a->ffn_act = MEDHA_FFN_GELU;
		a->post_norm = 1;
		a->q_prescale = 1;
		a->embd_scale = sqrtf((float)c->dim);
		/* llama.cpp's rule: the 27B models (46 or 62 layers) scale
		   by dim / heads, the others by the head size */
		if (c->n_layers == (id == A_GEMMA2 ? 46 : 62))
			a->attn_scale =
			    1.0f / sqrtf((float)(c->dim / c->n_heads));
		if (id == A_GEMMA2) {
			a->attn_softcap = 50.0f;
			a->final_softcap = 30.0f;
			a->swa_pattern = 2;
			rc = read_window(g, arch, c, 0, 4096, why, whylen);
		} else {
			a->qk_norm = 1;
			a->swa_pattern = 6;
			rc = read_window(g, arch, c, 0, 0, why, whylen);
			if (rc == 0 && a->swa > 0)
				a->swa_rope_base = 10000.0f;
		}
		if (rc != 0)
			return rc;
		if ((rc = opt_f(g, arch, "attn_logit_softcapping",
		         &a->attn_softcap, why, whylen)) < 0 ||
		    (rc = opt_f(g, arch, "final_logit_softcapping",
		         &a->final_softcap, why, whylen)) < 0 ||
		    (rc = opt_f(g, arch, "rope.freq_base_swa",
		         &a->swa_rope_base, why, whylen)) < 0)
			return rc;
		if (id == A_GEMMA3 && a->attn_softcap > 0)
			return medha_why(why, whylen, MEDHA_EUNSUP,
			    "metadata %s: gemma3 has no attention soft-cap",
			    akey(key, sizeof(key), arch,
			        "attn_logit_softcapping"));
		rc = 0;
		break;
	}
	if (rc != 0)
		return rc;
	/* a pattern in the file: an integer period (an array of flags is
	   not read) */
	akey(key, sizeof(key), arch, "attention.sliding_window_pattern");
	if (id != A_LLAMA4 && medha_gguf_find(g, key) >= 0) {
		if (medha_gguf_get_i64(g, key, &pat) != 0 || pat < 0 ||
		    pat > 1024)
			return medha_why(why, whylen, MEDHA_EUNSUP,
			    "metadata %s: only an integer period in [0, 1024] "
			    "is supported",
			    key);
		a->swa_pattern = (int)pat;
	}
	if (a->rope_scaling == MEDHA_ROPE_SCALING_LONGROPE && id != A_PHI3)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "metadata %s: longrope is supported for phi3 only",
		    akey(key, sizeof(key), arch, "rope.scaling.type"));
	return 0;
}

/* Whether layer l is one of swa_pattern's: every layer but each
   pattern-th (all where the pattern is 0 or 1). */
static int
in_pattern(const struct medha_model_config *c, int l)
{
	const int p = c->a.swa_pattern;

	return p <= 1 || l % p < p - 1;
}

int
medha_layer_window(const struct medha_model_config *c, int l)
{
	return c->a.swa > 0 && in_pattern(c, l) ? c->a.swa : 0;
}

int
medha_layer_chunk(const struct medha_model_config *c, int l)
{
	return c->a.chunk > 0 && in_pattern(c, l) ? c->a.chunk : 0;
}

int
medha_layer_span(const struct medha_model_config *c, int l)
{
	int w = medha_layer_window(c, l);

	return w > 0 ? w : medha_layer_chunk(c, l);
}

int
medha_layer_has_rope(const struct medha_model_config *c, int l)
{
	return c->a.nope_step <= 0 || (l + 1) % c->a.nope_step != 0;
}

int
medha_layer_moe(const struct medha_model_config *c, int l)
{
	const int s = c->a.moe_step;

	return c->a.n_expert > 0 && (s <= 1 || (l + 1) % s == 0);
}

int
medha_layer_rope(const struct medha_model_config *c, int l)
{
	return c->a.swa_rope_base > 0 && medha_layer_window(c, l) > 0;
}

/* ggml_rope_yarn_corr_dim: the pair index where n_rot / 2 pi turns fit */
static float
corr_dim(int n_rot, int64_t orig, float rot, float base)
{
	return (float)n_rot *
	    logf((float)orig / (rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void
medha_model_rope(const struct medha_model *m, int kind, struct medha_rope *r)
{
	const struct medha_model_config *c = &m->c;
	const struct medha_arch *a = &c->a;

	memset(r, 0, sizeof(*r));
	r->base = c->rope_theta;
	r->freq_scale = 1;
	/* llama.cpp's attn_factor: the file's, for every kind */
	r->mscale = a->yarn_attn_factor > 0 ? a->yarn_attn_factor : 1;
	r->freqs = m->rope_freqs;
	if (kind == 1) { /* a window layer with its own base, unscaled */
		r->base = a->swa_rope_base;
		r->freqs = NULL;
		return;
	}
	switch (a->rope_scaling) {
	case MEDHA_ROPE_SCALING_LINEAR: r->freq_scale = 1 / a->rope_factor; break;
	case MEDHA_ROPE_SCALING_YARN: {
		float f = a->rope_factor, lo, hi;
		r->freq_scale = 1 / f;
		r->ext_factor = a->yarn_ext_factor;
		if (r->ext_factor != 0)
			/* llama.cpp's context: get_mscale(f) over the
			   1 + 0.1 ln f the table multiplies back in */
			r->mscale *= (f > 1 ? 0.1f * logf(f) + 1.0f : 1.0f) *
			    (1.0f / (1.0f + 0.1f * logf(f)));
		lo = floorf(corr_dim(c->n_rot, a->rope_orig_ctx,
		    a->yarn_beta_fast, r->base));
		hi = ceilf(corr_dim(c->n_rot, a->rope_orig_ctx,
		    a->yarn_beta_slow, r->base));
		r->corr[0] = lo > 0 ? lo : 0;
		r->corr[1] = hi < c->n_rot - 1 ? hi : (float)(c->n_rot - 1);
		break;
	}
	default: break;
	}
}
