/*
 * gguf.c: the GGUF reader's core (gguf.h): map the file (or take a
 * buffer), walk the header and the key/value section with a cursor whose
 * every read is checked against the bytes left, and record each entry as
 * offsets into the mapping (nothing is copied). An index sorted by key
 * serves the lookups (gguf_meta.c) and catches duplicate keys; the tensor
 * information that follows is read by gguf_tensor.c.
 *
 * Layout read here (all little-endian):
 *
 *	magic "GGUF", u32 version (2 or 3), u64 tensor_count, u64 kv_count,
 *	kv_count times { string key, u32 type, value },
 *	then tensor_count tensor infos, padding, tensor data.
 *
 * A string is a u64 byte length and the bytes (no NUL); an array is a u32
 * element type, a u64 count and the elements, which may be arrays again.
 *
 * Errors: a length or count beyond its limit is MEDHA_EFORMAT; one within
 * its limit that runs past the end of the file is MEDHA_ETRUNC. Every
 * reason names the entry, the element and the file offset.
 */
#include "model/gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *type_names[] = {
    "uint8",
    "int8",
    "uint16",
    "int16",
    "uint32",
    "int32",
    "float32",
    "bool",
    "string",
    "array",
    "uint64",
    "int64",
    "float64",
};

size_t
gguf_type_size(int type)
{
	switch (type) {
	case MEDHA_GGUF_UINT8:
	case MEDHA_GGUF_INT8:
	case MEDHA_GGUF_BOOL: return 1;
	case MEDHA_GGUF_UINT16:
	case MEDHA_GGUF_INT16: return 2;
	case MEDHA_GGUF_UINT32:
	case MEDHA_GGUF_INT32:
	case MEDHA_GGUF_FLOAT32: return 4;
	case MEDHA_GGUF_UINT64:
	case MEDHA_GGUF_INT64:
	case MEDHA_GGUF_FLOAT64: return 8;
	}
	return 0;
}

const char *
medha_gguf_type_name(int type)
{
	if (type < 0 || type > MEDHA_GGUF_FLOAT64)
		return "unknown";
	return type_names[type];
}

/*
 * Fill why with "<ctx>: <element path>: <message> (at offset X of Y)"
 * and return err.
 */
int
gguf_fail(struct gguf_rd *r, int err, const char *fmt, ...)
{
	char msg[256], path[160];
	size_t n = 0;
	int i;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	path[0] = '\0';
	for (i = 0; i < r->depth && n < sizeof(path); i++) {
		snprintf(path + n, sizeof(path) - n, "%s%llu",
		    i == 0 ? "element " : ".", (unsigned long long)r->idx[i]);
		n = strlen(path);
	}
	medha_why(r->why, r->whylen, 0, "%s%s%s%s%s (at offset %zu of %zu)",
	    r->ctx, r->ctx[0] != '\0' ? ": " : "", path,
	    path[0] != '\0' ? ": " : "", msg, r->off, r->size);
	return err;
}

size_t
gguf_left(const struct gguf_rd *r)
{
	return r->size - r->off;
}

int
gguf_need(struct gguf_rd *r, size_t n, const char *what)
{
	if (n > gguf_left(r))
		return gguf_fail(r, MEDHA_ETRUNC,
		    "%s needs %zu bytes, %zu left", what, n, gguf_left(r));
	return 0;
}

uint64_t
gguf_le(const unsigned char *p, size_t n)
{
	uint64_t v = 0;

	while (n-- > 0)
		v = v << 8 | p[n];
	return v;
}

int
gguf_rd_u32(struct gguf_rd *r, const char *what, uint32_t *v)
{
	int rc;

	if ((rc = gguf_need(r, 4, what)) != 0)
		return rc;
	*v = (uint32_t)gguf_le(r->p + r->off, 4);
	r->off += 4;
	return 0;
}

int
gguf_rd_u64(struct gguf_rd *r, const char *what, uint64_t *v)
{
	int rc;

	if ((rc = gguf_need(r, 8, what)) != 0)
		return rc;
	*v = gguf_le(r->p + r->off, 8);
	r->off += 8;
	return 0;
}

/* A string: check its length against max and the bytes left, skip it. */
int
gguf_rd_str(struct gguf_rd *r, const char *what, uint64_t max, size_t *off,
    uint64_t *len)
{
	int rc;

	if ((rc = gguf_rd_u64(r, what, len)) != 0)
		return rc;
	if (*len > max)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "%s length %llu exceeds the "
		    "limit of %llu",
		    what, (unsigned long long)*len, (unsigned long long)max);
	if (*len > gguf_left(r))
		return gguf_fail(r, MEDHA_ETRUNC,
		    "%s length %llu runs past the "
		    "end of the file (%zu bytes left)",
		    what, (unsigned long long)*len, gguf_left(r));
	*off = r->off;
	r->off += (size_t)*len;
	return 0;
}

