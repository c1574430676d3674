/*
 * cpu_gguf_test.c: tiny random Llama models written with the GGUF writer
 * (libcore/gguf_write.c), read back with the reader and the model loader
 * (gguf.c, model.c) and run on the CPU backend (cpu.c).
 *
 * For each weight type F32, F16, BF16, Q8_0 and Q4_1 a model (2 layers,
 * hidden 64, 4 heads over 2 kv heads of 16 (GQA), ffn 96, vocab 97; f32
 * norms; the output tied to the embedding for F32, BF16 and Q4_1, a
 * separate output.weight for F16 and Q8_0) is drawn from a seeded
 * generator, quantized with medha_quant_row and written to a temporary
 * file. The checks:
 *  - the file loads with the configuration written (GQA, rope base,
 *    epsilon, context length) and every tensor reads back byte for byte;
 *  - a 20-token prompt prefilled in chunks of 1, 7 and 20 gives
 *    bit-identical last logits (f32 KV);
 *  - the loaded model's logits are bit-identical to those of the same
 *    quantized buffers built in memory with medha_model_build;
 *  - a copy cut to half its size, and one whose first tensor's type is
 *    changed to an unknown id, are refused by medha_gguf_open or
 *    medha_model_load with a reason, without a crash.
 * Temporary files are removed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "model/gguf.h"
#include "cpu/kvcache.h"
#include "model/model.h"
#include "model/quant.h"
#include "tinymodel.h"

/* ---- a tiny model: quantized buffers, as tensors (tinymodel.h) ---- */

#define VOCAB 97
#define DIM 64
#define NH 4
#define NKV 2
#define HD 16
#define FFN 96
#define NL 2
#define CTX 256
#define THETA 5000.0f /* not the defaults, so that reading them shows */
#define EPS 1e-6f
#define PLEN 20

/* Every matrix (the embedding too) of type wt; output tied or not. */
static void
tm_make(struct tmodel *tm, int wt, int tied, uint64_t seed)
{
	struct medha_model_config c = {.n_layers = NL,
	    .dim = DIM,
	    .n_heads = NH,
	    .n_kv_heads = NKV,
	    .head_dim = HD,
	    .n_rot = HD,
	    .ffn_dim = FFN,
	    .ctx_len = CTX,
	    .rope_theta = THETA,
	    .norm_eps = EPS};

	tm_fill(tm, &c, VOCAB, wt, wt, tied, seed);
}

/* temporary files' names (testutil.h's tmp_name) */
#define PATH_LEN 256

/* Write tm to path with the GGUF writer, saying it has nl layers. */
/* ntok > 0: also a tokenizer.ggml.tokens of ntok tokens */
static void
tm_write_tok(const struct tmodel *tm, const char *path, int nl, int ntok)
{
	struct medha_gguf_writer *w;
	const char **tok;
	char (*text)[8];
	int i;

	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	medha_gguf_writer_add_str(w, "general.architecture", "llama");
	medha_gguf_writer_add_str(w, "general.name", "cpu_gguf_test");
	medha_gguf_writer_add_u32(w, "llama.block_count", (uint32_t)nl);
	medha_gguf_writer_add_u32(w, "llama.embedding_length", DIM);
	medha_gguf_writer_add_u32(w, "llama.attention.head_count", NH);
	medha_gguf_writer_add_u32(w, "llama.attention.head_count_kv", NKV);
	medha_gguf_writer_add_u32(w, "llama.feed_forward_length", FFN);
	medha_gguf_writer_add_u32(w, "llama.context_length", CTX);
	medha_gguf_writer_add_u32(w, "llama.rope.dimension_count", HD);
	medha_gguf_writer_add_f32(w, "llama.rope.freq_base", THETA);
	medha_gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon",
	    EPS);
	if (ntok > 0) {
		assert_non_null(tok = calloc((size_t)ntok, sizeof(*tok)));
		assert_non_null(text = calloc((size_t)ntok, sizeof(*text)));
		for (i = 0; i < ntok; i++) {
			snprintf(text[i], sizeof(text[i]), "t%d", i);
			tok[i] = text[i];
		}
		medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok,
		    (uint64_t)ntok);
		free(tok);
		free(text);
	}
	for (i = 0; i < tm->nt; i++)
		medha_gguf_writer_add_tensor(w, tm->t[i].name, tm->t[i].type,
		    tm->t[i].n_dims, tm->t[i].ne, tm->t[i].data,
		    tm->t[i].nbytes);
	/* errors are sticky: close reports the first */
	assert_int_equal(medha_gguf_writer_close(w), 0);
}

static void
tm_write_nl(const struct tmodel *tm, const char *path, int nl)
{
	tm_write_tok(tm, path, nl, 0);
}

