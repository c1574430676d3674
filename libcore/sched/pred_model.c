/*
 * pred_model.c: the models the predictor knows (pred.h): the built-in
 * shapes by name, from their config.json, and any llama-family GGUF's
 * shape read from its header (through the engine's
 * medha_model_config_read()). pred.c prices them.
 */
#include "sched/pred.h"
#include "model/gguf.h"
#include "model/model.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const struct medha_pred_model models[] = {
    /*
     * name, {layers, dim, heads, kv heads, head dim, rope dims, ffn,
     * vocab, context, rope base, norm epsilon}, w bytes, kv bytes
     */
    {"llama3-8b", /* Meta Llama 3.1 8B */
        {32, 4096, 32, 8, 128, 128, 14336, 128256, 131072, 5e5f, 1e-5f,
            {.name = "llama"}},
        2, 2},
    {"llama3-70b", /* Meta Llama 3.1 70B */
        {80, 8192, 64, 8, 128, 128, 28672, 128256, 131072, 5e5f, 1e-5f,
            {.name = "llama"}},
        2, 2},
    {"smollm2-135m", /* HuggingFaceTB SmolLM2-135M */
        {30, 576, 9, 3, 64, 64, 1536, 49152, 8192, 1e5f, 1e-5f,
            {.name = "llama"}},
        2, 2},
    /*
     * The other families, from each model's config.json on the Hugging
     * Face hub as published. Qwen/Qwen2.5-7B-Instruct: 28 layers, hidden
     * 3584, 28 heads, 4 kv heads (head dim 128), intermediate 18944,
     * vocab 152064, rope_theta 1e6, rms_norm_eps 1e-6, 32768 positions
     * (use_sliding_window false), served to 131072 with the model card's
     * YaRN factor 4.
     */
    {"qwen2.5-7b",
        {28, 3584, 28, 4, 128, 128, 18944, 152064, 131072, 1e6f, 1e-6f,
            {.name = "qwen2",
                .rope_type = MEDHA_ROPE_NEOX,
                .qkv_bias = 1,
                .rope_scaling = MEDHA_ROPE_SCALING_YARN,
                .rope_factor = 4,
                .rope_orig_ctx = 32768}},
        2, 2},
    /*
     * Qwen/Qwen3-32B: 64 layers, hidden 5120, 64 heads, 8 kv heads,
     * head_dim 128 (not 5120 / 64), intermediate 25600, vocab 151936,
     * max_position_embeddings 40960, rope_theta 1e6, rms_norm_eps 1e-6.
     */
    {"qwen3-32b",
        {64, 5120, 64, 8, 128, 128, 25600, 151936, 40960, 1e6f, 1e-6f,
            {.name = "qwen3", .rope_type = MEDHA_ROPE_NEOX, .qk_norm = 1}},
        2, 2},
    /*
     * google/gemma-3-27b-it, text_config: 62 layers, hidden 5376, 32
     * heads, 16 kv heads, head_dim 128, intermediate 21504, vocab 262208,
     * 131072 positions, rope_theta 1e6 with linear scaling factor 8 on
     * the global layers, rope_local_base_freq 1e4, sliding_window 1024 on
     * five layers in six (sliding_window_pattern 6: 52 window layers, 10
     * global), query_pre_attn_scalar 168, rms_norm_eps 1e-6.
     */
    {"gemma3-27b",
        {62, 5376, 32, 16, 128, 128, 21504, 262208, 131072, 1e6f, 1e-6f,
            {.name = "gemma3",
                .rope_type = MEDHA_ROPE_NEOX,
                .ffn_act = MEDHA_FFN_GELU,
                .qk_norm = 1,
                .post_norm = 1,
                .embd_scale = 73.32121f,  /* sqrt(5376) */
                .attn_scale = 0.0771517f, /* 1 / sqrt(168) */
                .q_prescale = 1,
                .swa = 1024,
                .swa_pattern = 6,
                .swa_rope_base = 1e4f,
                .rope_scaling = MEDHA_ROPE_SCALING_LINEAR,
                .rope_factor = 8}},
        2, 2},
    /*
     * meta-llama/Llama-3.1-70B: the shape of llama3-70b above (80 layers,
     * hidden 8192, 64 heads, 8 kv heads, intermediate 28672, vocab
     * 128256, 131072 positions, rope_theta 5e5; its "llama3" RoPE
     * scaling is a rope_freqs tensor in GGUF, nothing of the shape).
     */
    {"llama3.1-70b",
        {80, 8192, 64, 8, 128, 128, 28672, 128256, 131072, 5e5f, 1e-5f,
            {.name = "llama"}},
        2, 2},
    /*
     * The mixtures of experts (issue 41), from their config.json.
     * mistralai/Mixtral-8x7B-v0.1: 32 layers, hidden 4096, 32 heads, 8
     * kv heads, intermediate 14336 (each expert's), 8 local experts, 2
     * per token, vocab 32000, 32768 positions, rope_theta 1e6,
     * rms_norm_eps 1e-5.
     */
    {"mixtral-8x7b",
        {32, 4096, 32, 8, 128, 128, 14336, 32000, 32768, 1e6f, 1e-5f,
            {.name = "llama",
                .n_expert = 8,
                .n_expert_used = 2,
                .expert_ffn_dim = 14336,
                .moe_norm_w = 1,
                .moe_step = 1}},
        2, 2},
    /*
     * Qwen/Qwen3-30B-A3B: 48 layers, hidden 2048, 32 heads, 4 kv heads,
     * head_dim 128, 128 experts of moe_intermediate_size 768, 8 per
     * token (norm_topk_prob), vocab 151936, 40960 positions, rope_theta
     * 1e6, rms_norm_eps 1e-6.
     */
    {"qwen3-30b-a3b",
        {48, 2048, 32, 4, 128, 128, 6144, 151936, 40960, 1e6f, 1e-6f,
            {.name = "qwen3moe",
                .rope_type = MEDHA_ROPE_NEOX,
                .qk_norm = 1,
                .n_expert = 128,
                .n_expert_used = 8,
                .expert_ffn_dim = 768,
                .moe_norm_w = 1,
                .moe_step = 1}},
        2, 2},
    /*
     * Qwen/Qwen3-235B-A22B: 94 layers, hidden 4096, 64 heads, 4 kv
     * heads, head_dim 128, 128 experts of 1536, 8 per token, vocab
     * 151936, 40960 positions, rope_theta 1e6, rms_norm_eps 1e-6.
     */
    {"qwen3-235b-a22b",
        {94, 4096, 64, 4, 128, 128, 12288, 151936, 40960, 1e6f, 1e-6f,
            {.name = "qwen3moe",
                .rope_type = MEDHA_ROPE_NEOX,
                .qk_norm = 1,
                .n_expert = 128,
                .n_expert_used = 8,
                .expert_ffn_dim = 1536,
                .moe_norm_w = 1,
                .moe_step = 1}},
        2, 2},
    /*
     * meta-llama/Llama-4-Scout-17B-16E, text_config: 48 layers, hidden
     * 5120, 40 heads, 8 kv heads, head_dim 128, 16 experts of
     * intermediate_size 8192 and a shared one, 1 per token, every layer
     * routed (interleave_moe_layer_step 1), vocab 202048,
     * max_position_embeddings 10485760, rope_theta 5e5 (its "llama3"
     * scaling a rope_freqs tensor in GGUF), rms_norm_eps 1e-5,
     * attention_chunk_size 8192 on three layers in four, the fourth
     * without RoPE (no_rope_layers) with temperature tuning (floor
     * 8192, scale 0.1), use_qk_norm.
     */
    {"llama4-scout",
        {48, 5120, 40, 8, 128, 128, 16384, 202048, 10485760, 5e5f, 1e-5f,
            {.name = "llama4",
                .n_expert = 16,
                .n_expert_used = 1,
                .expert_ffn_dim = 8192,
                .shexp_ffn_dim = 8192,
                .moe_gating = MEDHA_MOE_SIGMOID,
                .moe_weight_in = 1,
                .moe_step = 1,
                .swa_pattern = 4,
                .chunk = 8192,
                .nope_step = 4,
                .qk_l2norm = 1,
                .attn_temp_scale = 0.1f,
                .attn_temp_floor = 8192}},
        2, 2},
};