static int skip_value(struct gguf_rd *, int);

/*
 * An array after its u32 element type and u64 count: check the count
 * against the bytes its elements need at least, then walk them.
 */
static int
skip_elems(struct gguf_rd *r, int et, uint64_t n)
{
	size_t esz = gguf_type_size(et), min;
	uint64_t i;
	int rc;

	if (r->depth >= MEDHA_GGUF_DEPTH_MAX)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "arrays nested deeper than %d", MEDHA_GGUF_DEPTH_MAX);
	if (n > GGUF_ARR_MAX)
		return gguf_fail(r, MEDHA_EFORMAT,
		    "array count %llu exceeds the "
		    "limit of %llu",
		    (unsigned long long)n, GGUF_ARR_MAX);
	min = esz != 0 ? esz : et == MEDHA_GGUF_STRING ? 8 : 12;
	if (n > gguf_left(r) / min)
		return gguf_fail(r, MEDHA_ETRUNC,
		    "array of %llu %s elements runs "
		    "past the end of the file (%zu bytes left)",
		    (unsigned long long)n, medha_gguf_type_name(et),
		    gguf_left(r));
	if (esz != 0) {
		r->off += (size_t)n * esz;
		return 0;
	}
	r->depth++;
	for (i = 0; i < n; i++) {
		r->idx[r->depth - 1] = i;
		if ((rc = skip_value(r, et)) != 0)
			return rc;
	}
	r->depth--;
	return 0;
}

/* Read past one value of the given type. */
static int
skip_value(struct gguf_rd *r, int type)
{
	size_t off;
	uint64_t n;
	uint32_t et;
	int rc;

	switch (type) {
	case MEDHA_GGUF_STRING:
		return gguf_rd_str(r, "string", MEDHA_GGUF_STR_MAX, &off, &n);
	case MEDHA_GGUF_ARRAY:
		if ((rc = gguf_rd_u32(r, "array element type", &et)) != 0)
			return rc;
		if (et > MEDHA_GGUF_FLOAT64)
			return gguf_fail(r, MEDHA_EFORMAT,
			    "unknown array element "
			    "type %u",
			    et);
		if ((rc = gguf_rd_u64(r, "array count", &n)) != 0)
			return rc;
		return skip_elems(r, (int)et, n);
	}
	if (type < 0 || type > MEDHA_GGUF_FLOAT64)
		return gguf_fail(r, MEDHA_EFORMAT, "unknown value type %d",
		    type);
	if ((rc = gguf_need(r, gguf_type_size(type),
	         medha_gguf_type_name(type))) != 0)
		return rc;
	r->off += gguf_type_size(type);
	return 0;
}

/* Name an entry for messages: printable bytes of its key, shortened. */
static void
set_ctx(struct gguf_rd *r, size_t i, const char *key, size_t keylen)
{
	char k[52];
	size_t j, n = keylen < 48 ? keylen : 48;

	for (j = 0; j < n; j++)
		k[j] = key[j] >= 0x20 && key[j] < 0x7f && key[j] != '"' ? key[j]
		                                                        : '?';
	k[n] = '\0';
	snprintf(r->ctx, sizeof(r->ctx), "metadata key %zu (\"%s%s\")", i, k,
	    keylen > n ? "..." : "");
}

/* One key/value entry, recorded into e. */
static int
read_kv(struct gguf_rd *r, size_t i, struct gguf_kv *e)
{
	size_t koff;
	uint64_t klen, n;
	uint32_t type, et;
	int rc;

	snprintf(r->ctx, sizeof(r->ctx), "metadata key %zu", i);
	if ((rc = gguf_rd_str(r, "key", MEDHA_GGUF_KEY_MAX, &koff, &klen)) != 0)
		return rc;
	if (klen == 0)
		return gguf_fail(r, MEDHA_EFORMAT, "empty key");
	e->key = (const char *)r->p + koff;
	e->keylen = (size_t)klen;
	set_ctx(r, i, e->key, e->keylen);
	if ((rc = gguf_rd_u32(r, "value type", &type)) != 0)
		return rc;
	if (type > MEDHA_GGUF_FLOAT64)
		return gguf_fail(r, MEDHA_EFORMAT, "unknown value type %u",
		    type);
	e->type = (int)type;
	e->elem_type = -1;
	e->n = 0;
	switch (e->type) {
	case MEDHA_GGUF_STRING:
		return gguf_rd_str(r, "string", MEDHA_GGUF_STR_MAX, &e->val,
		    &e->n);
	case MEDHA_GGUF_ARRAY:
		if ((rc = gguf_rd_u32(r, "array element type", &et)) != 0)
			return rc;
		if (et > MEDHA_GGUF_FLOAT64)
			return gguf_fail(r, MEDHA_EFORMAT,
			    "unknown array element "
			    "type %u",
			    et);
		if ((rc = gguf_rd_u64(r, "array count", &n)) != 0)
			return rc;
		e->elem_type = (int)et;
		e->n = n;
		e->val = r->off;
		return skip_elems(r, (int)et, n);
	}
	e->val = r->off;
	return skip_value(r, e->type);
}

