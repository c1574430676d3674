/*
 * gguf_write_test.c: the GGUF writer (libcore/gguf_write.c), read back
 * with the reader. A model with metadata of every kind the writer makes
 * and a tensor of every supported type (the K-quants from random bytes
 * with finite scales) must read back exactly: values, names, shapes,
 * types, offsets on the alignment, the data bytes, and a dequantization
 * equal bit for bit to that of the buffers written. Misuse must leave a
 * sticky MEDHA_EINVAL and no file behind.
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

#include "model/gguf.h"
#include "testutil.h"

static const int types[] = {MEDHA_GGML_F32, MEDHA_GGML_F16, MEDHA_GGML_BF16,
    MEDHA_GGML_Q8_0, MEDHA_GGML_Q4_0, MEDHA_GGML_Q4_1, MEDHA_GGML_Q4_K,
    MEDHA_GGML_Q6_K};
#define NTYPES ((int)(sizeof(types) / sizeof(types[0])))

static uint64_t seed = 0x2545f4914f6cdd1dull;

static uint32_t
rnd(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return (uint32_t)(seed >> 20);
}

/* Tensor k: shape (k-dependent, 1 to 4 dims) and its data, in t's type. */
struct tens {
	char name[32];
	int type, nd;
	int64_t ne[4];
	unsigned char *data;
	size_t nbytes;
};

static void
make_tensor(struct tens *t, int k, int type)
{
	int64_t n, i;
	size_t j, bb;
	float *x;
	uint16_t h;

	snprintf(t->name, sizeof(t->name), "blk.%d.%s", k,
	    medha_ggml_type_name(type));
	t->type = type;
	t->nd = 1 + k % 4;
	t->ne[0] = medha_ggml_block_elems(type) == 1
	    ? 3 + k
	    : medha_ggml_block_elems(type) * (1 + k % 2);
	t->ne[1] = t->nd > 1 ? 2 : 1;
	t->ne[2] = t->nd > 2 ? 3 : 1;
	t->ne[3] = t->nd > 3 ? 2 : 1;
	n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
	t->nbytes =
	    medha_ggml_row_bytes(type, t->ne[0]) * (size_t)(n / t->ne[0]);
	assert_non_null(t->data = malloc(t->nbytes));
	assert_non_null(x = malloc((size_t)n * sizeof(*x)));
	for (i = 0; i < n; i++)
		x[i] = ((float)(rnd() % 20001) - 10000) / 1234;
	if (medha_quant_row(type, x, t->data, n) != 0) {
		/* K-quants: random bytes, finite fp16 scales */
		for (j = 0; j < t->nbytes; j++)
			t->data[j] = (unsigned char)rnd();
		bb = (size_t)medha_ggml_block_bytes(type);
		for (j = 0; j < t->nbytes; j += bb) {
			h = medha_fp32_to_fp16(
			    ((float)(rnd() % 201) - 100) / 64);
			if (type == MEDHA_GGML_Q4_K) {
				memcpy(t->data + j, &h, 2);
				h = medha_fp32_to_fp16(
				    (float)(rnd() % 100) / 256);
				memcpy(t->data + j + 2, &h, 2);
			} else {
				memcpy(t->data + j + 208, &h, 2);
			}
		}
	}
	free(x);
}

static int
each_tok(void *arg, uint64_t i, const char *s, size_t len)
{
	const char *const *want = arg;

	assert_int_equal(len, strlen(want[i]));
	assert_memory_equal(s, want[i], len);
	return 0;
}

