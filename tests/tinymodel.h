/*
 * tinymodel.h: tiny random Llama models for the CPU backend's tests, as
 * quantized buffers presented as tensors in memory (the same buffers can
 * be written to a GGUF file). Header-only, for tests: include it after
 * <cmocka.h>. A seeded generator (testutil.h's) makes every model
 * reproducible.
 *
 *	struct tmodel tm;
 *	struct medha_model_config c = { .n_layers = 2, .dim = 64, ... };
 *	tm_fill(&tm, &c, 97, MEDHA_GGML_Q8_0, MEDHA_GGML_Q8_0, 1, seed);
 *	medha_model_build(&tm.m, &tm.c, tm_find, &tm, why, sizeof(why));
 *	tm_free(&tm);
 */
#ifndef MEDHA_TINYMODEL_H
#define MEDHA_TINYMODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/quant.h"
#include "testutil.h"

/* ---- the model ---- */

#define TM_NT_MAX 64

struct tmodel {
	struct medha_tensor t[TM_NT_MAX];
	char name[TM_NT_MAX][48];
	void *data[TM_NT_MAX]; /* owned quantized buffers */
	int nt;
	struct medha_model_config c;
	struct medha_model *m; /* built by the test, or NULL */
};

/* A (rows, cols) tensor of type, values offset + scale * [-1, 1). */
static void
tm_add(struct tmodel *tm, const char *name, int type, int64_t cols,
    int64_t rows, float scale, float offset)
{
	size_t rb = medha_ggml_row_bytes(type, cols);
	float *row = malloc(sizeof(float) * (size_t)cols);
	unsigned char *d = malloc(rb * (size_t)rows);
	struct medha_tensor *t = &tm->t[tm->nt];
	int64_t r, i;

	assert_non_null(row);
	assert_non_null(d);
	assert_true(rb > 0 && tm->nt < TM_NT_MAX);
	for (r = 0; r < rows; r++) {
		for (i = 0; i < cols; i++)
			row[i] = offset + scale * frand();
		assert_int_equal(medha_quant_row(type, row, d + rb * r, cols),
		    0);
	}
	free(row);
	snprintf(tm->name[tm->nt], sizeof(tm->name[0]), "%s", name);
	t->name = tm->name[tm->nt];
	t->type = type;
	t->n_dims = rows > 1 ? 2 : 1;
	t->ne[0] = cols;
	t->ne[1] = rows;
	t->ne[2] = t->ne[3] = 1;
	t->data = d;
	t->nbytes = rb * (size_t)rows;
	tm->data[tm->nt++] = d;
}

/* medha_tensor_find_fn over tm's tensors. */
static const struct medha_tensor *
tm_find(void *ctx, const char *name)
{
	struct tmodel *tm = ctx;
	int i;

	for (i = 0; i < tm->nt; i++)
		if (strcmp(tm->name[i], name) == 0)
			return &tm->t[i];
	return NULL;
}

/*
 * Every tensor of a Llama model of shape c and vocab rows: matrices of
 * type wt, the embedding of type et, f32 norms, the output tied to the
 * embedding or not; drawn from seed.
 */
static void
tm_fill(struct tmodel *tm, const struct medha_model_config *c, int vocab,
    int wt, int et, int tied, uint64_t seed)
{
	int dim = c->dim, q = c->n_heads * c->head_dim;
	int kv = c->n_kv_heads * c->head_dim, ffn = c->ffn_dim;
	char n[48];
	int l;

	memset(tm, 0, sizeof(*tm));
	rng_seed(seed);
	tm->c = *c;
	tm_add(tm, "token_embd.weight", et, dim, vocab, 1.0f, 0);
	tm_add(tm, "output_norm.weight", MEDHA_GGML_F32, dim, 1, 0.2f, 1.0f);
	if (!tied)
		tm_add(tm, "output.weight", wt, dim, vocab, 0.3f, 0);
	for (l = 0; l < c->n_layers; l++) {
#define TM_ADD(s, ty, co, r, sc, off)                             \
	do {                                                      \
		snprintf(n, sizeof(n), "blk.%d.%s.weight", l, s); \
		tm_add(tm, n, ty, co, r, sc, off);                \
	} while (0)
		TM_ADD("attn_norm", MEDHA_GGML_F32, dim, 1, 0.2f, 1.0f);
		TM_ADD("attn_q", wt, dim, q, 0.4f, 0);
		TM_ADD("attn_k", wt, dim, kv, 0.4f, 0);
		TM_ADD("attn_v", wt, dim, kv, 0.4f, 0);
		TM_ADD("attn_output", wt, q, dim, 0.2f, 0);
		TM_ADD("ffn_norm", MEDHA_GGML_F32, dim, 1, 0.2f, 1.0f);
		TM_ADD("ffn_gate", wt, dim, ffn, 0.3f, 0);
		TM_ADD("ffn_up", wt, dim, ffn, 0.3f, 0);
		TM_ADD("ffn_down", wt, ffn, dim, 0.2f, 0);
#undef TM_ADD
	}
}

/* Free the model (if built) and the buffers. */
static void
tm_free(struct tmodel *tm)
{
	int i;

	medha_model_free(tm->m);
	tm->m = NULL;
	for (i = 0; i < tm->nt; i++)
		free(tm->data[i]);
	tm->nt = 0;
}

#endif
