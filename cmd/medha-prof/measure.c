/*
 * measure.c: medha-prof's backend, its timing primitive, and the
 * operator table (medha-profile(5)).
 *
 * Every figure comes from whole forward calls through the backend
 * interface, with the backend saying where the time went
 * (medha_fwd_times): attention and the output head are timed inside the
 * call, and the rest of a call over every layer is the linear part
 * (projections, MLP, norms, KV writes, and what any batch costs). The
 * context a sequence attends to is made with medha_backend_seq_fill()
 * instead of a prefill, so a point at 8K cached tokens costs one chunk.
 * Attention is timed over every layer by default: timed over the first
 * few only (attn_layers) it came out 10-15% slower per layer than inside
 * a whole pass on the cpu backend, and mixed batches were over-predicted
 * by as much.
 */
#include "medha-prof.h"

#include "cpu/kvcache.h"

#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double
prof_median(double *v, int n)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void
prof_progress(const struct prof *P, const char *what, int i, int n)
{
	if (!P->progress)
		return;
	if (i < n)
		progress("%s %d/%d   ", what, i + 1, n);
	else
		progress("%s %d/%d done\n", what, n, n);
}

/* Room for a batch of `tokens` tokens and `rows` rows of logits. */
static int
grow(struct prof *P, int64_t tokens, int64_t rows)
{
	const struct medha_model_config *c = &P->be->info.shape;
	void *p;

	if (tokens > P->cap_tokens) {
		if ((p = realloc(P->ids, (size_t)tokens * sizeof(int32_t))) ==
		    NULL)
			return MEDHA_ENOMEM;
		P->ids = p;
		free(P->h);
		/* two halves: the states handed in, the states handed out */
		if ((P->h = medha_calloc((size_t)tokens * 2 * c->dim,
		         sizeof(float))) == NULL)
			return MEDHA_ENOMEM;
		for (int64_t i = P->cap_tokens; i < tokens; i++)
			P->ids[i] = (int32_t)((i * 7919 + 13) % c->vocab);
		P->cap_tokens = tokens;
	}
	if (rows > P->cap_rows) {
		free(P->logits);
		if ((P->logits = medha_calloc((size_t)rows * c->vocab,
		         sizeof(float))) == NULL)
			return MEDHA_ENOMEM;
		P->cap_rows = rows;
	}
	return 0;
}

/* Sequences to the items' contexts: shrink every one first, then grow. */
static int
set_contexts(struct prof *P, const struct prof_item *items, int n, char *why,
    size_t whylen)
{
	int i, rc;

	for (i = 0; i < PROF_SEQS; i++) {
		int64_t len = medha_backend_seq_len(P->be, P->seq[i]);
		int64_t want = i < n ? items[i].kv : 0;
		if (len > want &&
		    (rc = medha_backend_seq_fill(P->be, P->seq[i], want)) != 0)
			return medha_why(why, whylen, rc, "sequence %d: %s", i,
			    medha_strerror(rc));
	}
	for (i = 0; i < n; i++)
		if ((rc = medha_backend_seq_fill(P->be, P->seq[i],
		         items[i].kv)) != 0)
			return medha_why(why, whylen, rc,
			    "%lld cached tokens for sequence %d: %s (the KV "
			    "pool holds %lld blocks of %d)",
			    (long long)items[i].kv, i, medha_strerror(rc),
			    (long long)P->be->info.n_blocks,
			    P->be->info.block_size);
	return 0;
}

#define REPS_MAX 64

