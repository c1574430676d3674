/*
 * gguf_tensor_test.c: the tensor information of the GGUF reader
 * (libcore/gguf_tensor.c). A file is written here byte by byte with a
 * tensor of every supported type, one of a type unknown to this build,
 * 1 to 4 dimensions and a custom alignment: it must list and look up
 * exactly (the unknown type listed, refused on lookup with its number in
 * the reason), and every prefix of it must be refused. Then one entry at
 * a time is broken: a tensor past the end, a misaligned offset,
 * overflowing, zero or too many dimensions, a row that is not whole
 * blocks, a duplicate or empty name, an implausible type, a bad
 * alignment: each refused with a reason naming the tensor.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

struct buf {
	unsigned char b[4096];
	size_t n;
};

static void
put(struct buf *b, uint64_t v, int bytes)
{
	int i;

	assert_true(b->n + bytes <= sizeof(b->b));
	for (i = 0; i < bytes; i++)
		b->b[b->n++] = (unsigned char)(v >> (8 * i));
}

static void
put_str(struct buf *b, const char *s)
{
	put(b, strlen(s), 8);
	assert_true(b->n + strlen(s) <= sizeof(b->b));
	memcpy(b->b + b->n, s, strlen(s));
	b->n += strlen(s);
}

/* One tensor information entry for the tensor-file builder. */
struct tdesc {
	const char *name;
	uint32_t nd;
	uint64_t ne[4];
	uint32_t type;
	uint64_t off;
};

/*
 * The tensor file: n tensors, general.alignment = align, then data_bytes
 * of data (byte i of the data section is i & 0xff). Returns the data
 * section's offset.
 */
static size_t
build_t(struct buf *b, const struct tdesc *t, int n, uint32_t align,
    size_t data_bytes)
{
	size_t i, data, lay;
	uint32_t d;
	int k;

	memset(b, 0, sizeof(*b));
	put(b, 0x46554747, 4);
	put(b, 3, 4);
	put(b, (uint64_t)n, 8);
	put(b, 1, 8);
	put_str(b, "general.alignment");
	put(b, MEDHA_GGUF_UINT32, 4);
	put(b, align, 4);
	for (k = 0; k < n; k++) {
		put_str(b, t[k].name);
		put(b, t[k].nd, 4);
		for (d = 0; d < t[k].nd && d < 4; d++)
			put(b, t[k].ne[d], 8);
		put(b, t[k].type, 4);
		put(b, t[k].off, 8);
	}
	lay = align != 0 ? align : 32; /* 0 is refused; lay out as 32 */
	data = (b->n + lay - 1) / lay * lay;
	assert_true(data + data_bytes <= sizeof(b->b));
	b->n = data;
	for (i = 0; i < data_bytes; i++)
		b->b[b->n++] = (unsigned char)i;
	return data;
}

static const struct tdesc good[] = {
    {"a", 2, {32, 2}, MEDHA_GGML_Q8_0, 0},          /* 68 bytes */
    {"b.weight", 1, {8}, MEDHA_GGML_F32, 128},      /* 32 */
    {"c", 3, {64, 1, 2}, MEDHA_GGML_F16, 192},      /* 256 */
    {"future", 2, {5, 3}, 99, 448},                 /* unknown */
    {"d", 4, {256, 1, 1, 2}, MEDHA_GGML_Q6_K, 448}, /* 420 */
    {"e", 1, {512}, MEDHA_GGML_Q4_K, 896},          /* 288 */
    {"f", 2, {32, 3}, MEDHA_GGML_Q4_1, 1216},       /* 60 */
    {"g", 1, {64}, MEDHA_GGML_Q4_0, 1280},          /* 36 */
    {"h", 2, {2, 2}, MEDHA_GGML_BF16, 1344},        /* 8 */
};
#define NGOOD ((int)(sizeof(good) / sizeof(good[0])))
#define GOOD_BYTES 1352

static void
test_tensors(void **state)
{
	const struct medha_tensor *t;
	struct medha_gguf *g;
	struct buf b;
	char why[256];
	size_t data, i;
	int k;

	(void)state;
	data = build_t(&b, good, NGOOD, 64, GOOD_BYTES);
	assert_int_equal(medha_gguf_open_mem(&g, b.b, b.n, why, sizeof(why)),
	    0);
	assert_int_equal(medha_gguf_tensor_count(g), NGOOD);
	assert_int_equal(medha_gguf_alignment(g), 64);
	assert_int_equal(medha_gguf_data_offset(g), data);
	for (k = 0; k < NGOOD; k++) {
		t = medha_gguf_tensor_at(g, (uint64_t)k);
		assert_non_null(t);
		assert_string_equal(t->name, good[k].name);
		assert_ptr_equal(medha_gguf_tensor_get(g, good[k].name), t);
		assert_int_equal(t->type, good[k].type);
		assert_int_equal(t->n_dims, good[k].nd);
		for (i = 0; i < 4; i++)
			assert_int_equal(t->ne[i],
			    i < good[k].nd ? good[k].ne[i] : 1);
		assert_int_equal(t->offset, good[k].off);
		if (good[k].type == 99) {
			assert_null(t->data);
			assert_int_equal(t->nbytes, 0);
			continue;
		}
		assert_ptr_equal(t->data, b.b + data + good[k].off);
		assert_int_equal(t->nbytes,
		    medha_ggml_row_bytes(t->type, t->ne[0]) *
		        (size_t)(t->ne[1] * t->ne[2] * t->ne[3]));
		assert_int_equal(medha_gguf_tensor_lookup(g, t->name, &t, why,
		                     sizeof(why)),
		    0);
	}
	assert_null(medha_gguf_tensor_at(g, NGOOD));
	assert_null(medha_gguf_tensor_get(g, "nope"));
	assert_null(medha_gguf_tensor_get(g, ""));
	assert_int_equal(medha_gguf_tensor_lookup(g, "nope", &t, why,
	                     sizeof(why)),
	    MEDHA_ENOTFOUND);
	assert_null(t);
	assert_non_null(strstr(why, "no tensor named \"nope\""));
	assert_int_equal(medha_gguf_tensor_lookup(g, "future", &t, why,
	                     sizeof(why)),
	    MEDHA_EUNSUP);
	assert_non_null(strstr(why, "\"future\": type 99 is not supported"));
	medha_gguf_close(g);

	/* every prefix is refused; so is a file cut inside the last data */
	for (i = 0; i < b.n; i++) {
		why[0] = '\0';
		if (medha_gguf_open_mem(&g, b.b, i, why, sizeof(why)) == 0)
			fail_msg("prefix of %zu bytes opened", i);
		assert_null(g);
		assert_true(strlen(why) > 0);
	}
}

