/*
 * gguf.c: the GGUF metadata reader (gguf.h). The file is mapped
 * read-only; a cursor walks the header and the key/value section with
 * every read checked against the bytes left, and each entry is recorded
 * as offsets into the mapping (nothing is copied). An index sorted by key
 * serves the lookups and catches duplicate keys.
 *
 * Layout read here (all little-endian):
 *
 *	magic "GGUF", u32 version (2 or 3), u64 tensor_count, u64 kv_count,
 *	kv_count times { string key, u32 type, value },
 *	then tensor_count tensor infos (not read yet), padding, tensor data.
 *
 * A string is a u64 byte length and the bytes (no NUL); an array is a u32
 * element type, a u64 count and the elements, which may be arrays again.
 *
 * Errors: a length or count beyond its limit is MEDHA_EFORMAT; one within
 * its limit that runs past the end of the file is MEDHA_ETRUNC. Every
 * reason names the entry, the element and the file offset.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_KV_MAX (1u << 16)    /* most metadata entries we accept */
#define GGUF_ARR_MAX (1ull << 32) /* most elements in one array */
#define GGUF_HEADER_BYTES 24      /* magic, version, two counts */
#define GGUF_KV_MIN_BYTES 14      /* u64 len, 1-byte key, u32 type, u8 */
#define GGUF_TENSOR_MIN_BYTES 24  /* u64 len, u32 dims, u32 type, u64 off */

struct gguf_kv {
	const char *key; /* into the mapping, keylen bytes, no NUL */
	size_t keylen;
	int type;      /* enum medha_gguf_type */
	int elem_type; /* arrays: type of the elements */
	uint64_t n;    /* arrays: element count; strings: byte length */
	size_t val;    /* offset of the value (string bytes, element 0) */
};

struct medha_gguf {
	unsigned char *map; /* whole file, read-only */
	size_t size;
	uint32_t version;
	uint64_t n_tensors;
	uint64_t tensor_info_off;
	size_t nkv;
	struct gguf_kv *kv;            /* (nkv) in file order */
	const struct gguf_kv **byname; /* (nkv) sorted by key */
};

/* Cursor over the mapping; ctx names what is being read for messages. */
struct rd {
	const unsigned char *p;
	size_t size;
	size_t off;
	char *why;
	size_t whylen;
	char ctx[160];                      /* e.g. metadata key 3 ("a.b") */
	int depth;                          /* array nesting being read */
	uint64_t idx[MEDHA_GGUF_DEPTH_MAX]; /* element index per depth */
};

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

/* Bytes of one element of a fixed-size type; 0 for string and array. */
static size_t
type_size(int type)
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
static int
fail(struct rd *r, int err, const char *fmt, ...)
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

static size_t
left(const struct rd *r)
{
	return r->size - r->off;
}

static int
need(struct rd *r, size_t n, const char *what)
{
	if (n > left(r))
		return fail(r, MEDHA_ETRUNC, "%s needs %zu bytes, %zu left",
		    what, n, left(r));
	return 0;
}

static uint64_t
le(const unsigned char *p, size_t n)
{
	uint64_t v = 0;

	while (n-- > 0)
		v = v << 8 | p[n];
	return v;
}

static int
rd_u32(struct rd *r, const char *what, uint32_t *v)
{
	int rc;

	if ((rc = need(r, 4, what)) != 0)
		return rc;
	*v = (uint32_t)le(r->p + r->off, 4);
	r->off += 4;
	return 0;
}

static int
rd_u64(struct rd *r, const char *what, uint64_t *v)
{
	int rc;

	if ((rc = need(r, 8, what)) != 0)
		return rc;
	*v = le(r->p + r->off, 8);
	r->off += 8;
	return 0;
}

/* A string: check its length against max and the bytes left, skip it. */
static int
rd_str(struct rd *r, const char *what, uint64_t max, size_t *off, uint64_t *len)
{
	int rc;

	if ((rc = rd_u64(r, what, len)) != 0)
		return rc;
	if (*len > max)
		return fail(r, MEDHA_EFORMAT,
		    "%s length %llu exceeds the "
		    "limit of %llu",
		    what, (unsigned long long)*len, (unsigned long long)max);
	if (*len > left(r))
		return fail(r, MEDHA_ETRUNC,
		    "%s length %llu runs past the "
		    "end of the file (%zu bytes left)",
		    what, (unsigned long long)*len, left(r));
	*off = r->off;
	r->off += (size_t)*len;
	return 0;
}

