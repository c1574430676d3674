/*
 * gguf.h: a bounds-checked reader of GGUF files (the llama.cpp
 * ecosystem's single-file model format), versions 2 and 3, little-endian,
 * and a writer of version 3 files.
 *
 * The reader maps the file read-only and copies nothing but tensor names:
 * every count, length and offset is checked against the file size and the
 * limits below before it is used, so a truncated or hostile file gives
 * MEDHA_ETRUNC or MEDHA_EFORMAT with a reason, never a crash or a large
 * allocation. It reads the header, every metadata key/value and every
 * tensor's information (name, shape, type, where its data lies); tensor
 * data stays in the mapping and is dequantized with quant.h. (As with any
 * mapped file, truncating the file while it is open is not defended
 * against.)
 *
 *	struct medha_gguf *g;
 *	const struct medha_tensor *t;
 *	char why[256];
 *	uint64_t layers;
 *	if (medha_gguf_open(&g, "model.gguf", why, sizeof(why)) != 0)
 *		errx(1, "%s", why);
 *	if (medha_gguf_get_u64(g, "llama.block_count", &layers) != 0)
 *		...;
 *	if (medha_gguf_tensor_lookup(g, "output_norm.weight", &t, why,
 *	    sizeof(why)) != 0)
 *		errx(1, "%s", why);
 *	medha_dequant_row(t->type, t->data, row, t->ne[0]);
 *	medha_gguf_close(g);
 */
#ifndef MEDHA_GGUF_H
#define MEDHA_GGUF_H

#include "medha.h"
#include "model/quant.h"

#include <stddef.h>
#include <stdint.h>

/* Value types, numbered as in the file. */
enum medha_gguf_type {
	MEDHA_GGUF_UINT8 = 0,
	MEDHA_GGUF_INT8 = 1,
	MEDHA_GGUF_UINT16 = 2,
	MEDHA_GGUF_INT16 = 3,
	MEDHA_GGUF_UINT32 = 4,
	MEDHA_GGUF_INT32 = 5,
	MEDHA_GGUF_FLOAT32 = 6,
	MEDHA_GGUF_BOOL = 7,
	MEDHA_GGUF_STRING = 8,
	MEDHA_GGUF_ARRAY = 9,
	MEDHA_GGUF_UINT64 = 10,
	MEDHA_GGUF_INT64 = 11,
	MEDHA_GGUF_FLOAT64 = 12,
};

#define MEDHA_GGUF_KEY_MAX (64u << 10) /* longest key, bytes (spec: 65535) */
#define MEDHA_GGUF_STR_MAX (16u << 20) /* longest string value, bytes */
#define MEDHA_GGUF_DEPTH_MAX 8         /* deepest nesting of arrays */

struct medha_gguf; /* opaque: the mapping and an index of the metadata */

/*
 * Map path and index its metadata. On success *g is the caller's, to be
 * released with medha_gguf_close(). On failure *g is NULL and why (if not
 * NULL) names the problem without the path, which the caller prefixes:
 * e.g. "metadata key 1 (\"general.name\"): string length 1000 runs past the
 * end of the file (892 bytes left) (at offset 101 of 993)". Returns 0,
 * MEDHA_EIO (open, stat or map failed), MEDHA_ETRUNC, MEDHA_EFORMAT,
 * MEDHA_EUNSUP (version other than 2 or 3, big-endian file) or
 * MEDHA_ENOMEM.
 */
int medha_gguf_open(struct medha_gguf **g, const char *path, char *why,
    size_t whylen);
/*
 * The same for a file already in memory: buf (size bytes) is borrowed,
 * not copied, and must outlive g; it needs no alignment.
 */
int medha_gguf_open_mem(struct medha_gguf **g, const void *buf, size_t size,
    char *why, size_t whylen);
/* Unmap and free; g may be NULL. Pointers taken from g die with it. */
void medha_gguf_close(struct medha_gguf *g);

uint32_t medha_gguf_version(const struct medha_gguf *g);
/* Number of tensors (all of them read and checked at open). */
uint64_t medha_gguf_tensor_count(const struct medha_gguf *g);
/* File offset where the tensor information starts (after the metadata). */
uint64_t medha_gguf_tensor_info_offset(const struct medha_gguf *g);
/* Alignment of tensor data (general.alignment, default 32). */
uint64_t medha_gguf_alignment(const struct medha_gguf *g);
/* File offset of the tensor data section (tensor offsets count from it). */
uint64_t medha_gguf_data_offset(const struct medha_gguf *g);

