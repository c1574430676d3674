/*
 * tok_encode.c: text to token ids, as llama.cpp's llama_tokenize does it
 * with the vocabulary tokenizer.c built.
 *
 * First the special-token cut: each special token (control, user-defined,
 * unknown), longest text first, is cut out of every stretch of raw text
 * still left. Each stretch is then a unit of its own: byte-level BPE runs
 * the pre-tokenizer (pretok.c) on it and merges every piece; SPM escapes
 * spaces as U+2581 (and prefixes one after BOS or a special token when
 * add_space_prefix is set) and merges the whole stretch. Merging keeps a
 * linked list of symbols (UTF-8 characters to begin with) and a heap of
 * adjacent pairs that may merge: the lowest merge rank, then the leftmost,
 * for BPE; the highest token score, then the leftmost, for SPM. Entries
 * made stale by an earlier merge are recognised by their size and
 * skipped. A symbol left that is not a token falls back to byte tokens.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "medha.h"
#include "tok/tok_impl.h"

struct ids {
	int32_t *v;
	size_t n, cap;
};

static int
emit(struct ids *o, int32_t id)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 256;
		int32_t *v = medha_reallocarray(o->v, cap, sizeof(*v));

		if (v == NULL)
			return MEDHA_ENOMEM;
		o->v = v;
		o->cap = cap;
	}
	o->v[o->n++] = id;
	return 0;
}

struct sym {
	const char *s; /* text, n bytes; n = 0 once merged away */
	int32_t n, prev, next, id;
};

struct bigram {
	float score;  /* SPM: higher first */
	int32_t rank; /* BPE: lower first */
	int32_t left, right, size, res;
};

/* Scratch of one encode call. */
struct enc {
	const struct medha_tok *t;
	struct ids out;
	struct sym *sym;
	size_t nsym, capsym;
	struct bigram *heap;
	size_t nheap, capheap;
	char *buf; /* merge keys */
	size_t capbuf;
	char *text; /* SPM text */
	size_t captext;
};

/*
 * Make the array *pp (any pointer type, passed by address) hold need
 * elements of size bytes; *cap counts them.
 */
static int
grow(void *pp, size_t *cap, size_t need, size_t size)
{
	size_t c = *cap ? *cap : 64;
	void *p, *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	memcpy(&p, pp, sizeof(p));
	if ((q = medha_reallocarray(p, c, size)) == NULL)
		return MEDHA_ENOMEM;
	memcpy(pp, &q, sizeof(q));
	*cap = c;
	return 0;
}

/* Whether bigram a comes out of the queue before b. */
static int
before(const struct medha_tok *t, const struct bigram *a,
    const struct bigram *b)
{
	if (t->kind == K_BPE) {
		if (a->rank != b->rank)
			return a->rank < b->rank;
	} else if (a->score != b->score)
		return a->score > b->score;
	return a->left < b->left;
}

static int
heap_push(struct enc *e, const struct bigram *b)
{
	size_t i, up;
	struct bigram tmp;

	if (grow(&e->heap, &e->capheap, e->nheap + 1, sizeof(*e->heap)) != 0)
		return MEDHA_ENOMEM;
	i = e->nheap++;
	e->heap[i] = *b;
	while (i > 0 && before(e->t, &e->heap[i], &e->heap[up = (i - 1) / 2])) {
		tmp = e->heap[up];
		e->heap[up] = e->heap[i];
		e->heap[i] = tmp;
		i = up;
	}
	return 0;
}

static struct bigram
heap_pop(struct enc *e)
{
	struct bigram top = e->heap[0], tmp;
	size_t i = 0, c;

	e->heap[0] = e->heap[--e->nheap];
	while ((c = 2 * i + 1) < e->nheap) {
		if (c + 1 < e->nheap &&
		    before(e->t, &e->heap[c + 1], &e->heap[c]))
			c++;
		if (!before(e->t, &e->heap[c], &e->heap[i]))
			break;
		tmp = e->heap[c];
		e->heap[c] = e->heap[i];
		e->heap[i] = tmp;
		i = c;
	}
	return top;
}