int
gguf_keycmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c != 0)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int
byname_cmp(const void *a, const void *b)
{
	const struct gguf_kv *x = *(const struct gguf_kv *const *)a;
	const struct gguf_kv *y = *(const struct gguf_kv *const *)b;

	return gguf_keycmp(x->key, x->keylen, y->key, y->keylen);
}

/* Header and metadata of the mapped file g->map. */
static int
parse(struct medha_gguf *g, char *why, size_t whylen)
{
	struct gguf_rd r;
	uint64_t nkv;
	uint32_t v;
	size_t i;
	int rc;

	memset(&r, 0, sizeof(r));
	r.p = g->map;
	r.size = g->size;
	r.why = why;
	r.whylen = whylen;
	snprintf(r.ctx, sizeof(r.ctx), "header");
	if ((rc = gguf_need(&r, 4, "magic")) != 0)
		return rc;
	if (memcmp(g->map, "GGUF", 4) != 0)
		return gguf_fail(&r, MEDHA_EFORMAT,
		    "bad magic %02x %02x %02x %02x "
		    "(want \"GGUF\")",
		    g->map[0], g->map[1], g->map[2], g->map[3]);
	r.off = 4;
	if ((rc = gguf_rd_u32(&r, "version", &v)) != 0)
		return rc;
	if (v == 0x02000000 || v == 0x03000000)
		return gguf_fail(&r, MEDHA_EUNSUP,
		    "big-endian GGUF not supported");
	if (v != 2 && v != 3)
		return gguf_fail(&r, MEDHA_EUNSUP,
		    "GGUF version %u not supported "
		    "(2 and 3 are)",
		    v);
	g->version = v;
	if ((rc = gguf_rd_u64(&r, "tensor count", &g->n_tensors)) != 0 ||
	    (rc = gguf_rd_u64(&r, "metadata count", &nkv)) != 0)
		return rc;
	if (nkv > GGUF_KV_MAX)
		return gguf_fail(&r, MEDHA_EFORMAT,
		    "metadata count %llu exceeds "
		    "the limit of %u",
		    (unsigned long long)nkv, GGUF_KV_MAX);
	if (nkv > gguf_left(&r) / GGUF_KV_MIN_BYTES)
		return gguf_fail(&r, MEDHA_ETRUNC,
		    "%llu metadata entries cannot "
		    "fit in the %zu bytes left",
		    (unsigned long long)nkv, gguf_left(&r));
	g->kv = medha_calloc((size_t)nkv, sizeof(*g->kv));
	g->byname = medha_calloc((size_t)nkv, sizeof(*g->byname));
	if (g->kv == NULL || g->byname == NULL) {
		medha_why(why, whylen, 0, "out of memory");
		return MEDHA_ENOMEM;
	}
	for (i = 0; i < nkv; i++) {
		if ((rc = read_kv(&r, i, &g->kv[i])) != 0)
			return rc;
		g->byname[i] = &g->kv[i];
		g->nkv = i + 1;
	}
	qsort(g->byname, g->nkv, sizeof(*g->byname), byname_cmp);
	for (i = 1; i < g->nkv; i++) {
		const struct gguf_kv *a = g->byname[i - 1], *b = g->byname[i];

		if (gguf_keycmp(a->key, a->keylen, b->key, b->keylen) == 0) {
			set_ctx(&r, (size_t)(b - g->kv), b->key, b->keylen);
			r.off =
			    (size_t)((const unsigned char *)b->key - g->map);
			return gguf_fail(&r, MEDHA_EFORMAT,
			    "duplicate key (first "
			    "as metadata key %zu)",
			    (size_t)(a - g->kv));
		}
	}
	g->tensor_info_off = r.off;
	return gguf_read_tensors(g, &r);
}