static void
tm_write(const struct tmodel *tm, const char *path)
{
	tm_write_nl(tm, path, NL);
}

static unsigned char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	assert_true((n = ftell(f)) > 0);
	rewind(f);
	assert_non_null(buf = malloc((size_t)n));
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void
spill(const char *path, const unsigned char *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

/* ---- running a model ---- */

/* Last logits of tok[0..n) prefilled in chunks of ch on a fresh sequence. */
static void
prefill(struct medha_cpu *cpu, struct medha_kvcache *kv, const int32_t *tok,
    int n, int ch, float *logits)
{
	char why[256];
	int seq, i, c;

	assert_int_equal(medha_kv_seq_alloc(kv, &seq), 0);
	for (i = 0; i < n; i += c) {
		struct medha_batch_seq s;
		struct medha_batch b;
		c = n - i < ch ? n - i : ch;
		s = (struct medha_batch_seq){seq, i, c,
		    i + c == n ? MEDHA_LOGITS_LAST : MEDHA_LOGITS_NONE};
		b = (struct medha_batch){tok + i, c, &s, 1};
		if (medha_cpu_forward(cpu, &b, logits, why, sizeof(why)) != 0)
			fail_msg("forward: %s", why);
	}
	medha_kv_seq_free(kv, seq);
}

/*
 * Run m on the prompt in chunks of 1, 7 and PLEN, check the three last
 * logits are bit-identical, and leave them in logits (VOCAB).
 */
static void
run_chunks(const struct medha_model *m, const int32_t *tok, float *logits)
{
	static const int chunks[] = {1, 7, PLEN};
	struct medha_kv_config kc = {.n_layers = NL,
	    .n_kv_heads = NKV,
	    .head_dim = HD,
	    .n_blocks = 16,
	    .type = MEDHA_KV_F32,
	    .max_seqs = 4};
	struct medha_cpu_opts o = {.n_threads = 2, .kv_shards = 1};
	struct medha_kvcache *kv;
	struct medha_cpu *cpu;
	float got[VOCAB];
	char why[256];
	int i;

	assert_int_equal(medha_kvcache_init(&kv, &kc), 0);
	if (medha_cpu_init(&cpu, m, kv, &o, why, sizeof(why)) != 0)
		fail_msg("cpu: %s", why);
	prefill(cpu, kv, tok, PLEN, PLEN, logits);
	for (i = 0; i < 2; i++) {
		prefill(cpu, kv, tok, PLEN, chunks[i], got);
		if (memcmp(got, logits, sizeof(got)) != 0)
			fail_msg("chunks of %d: logits differ from one chunk",
			    chunks[i]);
	}
	medha_cpu_free(cpu);
	medha_kvcache_free(kv);
}

/* ---- write, load, run ---- */

static void
roundtrip(int wt, int tied, uint64_t seed)
{
	struct tmodel tm;
	struct medha_gguf *g;
	struct medha_model *mg, *mm;
	const struct medha_tensor *t;
	const struct medha_model_config *c;
	char path[PATH_LEN], why[256];
	int32_t tok[PLEN];
	float lg[VOCAB], lm[VOCAB];
	int i;

	tm_make(&tm, wt, tied, seed);
	tmp_name(path, sizeof(path));
	tm_write(&tm, path);

	/* (a) it loads, with the configuration written */
	why[0] = '\0';
	if (medha_gguf_open(&g, path, why, sizeof(why)) != 0) {
		unlink(path);
		fail_msg("open: %s", why);
	}
	if (medha_model_load(&mg, g, why, sizeof(why)) != 0) {
		unlink(path);
		fail_msg("load: %s", why);
	}
	unlink(path); /* the mapping stays valid */
	assert_int_equal(medha_gguf_version(g), 3);
	assert_int_equal(medha_gguf_tensor_count(g), tm.nt);
	c = &mg->c;
	assert_int_equal(c->n_layers, NL);
	assert_int_equal(c->dim, DIM);
	assert_int_equal(c->n_heads, NH);
	assert_int_equal(c->n_kv_heads, NKV);
	assert_int_equal(c->head_dim, HD);
	assert_int_equal(c->n_rot, HD);
	assert_int_equal(c->ffn_dim, FFN);
	assert_int_equal(c->vocab, VOCAB);
	assert_int_equal(c->ctx_len, CTX);
	assert_true(c->rope_theta == THETA);
	assert_true(c->norm_eps == EPS);
	assert_int_equal(mg->tied, tied);
	assert_int_equal(mg->tok_embd->type, wt);
	assert_int_equal(mg->layer[1].wk->ne[1], NKV * HD);
	for (i = 0; i < tm.nt; i++) {
		t = medha_gguf_tensor_get(g, tm.t[i].name);
		assert_non_null(t);
		assert_int_equal(t->type, tm.t[i].type);
		assert_int_equal(t->n_dims, tm.t[i].n_dims);
		assert_int_equal(t->ne[0], tm.t[i].ne[0]);
		assert_int_equal(t->ne[1], tm.t[i].ne[1]);
		assert_int_equal(t->nbytes, tm.t[i].nbytes);
		assert_int_equal(t->offset % medha_gguf_alignment(g), 0);
		assert_memory_equal(t->data, tm.t[i].data, t->nbytes);
	}

	/* (b) chunking is exact; (c) the file's model is the memory one */
	for (i = 0; i < PLEN; i++)
		tok[i] = (int32_t)((uint32_t)(i * 37 + 11) % VOCAB);
	run_chunks(mg, tok, lg);
	if (medha_model_build(&mm, &tm.c, tm_find, &tm, why, sizeof(why)) != 0)
		fail_msg("build: %s", why);
	run_chunks(mm, tok, lm);
	assert_memory_equal(lg, lm, sizeof(lg));
	for (i = 0; i < VOCAB; i++) /* and not all zero or NaN */
		if (lg[i] != 0 && lg[i] == lg[i])
			break;
	assert_true(i < VOCAB);

	medha_model_free(mm);
	medha_model_free(mg);
	medha_gguf_close(g);
	tm_free(&tm);
}

static void
test_f32(void **state)
{
	(void)state;
	roundtrip(MEDHA_GGML_F32, 1, 11);
}

static void
test_f16(void **state)
{
	(void)state;
	roundtrip(MEDHA_GGML_F16, 0, 12);
}

static void
test_bf16(void **state)
{
	(void)state;
	roundtrip(MEDHA_GGML_BF16, 1, 13);
}

static void
test_q8_0(void **state)
{
	(void)state;
	roundtrip(MEDHA_GGML_Q8_0, 0, 14);
}

static void
test_q4_1(void **state)
{
	(void)state;
	roundtrip(MEDHA_GGML_Q4_1, 1, 15);
}

/* ---- (d) damaged files ---- */

/*
 * Open path and load a model from it; both must not succeed together.
 * Returns the error, with a non-empty reason.
 */
static int
refused(const char *path)
{
	struct medha_gguf *g = NULL;
	struct medha_model *m = NULL;
	char why[256];
	int rc;

	why[0] = '\0';
	if ((rc = medha_gguf_open(&g, path, why, sizeof(why))) == 0) {
		rc = medha_model_load(&m, g, why, sizeof(why));
		medha_model_free(m);
		medha_gguf_close(g);
	} else
		assert_null(g);
	assert_true(rc < 0);
	assert_true(why[0] != '\0');
	print_message("# refused (%d): %s\n", rc, why);
	return rc;
}

/* A written Q8_0 model's bytes, with the offset of its first tensor's type. */
static unsigned char *
written(size_t *len, size_t *type_at)
{
	struct tmodel tm;
	struct medha_gguf *g;
	const struct medha_tensor *t;
	char path[PATH_LEN], why[256];
	unsigned char *buf;
	uint64_t namelen;
	size_t at;

	tm_make(&tm, MEDHA_GGML_Q8_0, 0, 21);
	tmp_name(path, sizeof(path));
	tm_write(&tm, path);
	buf = slurp(path, len);
	unlink(path);
	tm_free(&tm);
	if (medha_gguf_open_mem(&g, buf, *len, why, sizeof(why)) != 0)
		fail_msg("open: %s", why);
	/* tensor info: u64 name length, name, u32 n_dims, i64 ne[], u32 type */
	at = (size_t)medha_gguf_tensor_info_offset(g);
	t = medha_gguf_tensor_at(g, 0);
	assert_non_null(t);
	assert_true(at + 8 <= *len);
	memcpy(&namelen, buf + at, 8); /* the file is little-endian, as we */
	assert_int_equal(namelen, strlen(t->name));
	at += 8 + namelen + 4 + 8 * (size_t)t->n_dims;
	assert_true(at + 4 <= *len);
	assert_int_equal(buf[at], t->type);
	*type_at = at;
	medha_gguf_close(g);
	return buf;
}

static void
test_truncated(void **state)
{
	char path[PATH_LEN];
	unsigned char *buf;
	size_t len, at, cut[] = {0, 0, 0, 0};
	int i;

	(void)state;
	buf = written(&len, &at);
	cut[0] = len / 2;
	cut[1] = len - 1;
	cut[2] = at; /* inside the tensor information */
	cut[3] = 10; /* inside the header */
	tmp_name(path, sizeof(path));
	for (i = 0; i < 4; i++) {
		spill(path, buf, cut[i]);
		refused(path);
	}
	unlink(path);
	free(buf);
}

static void
test_bad_type(void **state)
{
	char path[PATH_LEN];
	unsigned char *buf;
	size_t len, at;
	int rc;

	(void)state;
	buf = written(&len, &at);
	buf[at] = 99; /* no such ggml type */
	tmp_name(path, sizeof(path));
	spill(path, buf, len);
	rc = refused(path);
	unlink(path);
	free(buf);
	/* the reader lists an unknown type; the loader refuses it */
	assert_int_equal(rc, MEDHA_EUNSUP);
}

/* A tensor whose data is pointed at another's: a format error. */
static void
test_overlap(void **state)
{
	struct medha_gguf *g;
	const struct medha_tensor *t0, *t1;
	char path[PATH_LEN], why[256];
	unsigned char *buf;
	size_t len, at, off0, off1;
	uint64_t namelen;

	(void)state;
	buf = written(&len, &at);
	if (medha_gguf_open_mem(&g, buf, len, why, sizeof(why)) != 0)
		fail_msg("open: %s", why);
	t0 = medha_gguf_tensor_at(g, 0);
	t1 = medha_gguf_tensor_at(g, 1);
	assert_non_null(t1);
	/* tensor 0: ... u32 type (at), u64 offset; then tensor 1: u64 name
	   length, name, u32 n_dims, i64 ne[], u32 type, u64 offset */
	off0 = at + 4;
	memcpy(&namelen, buf + off0 + 8, 8);
	assert_int_equal(namelen, strlen(t1->name));
	off1 = off0 + 8 + 8 + namelen + 4 + 8 * (size_t)t1->n_dims + 4;
	assert_true(t0->nbytes > 0);
	medha_gguf_close(g);
	memcpy(buf + off1, buf + off0, 8); /* tensor 1's data is tensor 0's */
	tmp_name(path, sizeof(path));
	spill(path, buf, len);
	assert_int_equal(refused(path), MEDHA_EFORMAT);
	unlink(path);
	free(buf);
}

/* block_count smaller than the layers' tensors: refused, not cut short */
static void
test_extra_layers(void **state)
{
	struct tmodel tm;
	char path[PATH_LEN];

	(void)state;
	tm_make(&tm, MEDHA_GGML_Q8_0, 0, 22);
	tmp_name(path, sizeof(path));
	tm_write_nl(&tm, path, NL - 1);
	assert_int_equal(refused(path), MEDHA_EFORMAT);
	unlink(path);
	tm_free(&tm);
}

/*
 * A tokenizer of fewer (or more) tokens than the embedding has rows: a
 * format error that names both counts, not a model that streams ids
 * without text; one of as many loads.
 */
static void
test_vocab_mismatch(void **state)
{
	struct medha_gguf *g;
	struct medha_model *m;
	struct tmodel tm;
	char path[PATH_LEN], why[256], want[64];

	(void)state;
	tm_make(&tm, MEDHA_GGML_Q8_0, 0, 23);
	tmp_name(path, sizeof(path));
	tm_write_tok(&tm, path, NL, 10);
	assert_int_equal(refused(path), MEDHA_EFORMAT);
	assert_int_equal(medha_gguf_open(&g, path, why, sizeof(why)), 0);
	assert_int_equal(medha_model_load(&m, g, why, sizeof(why)),
	    MEDHA_EFORMAT);
	assert_null(m);
	snprintf(want, sizeof(want), "has %d rows", VOCAB);
	assert_non_null(strstr(why, "has 10 tokens"));
	assert_non_null(strstr(why, want));
	medha_gguf_close(g);
	tm_write_tok(&tm, path, NL, VOCAB + 1);
	assert_int_equal(refused(path), MEDHA_EFORMAT);
	tm_write_tok(&tm, path, NL, VOCAB);
	assert_int_equal(medha_gguf_open(&g, path, why, sizeof(why)), 0);
	if (medha_model_load(&m, g, why, sizeof(why)) != 0)
		fail_msg("load: %s", why);
	medha_model_free(m);
	medha_gguf_close(g);
	unlink(path);
	tm_free(&tm);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_f32),
	    cmocka_unit_test(test_f16),
	    cmocka_unit_test(test_bf16),
	    cmocka_unit_test(test_q8_0),
	    cmocka_unit_test(test_q4_1),
	    cmocka_unit_test(test_truncated),
	    cmocka_unit_test(test_bad_type),
	    cmocka_unit_test(test_extra_layers),
	    cmocka_unit_test(test_overlap),
	    cmocka_unit_test(test_vocab_mismatch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