static void
test_round_trip(void **state)
{
	static const char *toks[] = {"<s>", "", "hello", " world",
	    "\xe4\xb8\xad"};
	static const float scores[] = {0.0f, -1.0f, -2.5f, 1e30f, -0.0f};
	static const int32_t tt[] = {3, 1, 1, -7, 2147483647};
	struct medha_gguf_writer *w;
	const struct medha_tensor *t;
	struct medha_gguf *g;
	struct tens ts[2 * NTYPES];
	char path[64], why[256], s[32];
	float f[5], *y0, *y1;
	int32_t v[5];
	uint64_t u;
	int64_t i64;
	double d;
	int k, i, rows, r;
	size_t rowb;

	(void)state;
	tmp_name(path, sizeof(path));
	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	assert_int_equal(medha_gguf_writer_add_str(w, "general.architecture",
	                     "llama"),
	    0);
	medha_gguf_writer_add_u32(w, "llama.block_count", 30);
	medha_gguf_writer_add_i32(w, "test.i32", -5);
	medha_gguf_writer_add_u64(w, "test.u64", UINT64_MAX);
	medha_gguf_writer_add_f32(w, "llama.rope.freq_base", 100000.0f);
	medha_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", 7);
	medha_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 5);
	medha_gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", scores, 5);
	medha_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", tt, 5);
	medha_gguf_writer_add_arr_str(w, "empty", toks, 0);
	for (k = 0; k < 2 * NTYPES; k++) {
		make_tensor(&ts[k], k, types[k % NTYPES]);
		assert_int_equal(medha_gguf_writer_add_tensor(w, ts[k].name,
		                     ts[k].type, ts[k].nd, ts[k].ne, ts[k].data,
		                     ts[k].nbytes),
		    0);
	}
	assert_int_equal(medha_gguf_writer_close(w), 0);

	if (medha_gguf_open(&g, path, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(medha_gguf_version(g), 3);
	assert_int_equal(medha_gguf_kv_count(g), 10);
	assert_int_equal(medha_gguf_get_strbuf(g, "general.architecture", s,
	                     sizeof(s)),
	    0);
	assert_string_equal(s, "llama");
	assert_int_equal(medha_gguf_get_u64(g, "llama.block_count", &u), 0);
	assert_int_equal(u, 30);
	assert_int_equal(medha_gguf_get_i64(g, "test.i32", &i64), 0);
	assert_int_equal(i64, -5);
	assert_int_equal(medha_gguf_get_u64(g, "test.u64", &u), 0);
	assert_true(u == UINT64_MAX);
	assert_int_equal(medha_gguf_get_f64(g, "llama.rope.freq_base", &d), 0);
	assert_true(d == 100000.0);
	assert_int_equal(medha_gguf_get_u64(g, "tokenizer.ggml.add_bos_token",
	                     &u),
	    0);
	assert_int_equal(u, 1);
	assert_int_equal(medha_gguf_arr_strings(g, "tokenizer.ggml.tokens",
	                     each_tok, (void *)toks),
	    0);
	assert_int_equal(medha_gguf_arr_f32(g, "tokenizer.ggml.scores", f, 5),
	    0);
	assert_memory_equal(f, scores, sizeof(f));
	assert_int_equal(medha_gguf_arr_i32(g, "tokenizer.ggml.token_type", v,
	                     5),
	    0);
	assert_memory_equal(v, tt, sizeof(v));
	assert_int_equal(medha_gguf_arr_len(g, "empty", &u, &i), 0);
	assert_int_equal(u, 0);
	assert_int_equal(i, MEDHA_GGUF_STRING);

	assert_int_equal(medha_gguf_alignment(g), 32);
	assert_int_equal(medha_gguf_data_offset(g) % 32, 0);
	assert_int_equal(medha_gguf_tensor_count(g), 2 * NTYPES);
	for (k = 0; k < 2 * NTYPES; k++) {
		t = medha_gguf_tensor_at(g, (uint64_t)k);
		assert_ptr_equal(medha_gguf_tensor_get(g, ts[k].name), t);
		assert_string_equal(t->name, ts[k].name);
		assert_int_equal(t->type, ts[k].type);
		assert_int_equal(t->n_dims, ts[k].nd);
		assert_memory_equal(t->ne, ts[k].ne, sizeof(t->ne));
		assert_int_equal(t->offset % 32, 0);
		assert_int_equal(((uintptr_t)t->data) % 32, 0);
		assert_int_equal(t->nbytes, ts[k].nbytes);
		assert_memory_equal(t->data, ts[k].data, t->nbytes);
		/* dequantized: equal, bit for bit, to the buffer's */
		rows = (int)(ts[k].ne[1] * ts[k].ne[2] * ts[k].ne[3]);
		rowb = medha_ggml_row_bytes(t->type, t->ne[0]);
		assert_non_null(y0 = malloc((size_t)t->ne[0] * sizeof(float)));
		assert_non_null(y1 = malloc((size_t)t->ne[0] * sizeof(float)));
		for (r = 0; r < rows; r++) {
			assert_int_equal(medha_dequant_row(t->type,
			                     (const char *)t->data + r * rowb,
			                     y0, t->ne[0]),
			    0);
			assert_int_equal(medha_dequant_row(ts[k].type,
			                     ts[k].data + r * rowb, y1,
			                     t->ne[0]),
			    0);
			assert_memory_equal(y0, y1,
			    (size_t)t->ne[0] * sizeof(float));
		}
		free(y0);
		free(y1);
	}
	medha_gguf_close(g);
	unlink(path);
	for (k = 0; k < 2 * NTYPES; k++)
		free(ts[k].data);
}

/* A custom alignment lays the data out on it. */
static void
test_alignment(void **state)
{
	struct medha_gguf_writer *w;
	const struct medha_tensor *t;
	struct medha_gguf *g;
	char path[64], why[256];
	float x[3] = {1, 2, 3};
	int64_t ne[4] = {3, 1, 1, 1};

	(void)state;
	tmp_name(path, sizeof(path));
	assert_int_equal(medha_gguf_writer_open(&w, path), 0);
	medha_gguf_writer_add_u32(w, "general.alignment", 256);
	medha_gguf_writer_add_tensor(w, "a", MEDHA_GGML_F32, 1, ne, x, 12);
	medha_gguf_writer_add_tensor(w, "b", MEDHA_GGML_F32, 1, ne, x, 12);
	assert_int_equal(medha_gguf_writer_close(w), 0);
	if (medha_gguf_open(&g, path, why, sizeof(why)) != 0)
		fail_msg("%s", why);
	assert_int_equal(medha_gguf_alignment(g), 256);
	assert_int_equal(medha_gguf_data_offset(g), 256);
	t = medha_gguf_tensor_get(g, "b");
	assert_int_equal(t->offset, 256);
	assert_memory_equal(t->data, x, 12);
	medha_gguf_close(g);
	unlink(path);
}

/* Each misuse: a sticky EINVAL, close returns it, the file is gone. */
static void
test_misuse(void **state)
{
	struct medha_gguf_writer *w;
	char path[64];
	float x[64] = {0};
	int64_t ne[4] = {32, 2, 1, 1}, bad[4] = {33, 1, 1, 1},
	        zero[4] = {32, 0, 1, 1};
	int k, save = medha_log_level;

	(void)state;
	medha_log_level = -1; /* the reasons are logged: keep quiet */
	for (k = 0; k < 9; k++) {
		tmp_name(path, sizeof(path));
		assert_int_equal(medha_gguf_writer_open(&w, path), 0);
		medha_gguf_writer_add_u32(w, "a", 1);
		medha_gguf_writer_add_tensor(w, "t", MEDHA_GGML_F32, 2, ne, x,
		    256);
		switch (k) {
		case 0: medha_gguf_writer_add_u32(w, "a", 2); break;
		case 1: medha_gguf_writer_add_str(w, "", "x"); break;
		case 2:
			medha_gguf_writer_add_tensor(w, "t", MEDHA_GGML_F32, 2,
			    ne, x, 256);
			break;
		case 3:
			medha_gguf_writer_add_tensor(w, "u", MEDHA_GGML_F32, 2,
			    ne, x, 255);
			break;
		case 4:
			medha_gguf_writer_add_tensor(w, "u", MEDHA_GGML_Q8_0, 1,
			    bad, x, 34);
			break;
		case 5:
			/* 16: IQ2_XXS, a type medha does not read */
			medha_gguf_writer_add_tensor(w, "u", 16, 1, ne, x, 22);
			break;
		case 6:
			medha_gguf_writer_add_tensor(w, "u", MEDHA_GGML_F32, 5,
			    ne, x, 256);
			break;
		case 7:
			medha_gguf_writer_add_tensor(w, "u", MEDHA_GGML_F32, 2,
			    zero, x, 0);
			break;
		case 8: medha_gguf_writer_add_u32(w, "general.alignment", 3);
		}
		/* sticky: a good call after a bad one fails too */
		assert_int_equal(medha_gguf_writer_add_u32(w, "z", 1),
		    MEDHA_EINVAL);
		assert_int_equal(medha_gguf_writer_close(w), MEDHA_EINVAL);
		assert_int_equal(access(path, F_OK), -1);
	}
	medha_log_level = save;
	assert_int_equal(medha_gguf_writer_open(&w, "/nonexistent/x.gguf"),
	    MEDHA_EIO);
	assert_null(w);
	/* a full disk: the error surfaces at close */
	if (access("/dev/full", W_OK) == 0) {
		assert_int_equal(medha_gguf_writer_open(&w, "/dev/full"), 0);
		medha_gguf_writer_add_tensor(w, "t", MEDHA_GGML_F32, 2, ne, x,
		    256);
		assert_int_equal(medha_gguf_writer_close(w), MEDHA_EIO);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_alignment),
	    cmocka_unit_test(test_misuse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
