/*
 * gguf_write.c: the GGUF v3 writer (gguf.h). Metadata is encoded into a
 * growing buffer as it is added; tensors are recorded (name copied, data
 * referenced) and their offsets laid out at close, when the header, the
 * metadata, the tensor information, padding to the alignment and the data
 * are written in one pass:
 *
 *	"GGUF", u32 3, u64 n_tensors, u64 n_kv, kv..., tensor infos...,
 *	zero padding to the alignment, each tensor's data padded likewise.
 *
 * Errors are sticky: the first one is kept and returned by every later
 * call, and close removes the file it could not finish.
 */
#include "model/gguf.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WR_ALIGN_MAX (1u << 30)

struct wtensor {
	char *name;
	int type;
	int n_dims;
	int64_t ne[4];
	const void *data; /* the caller's, until close */
	size_t nbytes;
	uint64_t offset; /* from the data section start, set at close */
};

struct medha_gguf_writer {
	FILE *f;
	char *path;
	int regular;       /* path is a regular file: removed on failure */
	int err;           /* sticky: the first error */
	unsigned char *kv; /* encoded key/value entries */
	size_t kvlen, kvcap;
	char **keys; /* (nkv) copies, for the duplicate check */
	uint64_t nkv;
	struct wtensor *t;
	uint64_t nt, tcap;
	uint64_t align;
	uint64_t pos; /* bytes written so far */
};

static int
wfail(struct medha_gguf_writer *w, int err, const char *msg, const char *name)
{
	if (w->err == 0) {
		w->err = err;
		medha_log(MEDHA_LOG_ERROR, "gguf writer: %s: %s: %s", w->path,
		    name, msg);
	}
	return w->err;
}

/* Append n bytes to the metadata buffer. */
static void
kv_put(struct medha_gguf_writer *w, const void *p, size_t n)
{
	unsigned char *nb;
	size_t cap;

	if (w->err != 0)
		return;
	if (n > w->kvcap - w->kvlen) {
		cap = w->kvcap != 0 ? w->kvcap : 256;
		while (n > cap - w->kvlen) {
			if (cap > SIZE_MAX / 2) {
				w->err = MEDHA_ENOMEM;
				return;
			}
			cap *= 2;
		}
		if ((nb = realloc(w->kv, cap)) == NULL) {
			w->err = MEDHA_ENOMEM;
			return;
		}
		w->kv = nb;
		w->kvcap = cap;
	}
	memcpy(w->kv + w->kvlen, p, n);
	w->kvlen += n;
}