int
prof_time(struct prof *P, const struct prof_item *items, int n, int lo,
    int hi, int reps, struct prof_time *t, char *why, size_t whylen)
{
	const struct medha_model_config *c = &P->be->info.shape;
	struct medha_batch_seq bs[PROF_SEQS];
	double tot[REPS_MAX], att[REPS_MAX], head[REPS_MAX], rest[REPS_MAX];
	double moe[REPS_MAX];
	int64_t tokens = 0, rows = 0;
	double experts = 0;
	int i, r, rc;

	MEDHA_ASSERT(n >= 1 && n <= PROF_SEQS && lo < hi);
	if (reps <= 0)
		reps = P->reps;
	if (reps > REPS_MAX)
		reps = REPS_MAX;
	for (i = 0; i < n; i++) {
		bs[i] = (struct medha_batch_seq){.seq = P->seq[i],
		    .pos = items[i].kv,
		    .n_tokens = (int32_t)items[i].tokens,
		    .logits = items[i].logits ? MEDHA_LOGITS_LAST
		                              : MEDHA_LOGITS_NONE};
		tokens += items[i].tokens;
		rows += items[i].logits != 0;
	}
	if (hi < c->n_layers)
		rows = 0;
	if (tokens > INT32_MAX / 2 || (rc = grow(P, tokens, rows)) != 0)
		return medha_why(why, whylen, MEDHA_ENOMEM,
		    "buffers for %lld tokens: out of memory",
		    (long long)tokens);
	for (r = 0; r < reps; r++) {
		struct medha_batch b = {P->ids, (int32_t)tokens, bs, n};
		struct medha_fwd_times ft;
		struct medha_fwd f = {.b = &b,
		    .layer_lo = lo,
		    .layer_hi = hi,
		    .h_in = lo > 0 ? P->h : NULL,
		    .h_out = hi < c->n_layers ? P->h + tokens * c->dim : NULL,
		    .logits = rows > 0 ? P->logits : NULL,
		    .times = &ft,
		    .thread_clock = P->thread_clock};
		if ((rc = set_contexts(P, items, n, why, whylen)) != 0)
			return rc;
		if ((rc = medha_backend_forward(P->be, &f, why, whylen)) != 0)
			return rc;
		tot[r] = ft.total;
		att[r] = ft.attn;
		head[r] = ft.head;
		moe[r] = ft.moe;
		experts = ft.experts; /* the same each repetition */
		rest[r] = ft.total - ft.attn - ft.merge - ft.head;
		if (!ft.split)
			return medha_why(why, whylen, MEDHA_EUNSUP,
			    "backend %s does not say where a batch's time "
			    "goes",
			    P->be->info.name);
	}
	t->total = prof_median(tot, reps);
	t->attn = prof_median(att, reps);
	t->head = prof_median(head, reps);
	t->moe = prof_median(moe, reps);
	t->rest = prof_median(rest, reps);
	t->experts = experts;
	return 0;
}

int
prof_open(struct prof *P, char *why, size_t whylen)
{
	struct medha_backend_params o = {0};
	struct prof_item it = {64, 0, 1};
	struct prof_time t;
	int64_t pool;
	int i, rc;

	/* the largest of: the decode points, a prompt (chunk study), a
	   random batch's sequences (check) */
	pool = P->decode_total + P->max_context + P->max_tokens;
	o.n_threads = P->threads;
	o.max_seqs = PROF_SEQS;
	o.kv_type = strcmp(P->kv, "f16") == 0 ? MEDHA_KV_F16
	    : strcmp(P->kv, "bf16") == 0     ? MEDHA_KV_BF16
	                                     : MEDHA_KV_F32;
	o.device = P->device;
	o.kv_blocks = (pool + MEDHA_KV_BLOCK - 1) / MEDHA_KV_BLOCK + PROF_SEQS;
	o.model = P->model;
	if ((rc = medha_backend_open(&P->be, P->backend, &o, why, whylen)) != 0)
		return rc;
	for (i = 0; i < PROF_SEQS; i++)
		if ((rc = medha_backend_seq_alloc(P->be, &P->seq[i])) != 0)
			return medha_why(why, whylen, rc,
			    "%d sequences: %s", PROF_SEQS, medha_strerror(rc));
	/* the weights paged in, packed, the buffers grown: not timed */
	return prof_time(P, &it, 1, 0, P->be->info.shape.n_layers, 2, &t, why,
	    whylen);
}

void
prof_close(struct prof *P)
{
	medha_backend_close(P->be);
	free(P->ids);
	free(P->h);
	free(P->logits);
	P->be = NULL;
}

/* ---- the table ---- */

static const int64_t lin_full[] = {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192};
/* a mixture of experts' linear points: batch sizes up to 256 closer
   (the experts a batch touches grow fast there) */
static const int64_t lin_moe[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64,
    96, 128, 160, 192, 224, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
    4096, 6144, 8192};
static const int64_t head_full[] = {1, 2, 4, 8, 16, 32, 64};
static const int64_t chunk_full[] = {16, 32, 64, 128, 256, 512, 1024, 2048,
    4096, 8192};
static const int64_t ctx_full[] = {0, 512, 1024, 2048, 4096, 8192, 16384,
    32768, 65536, 131072};