/* Queue the pair (l, r) if it merges: by rank (BPE) or score (SPM). */
static int
add_bigram(struct enc *e, int32_t l, int32_t r)
{
	const struct medha_tok *t = e->t;
	struct sym *a, *b;
	struct bigram bg;
	size_t k, n;

	if (l < 0 || r < 0)
		return 0;
	a = &e->sym[l];
	b = &e->sym[r];
	memset(&bg, 0, sizeof(bg));
	bg.left = l;
	bg.right = r;
	bg.size = a->n + b->n;
	if (t->kind == K_SPM) {
		if ((bg.res = lookup(t, a->s, (size_t)bg.size)) < 0)
			return 0;
		bg.score = t->score[bg.res];
		return heap_push(e, &bg);
	}
	if (a->id >= 0 && b->id >= 0) {
		k = pmap_find(&t->merges, pkey(a->id, b->id));
		if (t->merges.key[k] == 0)
			return 0;
		bg.rank = t->merges.rank[k];
		bg.res = t->merges.res[k];
		return heap_push(e, &bg);
	}
	n = (size_t)a->n + 1 + (size_t)b->n;
	if (grow(&e->buf, &e->capbuf, n, 1) != 0)
		return MEDHA_ENOMEM;
	memcpy(e->buf, a->s, (size_t)a->n);
	e->buf[a->n] = ' ';
	memcpy(e->buf + a->n + 1, b->s, (size_t)b->n);
	if ((bg.rank = smap_get(&t->mstr, t->arena, e->buf, n)) < 0)
		return 0;
	bg.res = lookup(t, a->s, (size_t)bg.size);
	return heap_push(e, &bg);
}

static size_t
u8len(unsigned char c)
{
	static const unsigned char n[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	    2, 2, 3, 4};

	return n[c >> 4];
}

/* Merge one word (BPE: a pre-tokenized piece; SPM: a fragment). */
static int
merge_word(void *arg, const char *w, size_t len)
{
	struct enc *e = arg;
	const struct medha_tok *t = e->t;
	struct bigram bg;
	struct sym *a, *b;
	size_t off, n, j;
	int32_t i, id;
	int rc;

	if (len == 0)
		return 0;
	if (len > INT32_MAX)
		return MEDHA_ERANGE; /* symbols count in int32 */
	if (t->ignore_merges && (id = lookup(t, w, len)) >= 0)
		return emit(&e->out, id);
	for (off = 0, e->nsym = 0; off < len; off += n, e->nsym++) {
		n = u8len((unsigned char)w[off]);
		n = n < len - off ? n : len - off;
		if (grow(&e->sym, &e->capsym, e->nsym + 1, sizeof(*e->sym)) !=
		    0)
			return MEDHA_ENOMEM;
		e->sym[e->nsym].s = w + off;
		e->sym[e->nsym].n = (int32_t)n;
		e->sym[e->nsym].prev = (int32_t)e->nsym - 1;
		e->sym[e->nsym].next =
		    off + n < len ? (int32_t)e->nsym + 1 : -1;
		e->sym[e->nsym].id =
		    t->kind == K_BPE ? lookup(t, w + off, n) : -1;
	}
	e->nheap = 0;
	for (i = 1; i < (int32_t)e->nsym; i++)
		if ((rc = add_bigram(e, i - 1, i)) != 0)
			return rc;
	while (e->nheap > 0) {
		bg = heap_pop(e);
		a = &e->sym[bg.left];
		b = &e->sym[bg.right];
		if (a->n == 0 || b->n == 0 || a->n + b->n != bg.size)
			continue; /* stale */
		a->n += b->n;
		b->n = 0;
		a->next = b->next;
		a->id = bg.res;
		if (b->next >= 0)
			e->sym[b->next].prev = bg.left;
		if ((rc = add_bigram(e, a->prev, bg.left)) != 0 ||
		    (rc = add_bigram(e, bg.left, a->next)) != 0)
			return rc;
	}
	for (i = 0; i != -1; i = e->sym[i].next) {
		a = &e->sym[i];
		if (t->kind == K_SPM)
			a->id = lookup(t, a->s, (size_t)a->n);
		if (a->id >= 0) {
			if ((rc = emit(&e->out, a->id)) != 0)
				return rc;
			continue;
		}
		for (j = 0; j < (size_t)a->n; j++) { /* byte fallback */
			unsigned char c = (unsigned char)a->s[j];
			char hex[7];

			if (t->kind == K_BPE)
				id = lookup(t, a->s + j, 1);
			else {
				snprintf(hex, sizeof(hex), "<0x%02X>", c);
				if ((id = lookup(t, hex, 6)) < 0)
					id = lookup(t, a->s + j, 1);
				if (id < 0)
					id = t->unk; /* llama.cpp aborts */
			}
			if (id >= 0 && (rc = emit(&e->out, id)) != 0)
				return rc;
		}
	}
	return 0;
}