/* ---------------------------------------------------------------- */
/* Model shapes: built-in names and GGUF headers                      */

#define VOCAB_MAX (1 << 24)

/*
 * Vocabulary size of the llama model in g (medha_model_config_read()
 * leaves it 0): the rows of token_embd.weight, else llama.vocab_size,
 * else the length of tokenizer.ggml.tokens.
 */
static int
gguf_vocab(const struct medha_gguf *g, const struct medha_model_config *c,
    int *vocab, char *why, size_t whylen)
{
	const struct medha_tensor *t;
	uint64_t n;
	int rc;

	if ((t = medha_gguf_tensor_get(g, "token_embd.weight")) != NULL) {
		if (t->n_dims != 2 || t->ne[0] != c->dim || t->ne[1] < 1 ||
		    t->ne[1] > VOCAB_MAX)
			return medha_why(why, whylen, MEDHA_EFORMAT,
			    "tensor token_embd.weight: shape %lld x %lld (%d "
			    "dims), expected %d x the vocabulary size (row "
			    "length x rows, at most %d rows)",
			    (long long)t->ne[0], (long long)t->ne[1], t->n_dims,
			    c->dim, VOCAB_MAX);
		*vocab = (int)t->ne[1];
		return 0;
	}
	rc = medha_gguf_get_u64(g, "llama.vocab_size", &n);
	if (rc == 0 && n >= 1 && n <= VOCAB_MAX) {
		*vocab = (int)n;
		return 0;
	}
	if (rc != MEDHA_ENOTFOUND)
		return medha_why(why, whylen,
		    rc == MEDHA_EFORMAT ? rc : MEDHA_ERANGE,
		    "key llama.vocab_size: %s",
		    rc == MEDHA_EFORMAT ? "not an integer" : "out of range");
	if (medha_gguf_arr_len(g, "tokenizer.ggml.tokens", &n, NULL) == 0 &&
	    n >= 1 && n <= VOCAB_MAX) {
		*vocab = (int)n;
		return 0;
	}
	return medha_why(why, whylen, MEDHA_EFORMAT,
	    "no vocabulary size (tensor token_embd.weight, key "
	    "llama.vocab_size or tokenizer.ggml.tokens)");
}