static const int64_t dec_full[] = {1, 2, 4, 8, 16, 32, 64};
static const int64_t dctx_full[] = {16, 256, 1024, 2048, 4096, 8192, 16384,
    32768, 65536, 131072};

static const int64_t lin_quick[] = {1, 8, 32, 128};
static const int64_t head_quick[] = {1, 4};
static const int64_t chunk_quick[] = {16, 64};
static const int64_t ctx_quick[] = {0, 256};
static const int64_t dec_quick[] = {1, 4};
static const int64_t dctx_quick[] = {16, 256};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The points of a grid up to max (at least two), -q's as the full's. */
static int
upto(const int64_t *v, int n, int64_t max)
{
	int k = 0;

	while (k < n && v[k] <= max)
		k++;
	return k < 2 && n >= 2 ? 2 : k;
}

int
prof_moe_layers(const struct prof *P)
{
	const struct medha_model_config *c = &P->be->info.shape;
	int n = 0;

	for (int l = 0; l < c->n_layers; l++)
		n += medha_layer_moe(c, l);
	return n;
}

/* The first n token ids drawn at random from s. */
static int
moe_ids(struct prof *P, int64_t n, uint64_t *s, char *why, size_t whylen)
{
	const uint64_t vocab = (uint64_t)P->be->info.shape.vocab;
	int rc;

	if ((rc = grow(P, n, 0)) != 0)
		return medha_why(why, whylen, rc, "out of memory");
	for (int64_t k = 0; k < n; k++)
		P->ids[k] = (int32_t)(splitmix64(s) % vocab);
	return 0;
}

/*
 * The experts T random tokens touch vary from draw to draw (and the
 * grid's fixed ids route unlike random ones), so a routed FFN's time is
 * the mean over draws, as the predictor's is the expectation over them.
 * Each of a point's PROF_MOE_DRAWS * reps runs is a draw of its own
 * (the same runs as a median of reps over fewer draws would take, but
 * as many routings as runs), and the mean leaves out the fastest and
 * slowest sixth by routed-FFN time (a trimmed mean: a run the machine
 * stalled weighs nothing, and the routings' mean is kept). A sweep
 * measures every batch once, in an order of its own (shuffled): a busy
 * machine's load comes and goes over seconds and minutes, and batches
 * measured one after the other (one batch's draws, or the profile's
 * small batch sizes in a row) would all carry the load of their moment,
 * an offset over a stretch of the curve rather than noise around it.
 */
static int
cmp_moe(const void *a, const void *b)
{
	double x = ((const struct prof_time *)a)->moe;
	double y = ((const struct prof_time *)b)->moe;

	return x < y ? -1 : x > y;
}

int
prof_moe_sweeps(struct prof *P, const int64_t *tokens, int n, uint64_t *s,
    struct prof_time *t, const char *what, char *why, size_t whylen)
{
	const int L = P->be->info.shape.n_layers;
	const int D = PROF_MOE_DRAWS * P->reps, cut = D / 6;
	uint64_t o = 0x73776565 ^ (uint64_t)n; /* the sweeps' orders */
	struct prof_time *d; /* (n, D) each batch's draws */
	int *ord, i, j, k, rc = 0;

	ord = medha_calloc((size_t)n, sizeof(*ord));
	d = medha_calloc((size_t)n * (size_t)D, sizeof(*d));
	if (ord == NULL || d == NULL) {
		rc = medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++)
		ord[i] = i;
	for (k = 0; k < D; k++) {
		for (i = n - 1; i > 0; i--) { /* Fisher-Yates */
			int r = (int)(splitmix64(&o) % (uint64_t)(i + 1));
			int x = ord[i];
			ord[i] = ord[r];
			ord[r] = x;
		}
		for (j = 0; j < n; j++) {
			struct prof_item it = {tokens[i = ord[j]], 0, 0};
			struct prof_time *x = &d[(size_t)i * (size_t)D + k];
			prof_progress(P, what, k * n + j, D * n);
			if ((rc = moe_ids(P, tokens[i], &s[i], why, whylen)) !=
			        0 ||
			    (rc = prof_time(P, &it, 1, 0, L, 1, x, why,
			         whylen)) != 0)
				goto out;
			medha_log(MEDHA_LOG_DEBUG,
			    "%s: %lld tokens, draw %d: %.0f experts, %.3f ms",
			    what, (long long)tokens[i], k, x->experts,
			    1e3 * x->moe);
		}
	}
	prof_progress(P, what, D * n, D * n);
	for (i = 0; i < n; i++) {
		struct prof_time *x = &d[(size_t)i * (size_t)D];
		const double m = D - 2 * cut;
		qsort(x, (size_t)D, sizeof(*x), cmp_moe);
		memset(&t[i], 0, sizeof(t[i]));
		for (k = cut; k < D - cut; k++) {
			t[i].total += x[k].total / m;
			t[i].attn += x[k].attn / m;
			t[i].head += x[k].head / m;
			t[i].moe += x[k].moe / m;
			t[i].rest += x[k].rest / m;
			t[i].experts += x[k].experts / m;
		}
	}
out:
	free(ord);
	free(d);
	return rc;
}