/* good with entry k replaced by d: expect rc and a reason holding reason. */
static void
bad_tensor(int k, struct tdesc d, uint32_t align, int want, const char *reason)
{
	struct tdesc t[NGOOD];
	struct medha_gguf *g;
	struct buf b;
	char why[256];
	int rc;

	memcpy(t, good, sizeof(t));
	t[k] = d;
	build_t(&b, t, NGOOD, align, GOOD_BYTES);
	why[0] = '\0';
	rc = medha_gguf_open_mem(&g, b.b, b.n, why, sizeof(why));
	if (rc != want || strstr(why, reason) == NULL)
		fail_msg("got %d \"%s\", want %d \"%s\"", rc, why, want,
		    reason);
	assert_null(g);
}

static void
test_tensor_corrupt(void **state)
{
	struct tdesc d;

	(void)state;
	d = good[6];  /* f: q4_1 [32, 3] at 1216, 60 bytes */
	d.off = 1344; /* ends 52 bytes past the data */
	bad_tensor(6, d, 64, MEDHA_ETRUNC,
	    "tensor 6 (\"f\"): data of 60 bytes at offset 1344 of the data "
	    "section");
	d.off = UINT64_MAX - 63;
	bad_tensor(6, d, 64, MEDHA_ETRUNC, "runs past the end of the file");
	d.off = 1216 + 32;
	bad_tensor(6, d, 64, MEDHA_EFORMAT,
	    "tensor 6 (\"f\"): data offset 1248 is not a multiple of the "
	    "alignment 64");
	d = good[6];
	d.ne[0] = 33;
	bad_tensor(6, d, 64, MEDHA_EFORMAT,
	    "row length 33 is not a multiple of the q4_1 block size 32");
	d.ne[0] = 1ull << 62;
	d.ne[1] = 1ull << 62;
	bad_tensor(6, d, 64, MEDHA_EFORMAT,
	    "dimensions overflow: 4611686018427387904 elements times "
	    "dimension 1");
	d.ne[0] = 1ull << 62; /* fits int64, but not as bytes in the file */
	d.ne[1] = 1;
	bad_tensor(6, d, 64, MEDHA_ETRUNC, "runs past the end");
	d.type = MEDHA_GGML_F32;
	d.ne[1] = 3; /* 3 * 2^62 elements: within int64? no */
	bad_tensor(6, d, 64, MEDHA_EFORMAT, "dimensions overflow");
	d = good[6];
	d.ne[1] = 0;
	bad_tensor(6, d, 64, MEDHA_EFORMAT,
	    "dimension 1 is 0 (must be 1 to 2^63-1)");
	d.ne[1] = 1ull << 63;
	bad_tensor(6, d, 64, MEDHA_EFORMAT,
	    "dimension 1 is 9223372036854775808");
	d = good[6];
	d.nd = 5;
	bad_tensor(6, d, 64, MEDHA_EFORMAT, "5 dimensions (1 to 4 allowed)");
	d.nd = 0;
	bad_tensor(6, d, 64, MEDHA_EFORMAT, "0 dimensions");
	d = good[6];
	d.name = "c";
	bad_tensor(6, d, 64, MEDHA_EFORMAT,
	    "tensor 6 (\"c\"): duplicate name (first as tensor 2)");
	d.name = "";
	bad_tensor(6, d, 64, MEDHA_EFORMAT, "tensor 6: empty name");
	d = good[6];
	d.type = 5000;
	bad_tensor(6, d, 64, MEDHA_EFORMAT, "type 5000 is no tensor type");
	bad_tensor(6, good[6], 48, MEDHA_EFORMAT,
	    "alignment 48 is not a power of two");
	bad_tensor(6, good[6], 0, MEDHA_EFORMAT,
	    "alignment 0 is not a power of two");
	/* more tensors than the limit, however many bytes follow */
	{
		struct medha_gguf *g;
		struct buf b;
		char why[256];

		build_t(&b, good, 0, 32, 2048);
		b.b[8 + 2] = 0x20; /* tensor count 2^21 */
		assert_int_equal(medha_gguf_open_mem(&g, b.b, b.n, why,
		                     sizeof(why)),
		    MEDHA_EFORMAT);
		assert_non_null(
		    strstr(why, "tensor count 2097152 exceeds the limit"));
	}
	/* with alignment 32, the good offsets still hold; 16 does not */
	d = good[6];
	d.off = 1216 + 16;
	bad_tensor(6, d, 32, MEDHA_EFORMAT,
	    "data offset 1232 is not a multiple of the alignment 32");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tensors),
	    cmocka_unit_test(test_tensor_corrupt),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