/* Shape of the model in the GGUF file at path. */
static int
model_from_gguf(const char *path, struct medha_pred_model *m, char *why,
    size_t whylen)
{
	struct medha_gguf *g;
	struct medha_model_config *c = &m->c;
	const char *base;
	size_t len;
	int rc;

	if ((rc = medha_gguf_open(&g, path, why, whylen)) != 0)
		return rc;
	memset(m, 0, sizeof(*m));
	/*
	 * A key the file lacks is a malformed file here: MEDHA_ENOTFOUND
	 * from medha_model_resolve() means "no such model".
	 */
	if ((rc = medha_model_config_read(g, c, why, whylen)) != 0) {
		if (rc == MEDHA_ENOTFOUND)
			rc = MEDHA_EFORMAT;
		goto out;
	}
	if (c->head_dim < 1 || c->n_heads % c->n_kv_heads != 0) {
		rc = medha_why(why, whylen, MEDHA_EFORMAT,
		    "bad attention shape (%s)",
		    c->head_dim < 1 ? "head dimension 0"
		                    : "query heads not a multiple of kv heads");
		goto out;
	}
	if ((rc = gguf_vocab(g, c, &c->vocab, why, whylen)) != 0)
		goto out;
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
medha_model_resolve_why(const char *name, struct medha_pred_model *m, char *why,
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
	if (stat(name, &st) != 0) {
		medha_why(why, whylen, 0,
		    "neither a built-in model nor a file (%s)",
		    strerror(errno));
		return MEDHA_ENOTFOUND;
	}
	if (!S_ISREG(st.st_mode)) {
		medha_why(why, whylen, 0, "%s, not a GGUF file",
		    S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
		return MEDHA_EINVAL;
	}
	if (access(name, R_OK) != 0) {
		medha_why(why, whylen, 0, "%s", strerror(errno));
		return MEDHA_EIO;
	}
	return model_from_gguf(name, m, why, whylen);
}

int
medha_model_builtin(const char *name, struct medha_pred_model *m)
{
	for (size_t i = 0; i < NELEM(models); i++)
		if (strcasecmp(name, models[i].name) == 0) {
			*m = models[i];
			return 0;
		}
	return MEDHA_ENOTFOUND;
}

int
medha_model_resolve(const char *name, struct medha_pred_model *m)
{
	char why[256];
	int rc;

	why[0] = '\0';
	rc = medha_model_resolve_why(name, m, why, sizeof(why));
	if (rc != 0 && rc != MEDHA_ENOTFOUND)
		medha_log(MEDHA_LOG_WARN, "%s: %s", name, why);
	return rc;
}