/* Metadata entries, in file order: 0 <= i < medha_gguf_kv_count(g). */
size_t medha_gguf_kv_count(const struct medha_gguf *g);
/*
 * Key and type of entry i. The key points into the mapping, is keylen
 * bytes long and is NOT NUL-terminated; it lives until medha_gguf_close().
 */
int medha_gguf_kv_key(const struct medha_gguf *g, size_t i, const char **key,
    size_t *keylen, int *type);
/* Index of key (an O(log n) search), or MEDHA_ENOTFOUND. */
int medha_gguf_find(const struct medha_gguf *g, const char *key);

/*
 * Typed lookups by key. Each returns 0, MEDHA_ENOTFOUND (no such key) or
 * MEDHA_EFORMAT (the value has another type); get_u64 and get_i64 take any
 * integer type or bool and return MEDHA_ERANGE when the value does not fit;
 * get_f64 takes floats and integers.
 */
int
medha_gguf_get_u64(const struct medha_gguf *g, const char *key, uint64_t *v);
int medha_gguf_get_i64(const struct medha_gguf *g, const char *key, int64_t *v);
int medha_gguf_get_f64(const struct medha_gguf *g, const char *key, double *v);
/*
 * A string value: *s points into the mapping (valid until close), is
 * *len bytes long and is NOT NUL-terminated.
 */
int medha_gguf_get_str(const struct medha_gguf *g, const char *key,
    const char **s, size_t *len);
/* Copy a string value into buf as a C string, truncated to fit (bufsz > 0). */
int medha_gguf_get_strbuf(const struct medha_gguf *g, const char *key,
    char *buf, size_t bufsz);
/* Element count and element type (NULL to skip) of an array value. */
int medha_gguf_arr_len(const struct medha_gguf *g, const char *key, uint64_t *n,
    int *elem_type);

/*
 * Array elements. medha_gguf_arr_strings calls fn(arg, i, s, len) for
 * each element of an array of strings, in order; s points into the
 * mapping (valid until close), is len bytes long and is NOT
 * NUL-terminated. It stops at the first non-zero value fn returns and
 * returns that value. Returns 0, MEDHA_ENOTFOUND (no such key) or
 * MEDHA_EFORMAT (not an array of strings).
 */
int medha_gguf_arr_strings(const struct medha_gguf *g, const char *key,
    int (*fn)(void *arg, uint64_t i, const char *s, size_t len), void *arg);
/*
 * Copy a numeric array into out (n elements, the caller's memory): n must
 * equal the array's length (else MEDHA_EINVAL). arr_f32 converts every
 * integer, bool and float element type to float (float64 is rounded);
 * arr_i32 takes integer and bool elements and returns MEDHA_ERANGE when
 * one does not fit in int32 (out is then partly written). Both return
 * MEDHA_ENOTFOUND, or MEDHA_EFORMAT for a non-array or another element
 * type.
 */
int medha_gguf_arr_f32(const struct medha_gguf *g, const char *key, float *out,
    uint64_t n);
int medha_gguf_arr_i32(const struct medha_gguf *g, const char *key,
    int32_t *out, uint64_t n);

/*
 * Tensors. Checked at open: names are non-empty, unique, at most
 * MEDHA_GGUF_NAME_MAX bytes without NUL; 1 to 4 dimensions, each positive,
 * their product within int64; the offset a multiple of the alignment. For
 * a type this build knows (quant.h), also: the row length ne[0] is a
 * multiple of the block size and the data lies within the file.
 *
 * A tensor of a type this build does not know does not stop the file from
 * opening (a newer file may hold a tensor nobody here asks for): it is
 * listed with data NULL and nbytes 0, and medha_gguf_tensor_lookup()
 * refuses it with MEDHA_EUNSUP and the type number in the reason.
 */
#define MEDHA_GGUF_NAME_MAX 256
#define MEDHA_GGUF_DIMS_MAX 4

struct medha_tensor {
	const char *name; /* NUL-terminated, owned by g */
	int type;         /* enum medha_ggml_type, or an unknown id */
	int n_dims;       /* 1..4 */
	int64_t ne[4];    /* ne[0] = row length (innermost); unused = 1 */
	const void *data; /* in the mapping; NULL for an unknown type */
	size_t nbytes;    /* bytes of data; 0 for an unknown type */
	uint64_t offset;  /* of the data, from the data section start */
};