/* SPM: a space first where asked, every space as U+2581, then merge. */
static int
spm_fragment(struct enc *e, const char *s, size_t len, int prefix)
{
	size_t i, k = 0;

	/* a buffer of its own: the symbols point into it while e->buf moves */
	if (grow(&e->text, &e->captext, 3 * (len + 1), 1) != 0)
		return MEDHA_ENOMEM;
	if (prefix) {
		memcpy(e->text, "\xe2\x96\x81", 3);
		k = 3;
	}
	for (i = 0; i < len; i++)
		if (s[i] == ' ') {
			memcpy(e->text + k, "\xe2\x96\x81", 3);
			k += 3;
		} else
			e->text[k++] = s[i];
	return merge_word(e, e->text, k);
}

struct frag {
	size_t off, len; /* raw text, when id < 0 */
	int32_t id;
};

/*
 * llama.cpp's tokenizer_st_partition: for each special token, longest
 * first, cut every occurrence out of every stretch of raw text left.
 */
static int
cut_special(const struct medha_tok *t, const char *text, size_t len,
    int parse_special, struct frag **fp, size_t *np)
{
	struct frag *f, *g = NULL;
	size_t nf = 1, ng, capg = 0, i, k, slen, at;
	const char *stext, *m;
	int32_t id;

	if ((f = malloc(sizeof(*f))) == NULL)
		return MEDHA_ENOMEM;
	f[0].off = 0;
	f[0].len = len;
	f[0].id = -1;
	for (k = 0; k < t->nspecial; k++) {
		id = t->special[k];
		if (!parse_special && (t->attr[id] & (A_CONTROL | A_UNKNOWN)))
			continue;
		stext = t->arena + t->vocab.off[id];
		slen = t->vocab.len[id];
		if (memmem(text, len, stext, slen) == NULL)
			continue;
		for (i = ng = 0; i < nf; i++) {
			at = f[i].off;
			while (f[i].id < 0 &&
			    (m = memmem(text + at, f[i].off + f[i].len - at,
			         stext, slen)) != NULL) {
				if (grow(&g, &capg, ng + 2, sizeof(*g)) != 0)
					goto nomem;
				if ((size_t)(m - text) > at)
					g[ng++] = (struct frag){at,
					    (size_t)(m - text) - at, -1};
				g[ng++] = (struct frag){0, 0, id};
				at = (size_t)(m - text) + slen;
			}
			if (grow(&g, &capg, ng + 1, sizeof(*g)) != 0)
				goto nomem;
			if (f[i].id >= 0)
				g[ng++] = f[i];
			else if (at < f[i].off + f[i].len)
				g[ng++] = (struct frag){at,
				    f[i].off + f[i].len - at, -1};
		}
		free(f);
		f = g;
		nf = ng;
		g = NULL;
		capg = 0;
	}
	*fp = f;
	*np = nf;
	return 0;
nomem:
	free(f);
	free(g);
	return MEDHA_ENOMEM;
}

int
medha_tok_encode(const struct medha_tok *t, const char *text, size_t len,
    int flags, int32_t **ids, size_t *n)
{
	struct enc e;
	struct frag *f = NULL;
	size_t nf = 0, i;
	int rc = 0, add = flags & MEDHA_TOK_ADD_SPECIAL, prev_special = 1;

	*ids = NULL;
	*n = 0;
	memset(&e, 0, sizeof(e));
	e.t = t;
	if (len > 0 &&
	    (rc = cut_special(t, text, len, flags & MEDHA_TOK_PARSE_SPECIAL, &f,
	         &nf)) != 0)
		return rc;
	if (add && t->add_bos)
		rc = emit(&e.out, t->bos);
	for (i = 0; i < nf && rc == 0; i++) {
		if (f[i].id >= 0) {
			rc = emit(&e.out, f[i].id);
			prev_special = 1;
		} else if (t->kind == K_SPM) {
			rc = spm_fragment(&e, text + f[i].off, f[i].len,
			    t->add_space_prefix && prev_special);
			prev_special = 0;
		} else
			rc = medha_pretok_split(t->pt, text + f[i].off,
			    f[i].len, merge_word, &e);
	}
	if (rc == 0 && add && t->add_eos)
		rc = emit(&e.out, t->eos);
	if (rc == 0 && e.out.v == NULL)
		rc = grow(&e.out.v, &e.out.cap, 1, sizeof(int32_t));
	free(f);
	free(e.sym);
	free(e.heap);
	free(e.buf);
	free(e.text);
	if (rc != 0) {
		free(e.out.v);
		return rc;
	}
	*ids = e.out.v;
	*n = e.out.n;
	return 0;
}