/*
 * A mixture of experts' linear points (nmoe routed layers): the sweeps,
 * each point its own seed (not --check's), the experts a layer ran
 * logged. --check --moe's batches (P->mc) are measured in the same
 * sweeps, their own draws beside the points', so that the load the
 * machine had then weighs on the profile and on the check alike.
 */
static int
moe_points(struct prof *P, const int64_t *lin, int n, int nmoe,
    struct prof_time *t, char *why, size_t whylen)
{
	struct prof_moe_check *mc =
	    P->mc != NULL && !P->mc->measured ? P->mc : NULL;
	const int m = n + (mc != NULL ? mc->n : 0);
	int64_t *tok = medha_calloc((size_t)m, sizeof(*tok));
	uint64_t *s = medha_calloc((size_t)m, sizeof(*s));
	struct prof_time *tm = medha_calloc((size_t)m, sizeof(*tm));
	int i, rc;

	if (tok == NULL || s == NULL || tm == NULL) {
		rc = medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		tok[i] = lin[i];
		s[i] = 0x6d6f655f66666e ^ (uint64_t)lin[i];
	}
	for (i = n; i < m; i++) {
		tok[i] = mc->tok[i - n];
		s[i] = mc->seed[i - n];
	}
	if ((rc = prof_moe_sweeps(P, tok, m, s, tm, "profiling experts", why,
	         whylen)) != 0)
		goto out;
	memcpy(t, tm, sizeof(*t) * (size_t)n);
	if (mc != NULL) {
		memcpy(mc->t, tm + n, sizeof(*tm) * (size_t)mc->n);
		mc->measured = 1;
	}
	for (i = 0; i < n; i++)
		medha_log(MEDHA_LOG_INFO,
		    "moe_ffn %lld tokens: %.2f experts a layer, %.3f ms a "
		    "layer",
		    (long long)lin[i], t[i].experts / nmoe,
		    1e3 * t[i].moe / nmoe);
out:
	free(tok);
	free(s);
	free(tm);
	return rc;
}

