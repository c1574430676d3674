/*
 * gguf-convert.c: rewrite a GGUF model with its matrices in another
 * type, using libcore's reader, dequantizer, quantizer and writer: how
 * the benchmark makes F16, BF16, F32 and Q8_0 versions of SmolLM2 from
 * its Q4_1 file. Every 2-D tensor is dequantized to f32 and quantized to
 * the target type, and so is every 3-D one (a mixture's experts, matrix
 * after matrix); 1-D tensors (norms) stay as they are, and so does a
 * router (ffn_gate_inp, as llama.cpp's quantizer keeps it). Metadata is
 * copied (general.file_type is set to the target's llama.cpp file type).
 *
 *	gguf-convert IN.gguf OUT.gguf f16|bf16|f32|q8_0|q4_0|q4_1|q5_0|q5_1
 *	gguf-convert IN.gguf OUT.gguf q4_k_m|q5_k_m
 *
 * The two mixes follow llama.cpp's Q4_K_M and Q5_K_M in outline: Q4_K
 * (Q5_K) matrices, Q6_K for attn_v and ffn_down in the layers llama.cpp
 * gives more bits (the first and last eighth, every third between) and
 * for the output; a row length that is not a multiple of 256 falls back
 * as llama.cpp's does (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0); the
 * token embedding stays as it is. The K-quants come from libcore's
 * round-to-nearest quantizer (medha_quant_k_row), not ggml's.
 *
 * Build (after make): cc -std=c11 -D_GNU_SOURCE -O2 -iquote libcore
 *	-o gguf-convert contrib/gguf-convert.c build/libmedha.a -ljansson
 *	-lzstd -lpcre2-32 -lm -lpthread
 */
#include "model/gguf.h"
#include "medha.h"
#include "model/quant.h"

#include <err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's LLAMA_FTYPE_* of a file whose matrices are of a type. */
static int
ftype_of(int type)
{
	switch (type) {
	case MEDHA_GGML_F32: return 0;
	case MEDHA_GGML_F16: return 1;
	case MEDHA_GGML_Q4_0: return 2;
	case MEDHA_GGML_Q4_1: return 3;
	case MEDHA_GGML_Q8_0: return 7;
	case MEDHA_GGML_Q5_0: return 8;
	case MEDHA_GGML_Q5_1: return 9;
	case MEDHA_GGML_BF16: return 32;
	}
	return -1;
}

/* LLAMA_FTYPE_MOSTLY_Q4_K_M and _Q5_K_M: the mixes (0: none) */
#define MIX_Q4_K_M 15
#define MIX_Q5_K_M 17

/* llama.cpp's use_more_bits: the layers that get Q6_K in a mix */
static int
more_bits(int l, int n)
{
	return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
}

/* The type tensor name (k columns) gets in a mix, or -1: kept as it is. */
static int
mix_type(int mix, const char *name, int64_t k, int n_layers)
{
	int l = -1, six = 0, t;

	if (strcmp(name, "token_embd.weight") == 0)
		return -1;
	if (sscanf(name, "blk.%d.", &l) == 1 &&
	    (strstr(name, ".attn_v.") != NULL ||
	        strstr(name, ".ffn_down") != NULL))
		six = more_bits(l, n_layers);
	if (strcmp(name, "output.weight") == 0)
		six = 1;
	if (six)
		t = k % MEDHA_QK_K == 0 ? MEDHA_GGML_Q6_K : MEDHA_GGML_Q8_0;
	else if (mix == MIX_Q4_K_M)
		t = k % MEDHA_QK_K == 0 ? MEDHA_GGML_Q4_K : MEDHA_GGML_Q5_0;
	else
		t = k % MEDHA_QK_K == 0 ? MEDHA_GGML_Q5_K : MEDHA_GGML_Q5_1;
	return t;
}

struct strs {
	const char **v;
	char *buf;
	size_t used;
};

static int
take_str(void *arg, uint64_t i, const char *s, size_t len)
{
	struct strs *a = arg;

	memcpy(a->buf + a->used, s, len);
	a->buf[a->used + len] = '\0';
	a->v[i] = a->buf + a->used;
	a->used += len + 1;
	return 0;
}