static int skip_value(struct rd *, int);

/*
 * An array after its u32 element type and u64 count: check the count
 * against the bytes its elements need at least, then walk them.
 */
static int
skip_elems(struct rd *r, int et, uint64_t n)
{
	size_t esz = type_size(et), min;
	uint64_t i;
	int rc;

	if (r->depth >= MEDHA_GGUF_DEPTH_MAX)
		return fail(r, MEDHA_EFORMAT, "arrays nested deeper than %d",
		    MEDHA_GGUF_DEPTH_MAX);
	if (n > GGUF_ARR_MAX)
		return fail(r, MEDHA_EFORMAT,
		    "array count %llu exceeds the "
		    "limit of %llu",
		    (unsigned long long)n, GGUF_ARR_MAX);
	min = esz != 0 ? esz : et == MEDHA_GGUF_STRING ? 8 : 12;
	if (n > left(r) / min)
		return fail(r, MEDHA_ETRUNC,
		    "array of %llu %s elements runs "
		    "past the end of the file (%zu bytes left)",
		    (unsigned long long)n, medha_gguf_type_name(et), left(r));
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
skip_value(struct rd *r, int type)
{
	size_t off;
	uint64_t n;
	uint32_t et;
	int rc;

	switch (type) {
	case MEDHA_GGUF_STRING:
		return rd_str(r, "string", MEDHA_GGUF_STR_MAX, &off, &n);
	case MEDHA_GGUF_ARRAY:
		if ((rc = rd_u32(r, "array element type", &et)) != 0)
			return rc;
		if (et > MEDHA_GGUF_FLOAT64)
			return fail(r, MEDHA_EFORMAT,
			    "unknown array element "
			    "type %u",
			    et);
		if ((rc = rd_u64(r, "array count", &n)) != 0)
			return rc;
		return skip_elems(r, (int)et, n);
	}
	if (type < 0 || type > MEDHA_GGUF_FLOAT64)
		return fail(r, MEDHA_EFORMAT, "unknown value type %d", type);
	if ((rc = need(r, type_size(type), medha_gguf_type_name(type))) != 0)
		return rc;
	r->off += type_size(type);
	return 0;
}

/* Name an entry for messages: printable bytes of its key, shortened. */
static void
set_ctx(struct rd *r, size_t i, const char *key, size_t keylen)
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
read_kv(struct rd *r, size_t i, struct gguf_kv *e)
{
	size_t koff;
	uint64_t klen, n;
	uint32_t type, et;
	int rc;

	snprintf(r->ctx, sizeof(r->ctx), "metadata key %zu", i);
	if ((rc = rd_str(r, "key", MEDHA_GGUF_KEY_MAX, &koff, &klen)) != 0)
		return rc;
	if (klen == 0)
		return fail(r, MEDHA_EFORMAT, "empty key");
	e->key = (const char *)r->p + koff;
	e->keylen = (size_t)klen;
	set_ctx(r, i, e->key, e->keylen);
	if ((rc = rd_u32(r, "value type", &type)) != 0)
		return rc;
	if (type > MEDHA_GGUF_FLOAT64)
		return fail(r, MEDHA_EFORMAT, "unknown value type %u", type);
	e->type = (int)type;
	e->elem_type = -1;
	e->n = 0;
	switch (e->type) {
	case MEDHA_GGUF_STRING:
		return rd_str(r, "string", MEDHA_GGUF_STR_MAX, &e->val, &e->n);
	case MEDHA_GGUF_ARRAY:
		if ((rc = rd_u32(r, "array element type", &et)) != 0)
			return rc;
		if (et > MEDHA_GGUF_FLOAT64)
			return fail(r, MEDHA_EFORMAT,
			    "unknown array element "
			    "type %u",
			    et);
		if ((rc = rd_u64(r, "array count", &n)) != 0)
			return rc;
		e->elem_type = (int)et;
		e->n = n;
		e->val = r->off;
		return skip_elems(r, (int)et, n);
	}
	e->val = r->off;
	return skip_value(r, e->type);
}

static int
keycmp(const char *a, size_t alen, const char *b, size_t blen)
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

	return keycmp(x->key, x->keylen, y->key, y->keylen);
}