int
prof_table(struct prof *P, FILE *f, char *why, size_t whylen)
{
	const struct medha_model_config *c = &P->be->info.shape;
	const int L = c->n_layers, q = P->quick;
	const int al =
	    P->attn_layers > 0 && P->attn_layers < L ? P->attn_layers : L;
	const int nmoe = prof_moe_layers(P);
	const int64_t *lin = q ? lin_quick : nmoe > 0 ? lin_moe : lin_full;
	const int64_t *hd = q ? head_quick : head_full;
	const int64_t *ch = q ? chunk_quick : chunk_full;
	const int64_t *cx = q ? ctx_quick : ctx_full;
	const int64_t *dn = q ? dec_quick : dec_full;
	const int64_t *dx = q ? dctx_quick : dctx_full;
	int nlin = upto(lin, q ? N(lin_quick) : nmoe > 0 ? N(lin_moe)
	                                                  : N(lin_full),
	    P->max_tokens);
	int nhd = q ? N(head_quick) : N(head_full);
	int nch = upto(ch, q ? N(chunk_quick) : N(chunk_full), P->max_tokens);
	int ncx = upto(cx, q ? N(ctx_quick) : N(ctx_full), P->max_context);
	int ndn = q ? N(dec_quick) : N(dec_full);
	int ndx = upto(dx, q ? N(dctx_quick) : N(dctx_full), P->max_context);
	struct prof_item items[PROF_SEQS];
	struct prof_time t, tm[N(lin_moe)];
	struct prof_row *rows;
	int nrows = 0, i, j, k, rc, total, done = 0;
	char date[64];
	time_t now = time(NULL);

	total = nlin + nhd + nch * ncx + ndn * ndx + prof_coll_points(P);
	if (nmoe > 0) /* moe_ffn rows beside the linear ones */
		total += nlin;
	if ((rows = medha_calloc((size_t)total, sizeof(*rows))) == NULL)
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");

	/* linear: one sequence of T tokens from position 0, every layer,
	   no logits; attention is timed and taken out (and a mixture of
	   experts' routed FFN, its own row per routed layer, measured in
	   sweeps first) */
	if (nmoe > 0 &&
	    (rc = moe_points(P, lin, nlin, nmoe, tm, why, whylen)) != 0)
		goto fail;
	for (i = 0; i < nlin; i++, done++) {
		prof_progress(P, "profiling", done, total);
		items[0] = (struct prof_item){lin[i], 0, 0};
		if (nmoe > 0)
			t = tm[i];
		else if ((rc = prof_time(P, items, 1, 0, L, 0, &t, why,
		              whylen)) != 0)
			goto fail;
		rows[nrows++] = (struct prof_row){"linear", lin[i], 0,
		    1e6 * (t.rest - t.moe) / L};
		if (nmoe > 0) {
			rows[nrows++] = (struct prof_row){"moe_ffn", lin[i], 0,
			    1e6 * t.moe / nmoe};
			done++;
		}
	}
	/* lm_head: n one-token sequences, logits (every layer: a later
	   layer alone finds the positions unclaimed) */
	for (i = 0; i < nhd; i++, done++) {
		prof_progress(P, "profiling", done, total);
		for (k = 0; k < hd[i]; k++)
			items[k] = (struct prof_item){1, 0, 1};
		if ((rc = prof_time(P, items, (int)hd[i], 0, L, 0, &t, why,
		         whylen)) != 0)
			goto fail;
		rows[nrows++] = (struct prof_row){"lm_head", hd[i], 0, 1e6 * t.head};
	}
	/* attn_prefill: a chunk after kv cached tokens, al layers */
	for (j = 0; j < ncx; j++)
		for (i = 0; i < nch; i++, done++) {
			prof_progress(P, "profiling", done, total);
			items[0] = (struct prof_item){ch[i], cx[j], 0};
			if ((rc = prof_time(P, items, 1, 0, al, 0, &t, why,
			         whylen)) != 0)
				goto fail;
			rows[nrows++] = (struct prof_row){"attn_prefill", ch[i],
			    cx[j], 1e6 * t.attn / al};
		}
	/* attn_decode: n sequences of one token, kv cached each; points
	   reading more than decode_total tokens in all are left out */
	for (j = 0; j < ndx; j++)
		for (i = 0; i < ndn; i++, done++) {
			prof_progress(P, "profiling", done, total);
			if (dn[i] * dx[j] > P->decode_total && i >= 2)
				continue;
			for (k = 0; k < dn[i]; k++)
				items[k] = (struct prof_item){1, dx[j], 0};
			if ((rc = prof_time(P, items, (int)dn[i], 0, al, 0, &t,
			         why, whylen)) != 0)
				goto fail;
			rows[nrows++] = (struct prof_row){"attn_decode", dn[i],
			    dx[j], 1e6 * t.attn / al};
		}
	if ((rc = prof_coll(P, rows, &nrows, &done, total, why, whylen)) != 0)
		goto fail;
	prof_progress(P, "profiling", total, total);

	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
	fprintf(f,
	    "# medha-profile v1 model=%s gpu=%s tp=1 backend=%s threads=%d "
	    "kv=%s%s\n"
	    "# measured by medha-prof on %s: median of %d runs a point; "
	    "attention over %d layers, the rest over all %d\n"
	    "op,tokens,kv,time_us\n",
	    P->name, P->gpu, P->be->info.name, P->threads, P->kv,
	    P->thread_clock ? " clock=thread" : "", date, P->reps, al, L);
	for (i = 0; i < nrows; i++)
		fprintf(f, "%s,%lld,%lld,%.3f\n", rows[i].op,
		    (long long)rows[i].tokens, (long long)rows[i].kv,
		    rows[i].us > 0 ? rows[i].us : 0);
	free(rows);
	if (fflush(f) != 0 || ferror(f))
		return medha_why(why, whylen, MEDHA_EIO, "writing the table: %s",
		    strerror(errno));
	return 0;
fail:
	if (P->progress)
		fputc('\n', stderr);
	free(rows);
	return rc;
}