/* Copy metadata entry i of g into w; exits on a type it cannot copy. */
static void
copy_kv(const struct medha_gguf *g, size_t i, struct medha_gguf_writer *w,
    int ftype)
{
	const char *kp, *s;
	size_t klen, slen;
	int type, et;
	char key[1024];
	uint64_t u, n;
	int64_t v;
	double f;

	if (medha_gguf_kv_key(g, i, &kp, &klen, &type) != 0 ||
	    klen >= sizeof(key))
		errx(1, "metadata entry %zu: unreadable key", i);
	memcpy(key, kp, klen);
	key[klen] = '\0';
	if (strcmp(key, "general.file_type") == 0) {
		medha_gguf_writer_add_u32(w, key, (uint32_t)ftype);
		return;
	}
	switch (type) {
	case MEDHA_GGUF_UINT32:
		medha_gguf_get_u64(g, key, &u);
		medha_gguf_writer_add_u32(w, key, (uint32_t)u);
		return;
	case MEDHA_GGUF_UINT64:
		medha_gguf_get_u64(g, key, &u);
		medha_gguf_writer_add_u64(w, key, u);
		return;
	case MEDHA_GGUF_INT32:
		medha_gguf_get_i64(g, key, &v);
		medha_gguf_writer_add_i32(w, key, (int32_t)v);
		return;
	case MEDHA_GGUF_FLOAT32:
		medha_gguf_get_f64(g, key, &f);
		medha_gguf_writer_add_f32(w, key, (float)f);
		return;
	case MEDHA_GGUF_BOOL:
		medha_gguf_get_u64(g, key, &u);
		medha_gguf_writer_add_bool(w, key, u != 0);
		return;
	case MEDHA_GGUF_STRING:
		medha_gguf_get_str(g, key, &s, &slen);
		{
			char *c = strndup(s, slen);
			medha_gguf_writer_add_str(w, key, c);
			free(c);
		}
		return;
	case MEDHA_GGUF_ARRAY:
		if (medha_gguf_arr_len(g, key, &n, &et) != 0)
			break;
		if (et == MEDHA_GGUF_STRING) {
			struct strs a = {calloc(n + 1, sizeof(char *)), NULL,
			    0};
			/* the strings and their NULs fit in the header's bytes
			 */
			a.buf = malloc(medha_gguf_data_offset(g) + n);
			if (a.v == NULL || a.buf == NULL ||
			    medha_gguf_arr_strings(g, key, take_str, &a) != 0)
				errx(1, "%s: cannot read the strings", key);
			medha_gguf_writer_add_arr_str(w, key, a.v, n);
			free(a.v);
			free(a.buf);
			return;
		}
		if (et == MEDHA_GGUF_INT32) {
			int32_t *x = calloc(n + 1, sizeof(*x));
			if (x == NULL || medha_gguf_arr_i32(g, key, x, n) != 0)
				errx(1, "%s: cannot read the array", key);
			medha_gguf_writer_add_arr_i32(w, key, x, n);
			free(x);
			return;
		}
		if (et == MEDHA_GGUF_FLOAT32) {
			float *x = calloc(n + 1, sizeof(*x));
			if (x == NULL || medha_gguf_arr_f32(g, key, x, n) != 0)
				errx(1, "%s: cannot read the array", key);
			medha_gguf_writer_add_arr_f32(w, key, x, n);
			free(x);
			return;
		}
		break;
	}
	errx(1, "%s: cannot copy a value of type %s", key,
	    medha_gguf_type_name(type));
}

int
main(int argc, char *argv[])
{
	struct medha_gguf *g;
	struct medha_gguf_writer *w;
	char why[512];
	int to, rc, mix = 0, n_layers = 0;
	uint64_t nt;
	void **bufs;

	if (argc != 4) {
		fprintf(stderr,
		    "usage: gguf-convert IN.gguf OUT.gguf "
		    "f16|bf16|f32|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k_m|q5_k_m\n");
		return 2;
	}
	if (strcmp(argv[3], "q4_k_m") == 0)
		mix = MIX_Q4_K_M;
	else if (strcmp(argv[3], "q5_k_m") == 0)
		mix = MIX_Q5_K_M;
	to = mix ? MEDHA_GGML_Q4_K : medha_ggml_type_from_name(argv[3]);
	if (to < 0 || (!mix && ftype_of(to) < 0))
		errx(2, "%s: not a type to convert to", argv[3]);
	if ((rc = medha_gguf_open(&g, argv[1], why, sizeof(why))) != 0)
		errx(1, "%s: %s", argv[1], why);
	if (medha_gguf_writer_open(&w, argv[2]) != 0)
		errx(1, "%s: cannot create", argv[2]);
	for (size_t i = 0; i < medha_gguf_kv_count(g); i++)
		copy_kv(g, i, w, mix ? mix : ftype_of(to));
	nt = medha_gguf_tensor_count(g);
	if ((bufs = calloc(nt + 1, sizeof(*bufs))) == NULL)
		err(1, "calloc");
	for (uint64_t i = 0; i < nt; i++) {
		const struct medha_tensor *t = medha_gguf_tensor_at(g, i);
		int64_t rows = 1, k = t->ne[0];
		float *row;
		size_t rb;
		char *out;
		/* a matrix, or a mixture's experts; not a router */
		const int mat = (t->n_dims == 2 || t->n_dims == 3) &&
		    strstr(t->name, "ffn_gate_inp") == NULL;

		if (t->data == NULL)
			errx(1, "%s: a tensor type this build cannot read",
			    t->name);
		if (mix && mat) {
			if (n_layers == 0)
				for (uint64_t j = 0; j < nt; j++) {
					int l;
					if (sscanf(medha_gguf_tensor_at(g, j)->name,
					        "blk.%d.", &l) == 1 &&
					    l + 1 > n_layers)
						n_layers = l + 1;
				}
			to = mix_type(mix, t->name, k, n_layers);
		}
		if (!mat || to < 0 || t->type == to) {
			medha_gguf_writer_add_tensor(w, t->name, t->type,
			    t->n_dims, t->ne, t->data, t->nbytes);
			continue;
		}
		for (int d = 1; d < t->n_dims; d++)
			rows *= t->ne[d];
		rb = medha_ggml_row_bytes(to, k);
		if ((out = malloc(rb * rows)) == NULL ||
		    (row = malloc(k * sizeof(float))) == NULL)
			err(1, "malloc");
		for (int64_t r = 0; r < rows; r++) {
			const char *src = (const char *)t->data +
			    r * medha_ggml_row_bytes(t->type, k);
			if (medha_dequant_row(t->type, src, row, k) != 0 ||
			    (medha_quant_row(to, row, out + r * rb, k) != 0 &&
			        medha_quant_k_row(to, row, out + r * rb, k) !=
			            0))
				errx(1, "%s: cannot convert row %lld", t->name,
				    (long long)r);
		}
		free(row);
		bufs[i] = out;
		medha_gguf_writer_add_tensor(w, t->name, to, t->n_dims, t->ne,
		    out, rb * rows);
	}
	if ((rc = medha_gguf_writer_close(w)) != 0)
		errx(1, "%s: %s", argv[2], medha_strerror(rc));
	for (uint64_t i = 0; i < nt; i++)
		free(bufs[i]);
	free(bufs);
	medha_gguf_close(g);
	return 0;
}
