/*
 * gguf_impl.h: what the parts of the GGUF reader share and nothing else
 * includes: the reader's state, the bounds-checked cursor that walks the
 * mapping (gguf.c) and the tensor-information pass (gguf_tensor.c).
 * Internal names carry a plain gguf_ prefix; the public API is gguf.h.
 */
#ifndef MEDHA_GGUF_IMPL_H
#define MEDHA_GGUF_IMPL_H

#include "model/gguf.h"

#define GGUF_KV_MAX (1u << 16)     /* most metadata entries we accept */
#define GGUF_ARR_MAX (1ull << 32)  /* most elements in one array */
#define GGUF_HEADER_BYTES 24       /* magic, version, two counts */
#define GGUF_KV_MIN_BYTES 14       /* u64 len, 1-byte key, u32 type, u8 */
#define GGUF_TENSOR_MIN_BYTES 33   /* u64 len, 1-byte name, u32 n_dims, */
                                   /* one u64 dim, u32 type, u64 offset */
#define GGUF_TENSOR_MAX (1u << 20) /* most tensors we accept */
#define GGUF_TYPE_MAX 1024         /* tensor type ids from here: corrupt */
#define GGUF_ALIGN_MAX (1u << 30)  /* largest general.alignment */

struct gguf_kv {
	const char *key; /* into the mapping, keylen bytes, no NUL */
	size_t keylen;
	int type;      /* enum medha_gguf_type */
	int elem_type; /* arrays: type of the elements */
	uint64_t n;    /* arrays: element count; strings: byte length */
	size_t val;    /* offset of the value (string bytes, element 0) */
};

struct medha_gguf {
	const unsigned char *map; /* whole file, read-only */
	size_t size;
	int mapped; /* map is ours to munmap (else the caller's buffer) */
	uint32_t version;
	uint64_t n_tensors;
	uint64_t tensor_info_off;
	size_t nkv;
	struct gguf_kv *kv;            /* (nkv) in file order */
	const struct gguf_kv **byname; /* (nkv) sorted by key */
	uint64_t alignment;            /* of tensor data; power of two */
	uint64_t data_off;             /* start of the tensor data section */
	struct medha_tensor *tensors;  /* (n_tensors) in file order */
	const struct medha_tensor **tbyname; /* (n_tensors) sorted by name */
	char *names; /* NUL-terminated names, one block */
};

/* Cursor over the mapping; ctx names what is being read for messages. */
struct gguf_rd {
	const unsigned char *p;
	size_t size;
	size_t off;
	char *why;
	size_t whylen;
	char ctx[160];                      /* e.g. metadata key 3 ("a.b") */
	int depth;                          /* array nesting being read */
	uint64_t idx[MEDHA_GGUF_DEPTH_MAX]; /* element index per depth */
};

/* Fill r->why with "<ctx>: <msg> (at offset X of Y)"; returns err. */
int gguf_fail(struct gguf_rd *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
size_t gguf_left(const struct gguf_rd *r);
/* MEDHA_ETRUNC (with a reason) unless n bytes are left. */
int gguf_need(struct gguf_rd *r, size_t n, const char *what);
/* Little-endian unsigned integer of n (<= 8) bytes at p. */
uint64_t gguf_le(const unsigned char *p, size_t n);
int gguf_rd_u32(struct gguf_rd *r, const char *what, uint32_t *v);
int gguf_rd_u64(struct gguf_rd *r, const char *what, uint64_t *v);
/* A string of at most max bytes: *off and *len say where it is. */
int gguf_rd_str(struct gguf_rd *r, const char *what, uint64_t max, size_t *off,
    uint64_t *len);
/* Bytes of a fixed-size value type; 0 for string and array. */
size_t gguf_type_size(int type);
int gguf_keycmp(const char *a, size_t alen, const char *b, size_t blen);
/* The entry for key, or NULL. */
const struct gguf_kv *gguf_lookup(const struct medha_gguf *g, const char *key);

/*
 * gguf_tensor.c: read the tensor information that starts at r->off
 * (g->n_tensors entries), the alignment and the data section, and check
 * every tensor against the file. Fills g->tensors, g->tbyname, g->names.
 */
int gguf_read_tensors(struct medha_gguf *g, struct gguf_rd *r);
void gguf_free_tensors(struct medha_gguf *g);

#endif