/* Parse the bytes g->map (g->size of them); free g on failure. */
static int
open_common(struct medha_gguf *g, struct medha_gguf **gp, char *why,
    size_t whylen)
{
	int rc;

	if (g->size < GGUF_HEADER_BYTES) {
		rc = medha_why(why, whylen, MEDHA_ETRUNC,
		    "file is %zu bytes, shorter than the %d-byte GGUF header",
		    g->size, GGUF_HEADER_BYTES);
		medha_gguf_close(g);
		return rc;
	}
	if ((rc = parse(g, why, whylen)) != 0) {
		medha_gguf_close(g);
		return rc;
	}
	*gp = g;
	return 0;
}

int
medha_gguf_open(struct medha_gguf **gp, const char *path, char *why,
    size_t whylen)
{
	struct medha_gguf *g;
	struct stat st;
	void *m;
	int fd, e;

	MEDHA_ASSERT(gp != NULL && path != NULL);
	*gp = NULL;
	/* O_NONBLOCK: a FIFO must not hang us before fstat refuses it */
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) == -1) {
		medha_why(why, whylen, 0, "%s", strerror(errno));
		return MEDHA_EIO;
	}
	if (fstat(fd, &st) == -1) {
		e = errno;
		close(fd);
		medha_why(why, whylen, 0, "%s", strerror(e));
		errno = e;
		return MEDHA_EIO;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		medha_why(why, whylen, 0, "not a regular file");
		return MEDHA_EFORMAT;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		close(fd);
		medha_why(why, whylen, 0, "file too large to map");
		return MEDHA_ERANGE;
	}
	if (st.st_size == 0) { /* mmap refuses a length of 0 */
		close(fd);
		medha_why(why, whylen, 0,
		    "file is 0 bytes, shorter than the %d-byte GGUF header",
		    GGUF_HEADER_BYTES);
		return MEDHA_ETRUNC;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	e = errno;
	close(fd);
	if (m == MAP_FAILED) {
		medha_why(why, whylen, 0, "mmap: %s", strerror(e));
		errno = e;
		return MEDHA_EIO;
	}
	if ((g = calloc(1, sizeof(*g))) == NULL) {
		munmap(m, (size_t)st.st_size);
		medha_why(why, whylen, 0, "out of memory");
		return MEDHA_ENOMEM;
	}
	g->map = m;
	g->size = (size_t)st.st_size;
	g->mapped = 1;
	return open_common(g, gp, why, whylen);
}

int
medha_gguf_open_mem(struct medha_gguf **gp, const void *buf, size_t size,
    char *why, size_t whylen)
{
	struct medha_gguf *g;

	MEDHA_ASSERT(gp != NULL && (buf != NULL || size == 0));
	*gp = NULL;
	if ((g = calloc(1, sizeof(*g))) == NULL) {
		medha_why(why, whylen, 0, "out of memory");
		return MEDHA_ENOMEM;
	}
	g->map = buf;
	g->size = size;
	return open_common(g, gp, why, whylen);
}

void
medha_gguf_close(struct medha_gguf *g)
{
	if (g == NULL)
		return;
	if (g->mapped)
		munmap((void *)g->map, g->size);
	free(g->kv);
	free(g->byname);
	gguf_free_tensors(g);
	free(g);
}

uint32_t
medha_gguf_version(const struct medha_gguf *g)
{
	return g->version;
}

uint64_t
medha_gguf_tensor_count(const struct medha_gguf *g)
{
	return g->n_tensors;
}

uint64_t
medha_gguf_tensor_info_offset(const struct medha_gguf *g)
{
	return g->tensor_info_off;
}

size_t
medha_gguf_kv_count(const struct medha_gguf *g)
{
	return g->nkv;
}

int
medha_gguf_kv_key(const struct medha_gguf *g, size_t i, const char **key,
    size_t *keylen, int *type)
{
	if (i >= g->nkv)
		return MEDHA_EINVAL;
	if (key != NULL)
		*key = g->kv[i].key;
	if (keylen != NULL)
		*keylen = g->kv[i].keylen;
	if (type != NULL)
		*type = g->kv[i].type;
	return 0;
}

const struct gguf_kv *
gguf_lookup(const struct medha_gguf *g, const char *key)
{
	size_t lo = 0, hi = g->nkv, mid, klen = strlen(key);
	const struct gguf_kv *e;
	int c;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		e = g->byname[mid];
		c = gguf_keycmp(key, klen, e->key, e->keylen);
		if (c == 0)
			return e;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int
medha_gguf_find(const struct medha_gguf *g, const char *key)
{
	const struct gguf_kv *e = gguf_lookup(g, key);

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	return (int)(e - g->kv);
}