/* Tensor i in file order (owned by g), or NULL if i is out of range. */
const struct medha_tensor *
medha_gguf_tensor_at(const struct medha_gguf *g, uint64_t i);
/* The tensor named name (owned by g; an O(log n) search), or NULL. */
const struct medha_tensor *
medha_gguf_tensor_get(const struct medha_gguf *g, const char *name);
/*
 * The tensor named name, if it can be used: returns 0 and sets *t (owned
 * by g), or MEDHA_ENOTFOUND or MEDHA_EUNSUP (type unknown to this build)
 * with a reason in why that names the tensor.
 */
int medha_gguf_tensor_lookup(const struct medha_gguf *g, const char *name,
    const struct medha_tensor **t, char *why, size_t whylen);

/*
 * The writer (gguf_write.c): a GGUF v3 file made of metadata and tensors
 * added in order, written out at close.
 *
 *	struct medha_gguf_writer *w;
 *	int64_t ne[4] = {64, 32, 1, 1};
 *	if (medha_gguf_writer_open(&w, "tiny.gguf") != 0)
 *		...;
 *	medha_gguf_writer_add_str(w, "general.architecture", "llama");
 *	medha_gguf_writer_add_tensor(w, "output.weight", MEDHA_GGML_F32, 2,
 *	    ne, data, 64 * 32 * 4);
 *	if (medha_gguf_writer_close(w) != 0)
 *		...;
 *
 * Errors are sticky (as in mpack): once an add fails, every later call
 * returns that error and close returns it too, so a caller may check only
 * close. Misuse (a duplicate key or tensor name, a bad shape or size, an
 * unknown type) is MEDHA_EINVAL and logged with its reason. On any error
 * close removes the partly written file.
 */
struct medha_gguf_writer; /* opaque */

/*
 * Create path (truncating it) for writing. On success *w is the caller's
 * until medha_gguf_writer_close(). Returns 0, MEDHA_EIO or MEDHA_ENOMEM.
 */
int medha_gguf_writer_open(struct medha_gguf_writer **w, const char *path);
/*
 * Metadata, in the order added; keys and strings are copied. A u32 (or
 * u64) "general.alignment" also sets the alignment of the tensor data
 * (a power of two; default 32). Each returns 0 or the sticky error.
 */
int medha_gguf_writer_add_u32(struct medha_gguf_writer *w, const char *key,
    uint32_t v);
int medha_gguf_writer_add_i32(struct medha_gguf_writer *w, const char *key,
    int32_t v);
int medha_gguf_writer_add_u64(struct medha_gguf_writer *w, const char *key,
    uint64_t v);
int medha_gguf_writer_add_f32(struct medha_gguf_writer *w, const char *key,
    float v);
int
medha_gguf_writer_add_bool(struct medha_gguf_writer *w, const char *key, int v);
int medha_gguf_writer_add_str(struct medha_gguf_writer *w, const char *key,
    const char *s);
int medha_gguf_writer_add_arr_str(struct medha_gguf_writer *w, const char *key,
    const char *const *s, uint64_t n);
int medha_gguf_writer_add_arr_f32(struct medha_gguf_writer *w, const char *key,
    const float *v, uint64_t n);
int medha_gguf_writer_add_arr_i32(struct medha_gguf_writer *w, const char *key,
    const int32_t *v, uint64_t n);
/*
 * A tensor of type (a known enum medha_ggml_type) and shape ne[0..n_dims)
 * (n_dims 1 to 4; ne[0] the row length, a multiple of the block size),
 * whose data (nbytes, exactly medha_ggml_row_bytes(type, ne[0]) times the
 * number of rows) is already in that type. The name is copied; the data
 * is NOT: it is referenced and must stay valid and unchanged until
 * medha_gguf_writer_close() returns.
 */
int medha_gguf_writer_add_tensor(struct medha_gguf_writer *w, const char *name,
    int type, int n_dims, const int64_t ne[4], const void *data, size_t nbytes);
/*
 * Write the header, the metadata, the tensor information, padding and
 * the data; close the file (its error checked) and free w, whatever
 * happens. Returns 0, the sticky error, or MEDHA_EIO.
 */
int medha_gguf_writer_close(struct medha_gguf_writer *w);

/* Name of a value type ("uint32", "array", ...); "unknown" if out of range. */
const char *medha_gguf_type_name(int type);

#endif