/* Header and metadata of the mapped file g->map. */
static int
parse(struct medha_gguf *g, char *why, size_t whylen)
{
	struct rd r;
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
	if ((rc = need(&r, 4, "magic")) != 0)
		return rc;
	if (memcmp(g->map, "GGUF", 4) != 0)
		return fail(&r, MEDHA_EFORMAT,
		    "bad magic %02x %02x %02x %02x "
		    "(want \"GGUF\")",
		    g->map[0], g->map[1], g->map[2], g->map[3]);
	r.off = 4;
	if ((rc = rd_u32(&r, "version", &v)) != 0)
		return rc;
	if (v == 0x02000000 || v == 0x03000000)
		return fail(&r, MEDHA_EUNSUP, "big-endian GGUF not supported");
	if (v != 2 && v != 3)
		return fail(&r, MEDHA_EUNSUP,
		    "GGUF version %u not supported "
		    "(2 and 3 are)",
		    v);
	g->version = v;
	if ((rc = rd_u64(&r, "tensor count", &g->n_tensors)) != 0 ||
	    (rc = rd_u64(&r, "metadata count", &nkv)) != 0)
		return rc;
	if (nkv > GGUF_KV_MAX)
		return fail(&r, MEDHA_EFORMAT,
		    "metadata count %llu exceeds "
		    "the limit of %u",
		    (unsigned long long)nkv, GGUF_KV_MAX);
	if (nkv > left(&r) / GGUF_KV_MIN_BYTES)
		return fail(&r, MEDHA_ETRUNC,
		    "%llu metadata entries cannot "
		    "fit in the %zu bytes left",
		    (unsigned long long)nkv, left(&r));
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
	snprintf(r.ctx, sizeof(r.ctx), "tensor information");
	g->tensor_info_off = r.off;
	if (g->n_tensors > left(&r) / GGUF_TENSOR_MIN_BYTES)
		return fail(&r, MEDHA_ETRUNC,
		    "%llu tensors announced but "
		    "only %zu bytes follow the metadata",
		    (unsigned long long)g->n_tensors, left(&r));
	qsort(g->byname, g->nkv, sizeof(*g->byname), byname_cmp);
	for (i = 1; i < g->nkv; i++) {
		const struct gguf_kv *a = g->byname[i - 1], *b = g->byname[i];

		if (keycmp(a->key, a->keylen, b->key, b->keylen) == 0) {
			set_ctx(&r, (size_t)(b - g->kv), b->key, b->keylen);
			r.off =
			    (size_t)((const unsigned char *)b->key - g->map);
			return fail(&r, MEDHA_EFORMAT,
			    "duplicate key (first "
			    "as metadata key %zu)",
			    (size_t)(a - g->kv));
		}
	}
	return 0;
}