static void
kv_le(struct medha_gguf_writer *w, uint64_t v, int bytes)
{
	unsigned char b[8];
	int i;

	for (i = 0; i < bytes; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	kv_put(w, b, (size_t)bytes);
}

static void
kv_str(struct medha_gguf_writer *w, const char *s)
{
	size_t n = strlen(s);

	kv_le(w, n, 8);
	kv_put(w, s, n);
}

static uint32_t
f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* Start an entry: check the key, remember it, write it and its type. */
static int
kv_begin(struct medha_gguf_writer *w, const char *key, int type)
{
	char **nk, *k;
	uint64_t i;

	if (w->err != 0)
		return w->err;
	if (key == NULL || key[0] == '\0')
		return wfail(w, MEDHA_EINVAL, "empty metadata key", "?");
	if (strlen(key) > MEDHA_GGUF_KEY_MAX)
		return wfail(w, MEDHA_EINVAL, "metadata key too long", key);
	for (i = 0; i < w->nkv; i++)
		if (strcmp(w->keys[i], key) == 0)
			return wfail(w, MEDHA_EINVAL, "duplicate metadata key",
			    key);
	nk = medha_reallocarray(w->keys, (size_t)w->nkv + 1, sizeof(*nk));
	if (nk == NULL)
		return w->err = MEDHA_ENOMEM;
	w->keys = nk;
	if ((k = strdup(key)) == NULL)
		return w->err = MEDHA_ENOMEM;
	w->keys[w->nkv++] = k;
	kv_str(w, key);
	kv_le(w, (uint64_t)type, 4);
	return w->err;
}

int
medha_gguf_writer_open(struct medha_gguf_writer **wp, const char *path)
{
	struct medha_gguf_writer *w;
	struct stat st;
	int e;

	MEDHA_ASSERT(wp != NULL && path != NULL);
	*wp = NULL;
	if ((w = calloc(1, sizeof(*w))) == NULL ||
	    (w->path = strdup(path)) == NULL) {
		free(w);
		return MEDHA_ENOMEM;
	}
	w->align = 32;
	if ((w->f = fopen(path, "wb")) == NULL) {
		e = errno;
		free(w->path);
		free(w);
		errno = e;
		return MEDHA_EIO;
	}
	/* never remove a device (say /dev/full) on failure */
	w->regular = fstat(fileno(w->f), &st) == 0 && S_ISREG(st.st_mode);
	*wp = w;
	return 0;
}

/* general.alignment also sets the layout. */
static int
set_align(struct medha_gguf_writer *w, const char *key, uint64_t v)
{
	if (strcmp(key, "general.alignment") != 0)
		return 0;
	if (v == 0 || (v & (v - 1)) != 0 || v > WR_ALIGN_MAX)
		return wfail(w, MEDHA_EINVAL,
		    "alignment must be a power of two up to 2^30", key);
	w->align = v;
	return 0;
}

int
medha_gguf_writer_add_u32(struct medha_gguf_writer *w, const char *key,
    uint32_t v)
{
	if (kv_begin(w, key, MEDHA_GGUF_UINT32) != 0 ||
	    set_align(w, key, v) != 0)
		return w->err;
	kv_le(w, v, 4);
	return w->err;
}

int
medha_gguf_writer_add_i32(struct medha_gguf_writer *w, const char *key,
    int32_t v)
{
	if (kv_begin(w, key, MEDHA_GGUF_INT32) != 0)
		return w->err;
	kv_le(w, (uint32_t)v, 4);
	return w->err;
}

int
medha_gguf_writer_add_u64(struct medha_gguf_writer *w, const char *key,
    uint64_t v)
{
	if (kv_begin(w, key, MEDHA_GGUF_UINT64) != 0 ||
	    set_align(w, key, v) != 0)
		return w->err;
	kv_le(w, v, 8);
	return w->err;
}

int
medha_gguf_writer_add_f32(struct medha_gguf_writer *w, const char *key, float v)
{
	if (kv_begin(w, key, MEDHA_GGUF_FLOAT32) != 0)
		return w->err;
	kv_le(w, f32_bits(v), 4);
	return w->err;
}

int
medha_gguf_writer_add_bool(struct medha_gguf_writer *w, const char *key, int v)
{
	if (kv_begin(w, key, MEDHA_GGUF_BOOL) != 0)
		return w->err;
	kv_le(w, v != 0, 1);
	return w->err;
}

int
medha_gguf_writer_add_str(struct medha_gguf_writer *w, const char *key,
    const char *s)
{
	if (kv_begin(w, key, MEDHA_GGUF_STRING) != 0)
		return w->err;
	kv_str(w, s);
	return w->err;
}

/* Start an array entry of n elements of type et. */
static int
arr_begin(struct medha_gguf_writer *w, const char *key, int et, uint64_t n)
{
	if (kv_begin(w, key, MEDHA_GGUF_ARRAY) != 0)
		return w->err;
	kv_le(w, (uint64_t)et, 4);
	kv_le(w, n, 8);
	return w->err;
}

int
medha_gguf_writer_add_arr_str(struct medha_gguf_writer *w, const char *key,
    const char *const *s, uint64_t n)
{
	uint64_t i;

	if (arr_begin(w, key, MEDHA_GGUF_STRING, n) != 0)
		return w->err;
	for (i = 0; i < n && w->err == 0; i++)
		kv_str(w, s[i]);
	return w->err;
}

int
medha_gguf_writer_add_arr_f32(struct medha_gguf_writer *w, const char *key,
    const float *v, uint64_t n)
{
	uint64_t i;

	if (arr_begin(w, key, MEDHA_GGUF_FLOAT32, n) != 0)
		return w->err;
	for (i = 0; i < n && w->err == 0; i++)
		kv_le(w, f32_bits(v[i]), 4);
	return w->err;
}

int
medha_gguf_writer_add_arr_i32(struct medha_gguf_writer *w, const char *key,
    const int32_t *v, uint64_t n)
{
	uint64_t i;

	if (arr_begin(w, key, MEDHA_GGUF_INT32, n) != 0)
		return w->err;
	for (i = 0; i < n && w->err == 0; i++)
		kv_le(w, (uint32_t)v[i], 4);
	return w->err;
}

int
medha_gguf_writer_add_tensor(struct medha_gguf_writer *w, const char *name,
    int type, int n_dims, const int64_t ne[4], const void *data, size_t nbytes)
{
	struct wtensor *nt, *t;
	uint64_t i, rows = 1;
	size_t rowb;
	int d;

	if (w->err != 0)
		return w->err;
	if (name == NULL || name[0] == '\0' ||
	    strlen(name) > MEDHA_GGUF_NAME_MAX)
		return wfail(w, MEDHA_EINVAL, "tensor name empty or too long",
		    name != NULL ? name : "?");
	for (i = 0; i < w->nt; i++)
		if (strcmp(w->t[i].name, name) == 0)
			return wfail(w, MEDHA_EINVAL, "duplicate tensor name",
			    name);
	if (medha_ggml_block_elems(type) == 0)
		return wfail(w, MEDHA_EINVAL, "unknown tensor type", name);
	if (n_dims < 1 || n_dims > MEDHA_GGUF_DIMS_MAX)
		return wfail(w, MEDHA_EINVAL, "1 to 4 dimensions needed", name);
	for (d = 0; d < n_dims; d++) {
		if (ne[d] < 1)
			return wfail(w, MEDHA_EINVAL, "dimension below 1",
			    name);
		if (d > 0) {
			if (rows > (uint64_t)INT64_MAX / (uint64_t)ne[d])
				return wfail(w, MEDHA_EINVAL,
				    "dimensions overflow", name);
			rows *= (uint64_t)ne[d];
		}
	}
	rowb = medha_ggml_row_bytes(type, ne[0]);
	if (rowb == 0)
		return wfail(w, MEDHA_EINVAL,
		    "row length not a multiple of the block size", name);
	if (rows > SIZE_MAX / rowb || rows * rowb != nbytes)
		return wfail(w, MEDHA_EINVAL, "nbytes does not match the shape",
		    name);
	if (data == NULL && nbytes > 0)
		return wfail(w, MEDHA_EINVAL, "no data", name);
	if (w->nt == w->tcap) {
		w->tcap = w->tcap != 0 ? w->tcap * 2 : 16;
		nt = medha_reallocarray(w->t, (size_t)w->tcap, sizeof(*nt));
		if (nt == NULL)
			return w->err = MEDHA_ENOMEM;
		w->t = nt;
	}
	t = &w->t[w->nt];
	memset(t, 0, sizeof(*t));
	if ((t->name = strdup(name)) == NULL)
		return w->err = MEDHA_ENOMEM;
	t->type = type;
	t->n_dims = n_dims;
	for (d = 0; d < 4; d++)
		t->ne[d] = d < n_dims ? ne[d] : 1;
	t->data = data;
	t->nbytes = nbytes;
	w->nt++;
	return 0;
}

/* Write n bytes to the file. */
static void
out(struct medha_gguf_writer *w, const void *p, size_t n)
{
	if (w->err != 0 || n == 0)
		return;
	if (fwrite(p, 1, n, w->f) != n) {
		w->err = MEDHA_EIO;
		return;
	}
	w->pos += n;
}

static void
out_le(struct medha_gguf_writer *w, uint64_t v, int bytes)
{
	unsigned char b[8];
	int i;

	for (i = 0; i < bytes; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	out(w, b, (size_t)bytes);
}

/* Zero bytes up to the next multiple of the alignment. */
static void
out_pad(struct medha_gguf_writer *w)
{
	static const unsigned char zero[256];
	uint64_t n = (w->align - w->pos % w->align) % w->align, k;

	while (n > 0 && w->err == 0) {
		k = n < sizeof(zero) ? n : sizeof(zero);
		out(w, zero, (size_t)k);
		n -= k;
	}
}

static void
write_all(struct medha_gguf_writer *w)
{
	struct wtensor *t;
	uint64_t i, off = 0;
	int d;

	out(w, "GGUF", 4);
	out_le(w, 3, 4);
	out_le(w, w->nt, 8);
	out_le(w, w->nkv, 8);
	out(w, w->kv, w->kvlen);
	for (i = 0; i < w->nt; i++) {
		t = &w->t[i];
		t->offset = off;
		off += (t->nbytes + w->align - 1) / w->align * w->align;
		out_le(w, strlen(t->name), 8);
		out(w, t->name, strlen(t->name));
		out_le(w, (uint64_t)t->n_dims, 4);
		for (d = 0; d < t->n_dims; d++)
			out_le(w, (uint64_t)t->ne[d], 8);
		out_le(w, (uint64_t)t->type, 4);
		out_le(w, t->offset, 8);
	}
	out_pad(w);
	for (i = 0; i < w->nt; i++) {
		out(w, w->t[i].data, w->t[i].nbytes);
		out_pad(w);
	}
}

int
medha_gguf_writer_close(struct medha_gguf_writer *w)
{
	uint64_t i;
	int err, e = 0;

	if (w == NULL)
		return MEDHA_EINVAL;
	write_all(w);
	if (w->err == 0 && fflush(w->f) != 0)
		w->err = MEDHA_EIO;
	if (w->err == MEDHA_EIO)
		e = errno;
	if (fclose(w->f) != 0 && w->err == 0) {
		w->err = MEDHA_EIO;
		e = errno;
	}
	err = w->err;
	if (err != 0 && w->regular)
		unlink(w->path);
	for (i = 0; i < w->nkv; i++)
		free(w->keys[i]);
	free(w->keys);
	for (i = 0; i < w->nt; i++)
		free(w->t[i].name);
	free(w->t);
	free(w->kv);
	free(w->path);
	free(w);
	if (err == MEDHA_EIO)
		errno = e;
	return err;
}