int
medha_gguf_open(struct medha_gguf **gp, const char *path, char *why,
    size_t whylen)
{
	struct medha_gguf *g;
	struct stat st;
	void *m;
	int fd, rc, e;

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
	if (st.st_size < GGUF_HEADER_BYTES) {
		close(fd);
		medha_why(why, whylen, 0,
		    "file is %lld bytes, shorter than the "
		    "%d-byte GGUF header",
		    (long long)st.st_size, GGUF_HEADER_BYTES);
		return MEDHA_ETRUNC;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		close(fd);
		medha_why(why, whylen, 0, "file too large to map");
		return MEDHA_ERANGE;
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
	if ((rc = parse(g, why, whylen)) != 0) {
		medha_gguf_close(g);
		return rc;
	}
	*gp = g;
	return 0;
}

void
medha_gguf_close(struct medha_gguf *g)
{
	if (g == NULL)
		return;
	if (g->map != NULL)
		munmap(g->map, g->size);
	free(g->kv);
	free(g->byname);
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

static const struct gguf_kv *
lookup(const struct medha_gguf *g, const char *key)
{
	size_t lo = 0, hi = g->nkv, mid, klen = strlen(key);
	const struct gguf_kv *e;
	int c;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		e = g->byname[mid];
		c = keycmp(key, klen, e->key, e->keylen);
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
	const struct gguf_kv *e = lookup(g, key);

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	return (int)(e - g->kv);
}

/*
 * An integer or bool value: *u is the value as unsigned (sign-extended
 * for signed types), *neg says it is negative, and then *s holds it.
 * Returns MEDHA_EFORMAT for the other types.
 */
static int
get_int(const struct medha_gguf *g, const struct gguf_kv *e, uint64_t *u,
    int64_t *s, int *neg)
{
	const unsigned char *p = g->map + e->val;
	size_t n = type_size(e->type);
	uint64_t raw;

	switch (e->type) {
	case MEDHA_GGUF_UINT8:
	case MEDHA_GGUF_UINT16:
	case MEDHA_GGUF_UINT32:
	case MEDHA_GGUF_UINT64:
	case MEDHA_GGUF_BOOL:
		*u = le(p, n);
		*s = 0;
		*neg = 0;
		return 0;
	case MEDHA_GGUF_INT8:
	case MEDHA_GGUF_INT16:
	case MEDHA_GGUF_INT32:
	case MEDHA_GGUF_INT64:
		raw = le(p, n);
		if (n < 8 && (raw >> (8 * n - 1)) != 0)
			raw |= ~0ull << (8 * n); /* sign-extend */
		memcpy(s, &raw, sizeof(*s));
		*u = raw;
		*neg = *s < 0;
		return 0;
	}
	return MEDHA_EFORMAT;
}

int
medha_gguf_get_u64(const struct medha_gguf *g, const char *key, uint64_t *v)
{
	const struct gguf_kv *e = lookup(g, key);
	uint64_t u;
	int64_t s;
	int neg, rc;

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if ((rc = get_int(g, e, &u, &s, &neg)) != 0)
		return rc;
	if (neg)
		return MEDHA_ERANGE;
	*v = u;
	return 0;
}

int
medha_gguf_get_i64(const struct medha_gguf *g, const char *key, int64_t *v)
{
	const struct gguf_kv *e = lookup(g, key);
	uint64_t u;
	int64_t s;
	int neg, rc;

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if ((rc = get_int(g, e, &u, &s, &neg)) != 0)
		return rc;
	if (neg) {
		*v = s;
		return 0;
	}
	if (u > INT64_MAX)
		return MEDHA_ERANGE;
	*v = (int64_t)u;
	return 0;
}

int
medha_gguf_get_f64(const struct medha_gguf *g, const char *key, double *v)
{
	const struct gguf_kv *e = lookup(g, key);
	uint64_t u;
	uint32_t b32;
	int64_t s;
	float f;
	int neg;

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type == MEDHA_GGUF_FLOAT32) {
		b32 = (uint32_t)le(g->map + e->val, 4);
		memcpy(&f, &b32, sizeof(f));
		*v = f;
		return 0;
	}
	if (e->type == MEDHA_GGUF_FLOAT64) {
		u = le(g->map + e->val, 8);
		memcpy(v, &u, sizeof(*v));
		return 0;
	}
	if (get_int(g, e, &u, &s, &neg) != 0)
		return MEDHA_EFORMAT;
	*v = neg ? (double)s : (double)u;
	return 0;
}

int
medha_gguf_get_str(const struct medha_gguf *g, const char *key, const char **s,
    size_t *len)
{
	const struct gguf_kv *e = lookup(g, key);

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type != MEDHA_GGUF_STRING)
		return MEDHA_EFORMAT;
	*s = (const char *)g->map + e->val;
	*len = (size_t)e->n;
	return 0;
}

int
medha_gguf_get_strbuf(const struct medha_gguf *g, const char *key, char *buf,
    size_t bufsz)
{
	const char *s;
	size_t len;
	int rc;

	MEDHA_ASSERT(bufsz > 0);
	if ((rc = medha_gguf_get_str(g, key, &s, &len)) != 0)
		return rc;
	if (len > bufsz - 1)
		len = bufsz - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return 0;
}

int
medha_gguf_arr_len(const struct medha_gguf *g, const char *key, uint64_t *n,
    int *elem_type)
{
	const struct gguf_kv *e = lookup(g, key);

	if (e == NULL)
		return MEDHA_ENOTFOUND;
	if (e->type != MEDHA_GGUF_ARRAY)
		return MEDHA_EFORMAT;
	*n = e->n;
	if (elem_type != NULL)
		*elem_type = e->elem_type;
	return 0;
}
