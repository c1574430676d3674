/*
 * replica.c: the live replica (replica.h). One thread runs everything:
 * medha_srv_next() hands it each request message and each closed
 * connection; it answers at once or holds the request (a client's POLL
 * until there are events, a worker's READY or RESULT until there is a
 * batch), and on each pass answers what has been held too long. The
 * scheduler core decides what runs; this file only moves tokens between
 * the core, the workers and the clients.
 *
 * Per request (struct lreq) it keeps what the core does not: the prompt's
 * token ids, the client's connection, the sampling parameters and stop
 * strings, and the output so far (ids, and text for stop strings and the
 * record). A request's output text is streamed to its client as tokens
 * come, holding back the bytes that could still turn into a stop string.
 */
#include "serve/replica.h"

#include "model/gguf.h"
#include "tok/tokenizer.h"
#include "serve/front.h"
#include "net/link.h"
#include "net/proto.h"
#include "sched/batchcost.h"
#include "engine/backend.h"
#include "engine/measure.h"
#include "layout.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define HB (MEDHA_PROTO_HEARTBEAT_MS / 1e3)
#define DEAD (MEDHA_PROTO_DEAD_MS / 1e3)
#define TAKE_AT_ONCE 256 /* messages taken before a decision, at most */

/* ---- state ---- */

struct lreq {
	uint64_t handle;
	uint32_t peer; /* the client's connection */
	char id[MEDHA_ID_MAX];
	int32_t *ids; /* (n_prompt) the prompt */
	int64_t n_prompt;
	struct medha_sampler_params sp;
	int ignore_eos;
	int no_stream; /* no token events: the record carries the output */
	int n_stop;
	char *stop[MEDHA_STOP_MAX];
	size_t stop_max; /* longest stop string */
	int started;     /* a worker holds its sequence */
	int32_t last;    /* the last sampled token: the next decode's input */
	int32_t *out;    /* (n_out) generated ids */
	int64_t n_out, out_cap;
	char *text; /* (text_len) generated text, NUL-terminated */
	size_t text_len, text_cap, text_sent;
	int64_t ids_sent; /* ids already sent in token events */
};

/*
 * A batch on its way through the workers: every worker gets it and
 * answers it; it is done when all have, and stage 0 is free for the
 * next one when the first stage's workers have.
 */
struct flight {
	uint64_t seq;               /* its batch_seq */
	struct medha_sched_batch b; /* as the core formed it (items copied) */
	struct medha_msg_item *mi;  /* (b.n_items) as sent */
	int32_t *ids;               /* the items' ids, copied */
	int32_t *tok;               /* (b.n_items) sampled, -1 none yet */
	int left;                   /* workers yet to answer */
	int left0;                  /* of them, stage 0's */
};

/* A worker's place: slot i holds rank i (net/coll.h's rank). */
struct wslot {
	int present;
	uint32_t peer;
	struct medha_msg_hello hello;
	struct medha_srv_call *call; /* its held READY / RESULT */
	double call_since;
	double last_seen;
	uint64_t sent;     /* the last batch_seq sent to it */
	uint64_t done;     /* the last batch_seq it answered */
	uint64_t gen_sent; /* the peer table generation it has */
	/* handles to free, in the order they ended: each with the last
	   batch formed then, which may still hold its items, so that it
	   goes out only once the worker has been sent that batch */
	uint64_t *frees, *frees_after;
	int64_t nfrees, frees_cap;
};

struct medha_replica {
	struct medha_replica_config cfg;
	struct medha_front f; /* socket, clients, drain, live requests */
	double t0;
	/* made at the first worker's HELLO */
	struct medha_pred pred;
	int have_pred;
	struct medha_sched *core;
	struct medha_tok *tok; /* NULL: token ids only */
	int sim;               /* the workers are sim: no EOG check */
	int vocab;
	int64_t ctx_len; /* 0: no limit */
	char model[MEDHA_PROTO_NAME_MAX];
	char backend[MEDHA_PROTO_BACKEND_MAX];
	/* requests by the core's slot (handle & 0xffffffff) */
	struct lreq **by_slot;
	size_t slots;
	struct wslot *w; /* (cfg.workers) */
	int nworkers;    /* present */
	int tp, spp, kvp; /* the layout, from the first HELLO */
	int n_layers;
	struct flight *fl; /* (spp) ring of batches in flight */
	int fl_head, nfl;
	struct medha_msg_peers peers; /* urls: (cfg.workers) */
	int ready;
	uint64_t bseq;
	int64_t served, batches;
};

static double
now_s(const struct medha_replica *r)
{
	return medha_now() - r->t0;
}

void
medha_replica_config_default(struct medha_replica_config *c)
{
	memset(c, 0, sizeof(*c));
	c->workers = 1;
	medha_sched_config_default(&c->sched);
	c->cpu_threads = 2;
	c->target_auto = 1;
	c->drain_timeout = 30;
	c->max_queue = 100000;
}

/* ---- sending ---- */

static void
answer_type(struct medha_replica *r, struct medha_srv_call *call, int type)
{
	struct medha_msg m = {.type = type};

	medha_srv_msg(r->f.srv, call, &m);
}

/* ---- requests ---- */

static struct lreq *
lreq_get(const struct medha_replica *r, uint64_t h)
{
	size_t slot = (size_t)(h & 0xffffffffu);

	if (slot >= r->slots || r->by_slot[slot] == NULL ||
	    r->by_slot[slot]->handle != h)
		return NULL;
	return r->by_slot[slot];
}

static void
lreq_free(struct lreq *q)
{
	free(q->ids);
	free(q->out);
	free(q->text);
	for (int i = 0; i < q->n_stop; i++)
		free(q->stop[i]);
	free(q);
}

static void
worker_free_later(struct medha_replica *r, uint64_t h)
{
	for (int i = 0; i < r->cfg.workers; i++) {
		struct wslot *w = &r->w[i];
		if (!w->present)
			continue;
		if (w->nfrees == w->frees_cap) {
			int64_t ncap = w->frees_cap ? 2 * w->frees_cap : 64;
			void *n = medha_reallocarray(w->frees, (size_t)ncap,
			    sizeof(*w->frees));
			void *a = n == NULL ? NULL :
			    medha_reallocarray(w->frees_after, (size_t)ncap,
			    sizeof(*w->frees_after));
			if (n != NULL)
				w->frees = n;
			if (a == NULL) {
				medha_log(MEDHA_LOG_ERROR,
				    "out of memory: worker %d keeps request "
				    "%llx",
				    i, (unsigned long long)h);
				continue;
			}
			w->frees_after = a;
			w->frees_cap = ncap;
		}
		w->frees_after[w->nfrees] = r->bseq;
		w->frees[w->nfrees++] = h;
	}
}

/* Tokens and text of q not yet sent, as an event for its client. */
static void
send_tokens(struct medha_replica *r, struct lreq *q, int final)
{
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_TOKENS};
	size_t upto = q->text_len;

	if (q->no_stream)
		return;
	if (!final && q->n_stop > 0)
		upto = q->text_len > q->stop_max - 1
		    ? q->text_len - (q->stop_max - 1)
		    : 0;
	if (upto < q->text_sent)
		upto = q->text_sent;
	if (q->n_out == q->ids_sent && upto == q->text_sent)
		return;
	ev.handle = q->handle;
	ev.n_ids = q->n_out - q->ids_sent;
	if (ev.n_ids > 0 &&
	    (ev.ids = medha_reallocarray(NULL, (size_t)ev.n_ids,
	         sizeof(int32_t))) == NULL)
		return;
	if (ev.n_ids > 0)
		memcpy(ev.ids, q->out + q->ids_sent,
		    (size_t)ev.n_ids * sizeof(int32_t));
	ev.text_len = upto - q->text_sent;
	if ((ev.text = malloc(ev.text_len + 1)) == NULL) {
		free(ev.ids);
		return;
	}
	if (ev.text_len > 0)
		memcpy(ev.text, q->text + q->text_sent, ev.text_len);
	ev.text[ev.text_len] = '\0';
	q->ids_sent = q->n_out;
	q->text_sent = upto;
	medha_clients_push(&r->f.clients, q->peer, &ev);
}

/* The core finished a request: its record goes to its client. */
static void
finalize(struct medha_replica *r, struct medha_record *rec)
{
	struct lreq *q = lreq_get(r, rec->handle);
	struct medha_msg_event ev = {.kind = MEDHA_EVENT_RECORD};
	struct medha_client *c;

	r->served++;
	medha_log(rec->status == MEDHA_STATUS_OK ? MEDHA_LOG_DEBUG
	                                         : MEDHA_LOG_INFO,
	    "request %s: %s%s%s, %lld tokens", rec->id,
	    medha_status_name(rec->status), rec->reason[0] ? ": " : "",
	    rec->reason, (long long)rec->output_tokens);
	if (q == NULL) { /* rejected at arrival, before it had an lreq */
		medha_record_clear(rec);
		return;
	}
	if (q->text_sent > q->text_len) /* cut at a stop string */
		q->text_sent = q->text_len;
	send_tokens(r, q, 1);
	if ((ev.record = malloc(sizeof(*ev.record))) != NULL) {
		*ev.record = *rec;
		ev.record->token_ids = q->out;
		ev.record->n_token_ids = q->n_out;
		ev.record->text = q->text;
		if (ev.record->text == NULL)
			ev.record->text = strdup("");
		q->out = NULL;
		q->text = NULL;
		ev.handle = q->handle;
		medha_clients_push(&r->f.clients, q->peer, &ev);
	} else
		medha_record_clear(rec);
	if ((c = medha_clients_find(&r->f.clients, q->peer, 0)) != NULL)
		c->live--;
	if (q->started)
		worker_free_later(r, q->handle);
	r->by_slot[q->handle & 0xffffffffu] = NULL;
	r->f.live--;
	lreq_free(q);
}

static void
drain_records(struct medha_replica *r)
{
	struct medha_record rec;

	while (medha_sched_pop_record(r->core, &rec) == 1)
		finalize(r, &rec);
}

static int
append_text(struct lreq *q, const char *s, size_t n)
{
	if (q->text_len + n + 1 > q->text_cap) {
		size_t ncap = (q->text_len + n + 1) * 2;
		char *t = realloc(q->text, ncap);
		if (t == NULL)
			return MEDHA_ENOMEM;
		q->text = t;
		q->text_cap = ncap;
	}
	memcpy(q->text + q->text_len, s, n);
	q->text_len += n;
	q->text[q->text_len] = '\0';
	return 0;
}

/*
 * A token came out for q: returns MEDHA_FINISH_STOP if the request ends
 * here (end of generation, or its text now holds a stop string, where
 * the text is cut), else 0.
 */
static int
on_token(struct medha_replica *r, struct lreq *q, int32_t tok)
{
	const char *piece = "";
	size_t plen = 0, from;
	char buf[256];

	q->last = tok;
	if (r->tok != NULL && !r->sim && !q->ignore_eos &&
	    medha_tok_is_eog(r->tok, tok))
		return MEDHA_FINISH_STOP;
	if (q->n_out == q->out_cap) {
		int64_t ncap = q->out_cap ? 2 * q->out_cap : 64;
		void *n =
		    medha_reallocarray(q->out, (size_t)ncap, sizeof(*q->out));
		if (n == NULL)
			return 0;
		q->out = n;
		q->out_cap = ncap;
	}
	q->out[q->n_out++] = tok;
	if (r->tok != NULL &&
	    medha_tok_decode(r->tok, &tok, 1, 0, buf, sizeof(buf), &plen) == 0)
		piece = buf;
	else
		plen = 0;
	from = q->text_len > q->stop_max ? q->text_len - q->stop_max : 0;
	if (append_text(q, piece, plen) != 0)
		return 0;
	for (int i = 0; i < q->n_stop; i++) {
		char *hit = memmem(q->text + from, q->text_len - from,
		    q->stop[i], strlen(q->stop[i]));
		if (hit != NULL) {
			q->text_len = (size_t)(hit - q->text);
			q->text[q->text_len] = '\0';
			return MEDHA_FINISH_STOP;
		}
	}
	return 0;
}

/* ---- the core and its predictor, from the first worker ---- */

static int
is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* One of the layers' weight matrices (not embeddings, norms, head). */
static int
layer_matrix(const struct medha_tensor *t)
{
	return t->n_dims == 2 && strncmp(t->name, "blk.", 4) == 0;
}

/*
 * The cpu device's products measured on the layers' matrices of g
 * (engine/measure.c); *rate 0 where they could not be. 0 or MEDHA_ENOMEM.
 */
static int
measure_products(struct medha_gpu *cpu, const struct medha_gguf *g,
    int threads, double *rate)
{
	const struct medha_tensor *t, **w = NULL;
	int n = 0, cap = 0, rc;

	*rate = 0;
	for (uint64_t i = 0; (t = medha_gguf_tensor_at(g, i)) != NULL; i++)
		if (layer_matrix(t)) {
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				void *p = medha_reallocarray(w, (size_t)cap,
				    sizeof(*w));
				if (p == NULL) {
					free(w);
					return MEDHA_ENOMEM;
				}
				w = p;
			}
			w[n++] = t;
		}
	rc = n > 0 ? medha_gpu_measure_products(cpu, w, n, threads, rate)
	           : MEDHA_EINVAL;
	free(w);
	if (rc == MEDHA_ENOMEM)
		return rc;
	if (rc != 0)
		*rate = 0;
	return 0;
}

/* Bytes per weight of the layers' matrices as g stores them (0: none). */
static double
stored_weight_bytes(const struct medha_gguf *g)
{
	const struct medha_tensor *t;
	double bytes = 0, n = 0;

	for (uint64_t i = 0; (t = medha_gguf_tensor_at(g, i)) != NULL; i++)
		if (layer_matrix(t)) {
			bytes += (double)t->nbytes;
			n += (double)t->ne[0] * (double)t->ne[1];
		}
	return n > 0 ? bytes / n : 0;
}

static int
make_core_on(struct medha_replica *r, const struct medha_msg_hello *h,
    const char *model, const struct medha_gguf *gg, struct medha_pred_model *mp,
    char *why, size_t whylen);

/*
 * The scheduler core, its predictor and the tokenizer, from the first
 * worker's HELLO (and -m, which overrides the model it names).
 */
static int
make_core(struct medha_replica *r, const struct medha_msg_hello *h, char *why,
    size_t whylen)
{
	struct medha_pred_model m;
	const char *model = r->cfg.model != NULL ? r->cfg.model : h->model;
	struct medha_gguf *gg = NULL; /* the model's file, if it is one */
	int rc;

	if ((rc = medha_model_resolve_why(model, &m, why, whylen)) != 0)
		return rc;
	if (is_file(model) && medha_gguf_open(&gg, model, NULL, 0) != 0)
		gg = NULL;
	rc = make_core_on(r, h, model, gg, &m, why, whylen);
	medha_gguf_close(gg);
	return rc;
}

/* make_core() on the resolved model m and its open file gg (or NULL). */
static int
make_core_on(struct medha_replica *r, const struct medha_msg_hello *h,
    const char *model, const struct medha_gguf *gg, struct medha_pred_model *mp,
    char *why, size_t whylen)
{
	struct medha_pred_model m = *mp;
	struct medha_gpu cpu;
	const struct medha_gpu *g;
	struct medha_sched_config sc = r->cfg.sched;
	int rc;

	if (m.c.vocab != h->vocab || m.c.dim != h->dim)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "model %s (vocab %d, dim %d) is not the worker's "
		    "(vocab %d, dim %d)",
		    model, m.c.vocab, m.c.dim, h->vocab, h->dim);
	if (strcmp(h->gpu, "cpu") == 0) {
		/* the cpu backend serves weights as stored, KV in f32 */
		double wb = gg != NULL ? stored_weight_bytes(gg) : 0;
		if (wb > 0)
			m.w_bytes = wb;
		m.kv_bytes = 4;
		double prod = 0;
		if (medha_gpu_measure_cpu(&cpu, r->cfg.cpu_threads) != 0 ||
		    (gg != NULL && measure_products(&cpu, gg,
		                       r->cfg.cpu_threads, &prod) != 0))
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "out of memory");
		g = &cpu;
		char pr[96];
		if (prod > 0)
			snprintf(pr, sizeof(pr),
			    "products of the model's weights %.1f GFLOP/s",
			    prod / 1e9);
		else
			snprintf(pr, sizeof(pr),
			    "products guessed at %.0f%% of that",
			    100 * cpu.eff_flops);
		medha_log(MEDHA_LOG_INFO,
		    "cpu device: %.1f GB/s read, %.1f GFLOP/s (%d threads), "
		    "%s; weights %.2f bytes each",
		    cpu.hbm_bw / 1e9, cpu.peak_flops / 1e9, r->cfg.cpu_threads,
		    pr, m.w_bytes);
	} else if ((g = medha_gpu_find(h->gpu)) == NULL)
		return medha_why(why, whylen, MEDHA_ENOTFOUND,
		    "device %s: unknown", h->gpu);
	if ((rc = medha_pred_init(&r->pred, g, &m, h->tp, h->spp, h->kvp)) != 0)
		return medha_why(why, whylen, rc, "predictor: bad layout");
	r->have_pred = 1;
	if (r->cfg.predictor != NULL &&
	    (rc = medha_pred_load_table(&r->pred, r->cfg.predictor, why,
	         whylen)) != 0)
		return rc;
	if (r->cfg.target_auto && sc.chunk == 0) {
		/* the smallest chunk must fit beside decodes, or a prefill
		 * never joins a running batch and requests run one by one */
		double lone = medha_cost_lone(&r->pred, 32, 0).latency;
		if (2 * lone > sc.target) {
			medha_log(MEDHA_LOG_WARN,
			    "target batch time %.0f ms: a 32-token chunk alone "
			    "takes %.0f ms on %s",
			    2e3 * lone, 1e3 * lone, g->name);
			sc.target = 2 * lone;
		}
	}
	sc.block_size = h->block_size;
	sc.kv_blocks = h->n_blocks;
	sc.max_seqs = h->max_seqs;
	if (sc.kvp_max_tokens % sc.block_size != 0)
		sc.kvp_max_tokens -= sc.kvp_max_tokens % sc.block_size;
	if ((rc = medha_sched_init(&r->core, &sc, &r->pred)) != 0)
		return medha_why(why, whylen, rc, "scheduler: %s",
		    medha_strerror(rc));
	/* a backend that computes nothing makes no text (sim) */
	r->sim = !(medha_backend_find(h->backend)->caps & MEDHA_BACKEND_COMPUTES);
	r->n_layers = m.c.n_layers;
	r->vocab = h->vocab;
	r->ctx_len = r->sim ? 0 : m.c.ctx_len;
	snprintf(r->model, sizeof(r->model), "%s", model);
	snprintf(r->backend, sizeof(r->backend), "%s", h->backend);
	if (gg != NULL) {
		char w2[256];
		if (medha_tok_open(&r->tok, gg, w2, sizeof(w2)) != 0)
			medha_log(MEDHA_LOG_WARN,
			    "%s: no tokenizer (%s): token ids only", model, w2);
	}
	if (r->tok == NULL)
		medha_log(MEDHA_LOG_WARN,
		    "no tokenizer for %s: text prompts are refused", model);
	return 0;
}

/* ---- workers ---- */

static void dispatch(struct medha_replica *r, struct wslot *w, int idle_ok);

static struct wslot *
worker_of(struct medha_replica *r, uint32_t peer, int id)
{
	if (id < 0 || id >= r->cfg.workers || !r->w[id].present ||
	    r->w[id].peer != peer)
		return NULL;
	return &r->w[id];
}

static void
flight_clear(struct flight *f)
{
	free(f->b.items);
	free(f->mi);
	free(f->ids);
	free(f->tok);
	memset(f, 0, sizeof(*f));
}

/* Every batch in flight is void (the core was told). */
static void
flights_void(struct medha_replica *r)
{
	for (int i = 0; i < r->nfl; i++)
		flight_clear(&r->fl[(r->fl_head + i) % r->spp]);
	r->nfl = 0;
	r->fl_head = 0;
}

/* The batch in flight of batch_seq seq, or NULL. */
static struct flight *
flight_of(struct medha_replica *r, uint64_t seq)
{
	for (int i = 0; i < r->nfl; i++) {
		struct flight *f = &r->fl[(r->fl_head + i) % r->spp];
		if (f->seq == seq)
			return f;
	}
	return NULL;
}

/* The core fails what depended on the workers; batches in flight void. */
static void
replica_fault(struct medha_replica *r, const char *reason)
{
	int n = 0;

	if (r->core != NULL) {
		n = medha_sched_worker_lost(r->core, reason, now_s(r));
		if (n > 0)
			drain_records(r);
	}
	flights_void(r);
	if (n > 0)
		medha_log(MEDHA_LOG_WARN, "%s: %d requests failed", reason, n);
}

static void
worker_lost(struct medha_replica *r, struct wslot *w, const char *why)
{
	int id = (int)(w - r->w);
	char reason[200];

	if (w->call != NULL)
		medha_srv_drop(r->f.srv, w->call);
	free(w->frees);
	free(w->frees_after);
	memset(w, 0, sizeof(*w));
	r->nworkers--;
	r->ready = 0;
	snprintf(reason, sizeof(reason), "worker %d lost: %s", id, why);
	replica_fault(r, reason);
	medha_log(MEDHA_LOG_WARN, "worker %d lost (%s); degraded, %d of %d "
	    "workers", id, why, r->nworkers, r->cfg.workers);
}

/* Whether h fits the replica's layout; why says how it does not. */
static int
hello_fits(struct medha_replica *r, const struct medha_msg_hello *h,
    char *why, size_t whylen)
{
	int lo, hi;

	if ((int64_t)h->tp * h->spp * h->kvp != r->cfg.workers)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layout tp %d x spp %d x kvp %d is not the replica's %d "
		    "workers",
		    h->tp, h->spp, h->kvp, r->cfg.workers);
	if (r->nworkers > 0 &&
	    (h->tp != r->tp || h->spp != r->spp || h->kvp != r->kvp))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "layout tp %d x spp %d x kvp %d is not that of the "
		    "workers there (tp %d x spp %d x kvp %d)",
		    h->tp, h->spp, h->kvp, r->tp, r->spp, r->kvp);
	if (h->spp > MEDHA_PROTO_MAX_GROUPS || h->kvp > MEDHA_PROTO_MAX_GROUPS)
		return medha_why(why, whylen, MEDHA_EUNSUP,
		    "spp %d, kvp %d: at most %d each", h->spp, h->kvp,
		    MEDHA_PROTO_MAX_GROUPS);
	if (r->cfg.workers > 1 && h->peer[0] == '\0')
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "no peer address: a replica of %d workers needs one",
		    r->cfg.workers);
	if (r->n_layers > 0) {
		medha_stage_layers(r->n_layers, h->spp, h->rank_spp, &lo, &hi);
		if (h->layer_lo != lo || h->layer_hi != hi)
			return medha_why(why, whylen, MEDHA_EINVAL,
			    "stage %d of %d runs layers [%d, %d), not the "
			    "worker's [%d, %d)",
			    h->rank_spp, h->spp, lo, hi, h->layer_lo,
			    h->layer_hi);
	}
	return 0;
}

static void
on_hello(struct medha_replica *r, struct medha_srv_ev *ev,
    const struct medha_msg_hello *h)
{
	struct medha_msg m = {.type = MEDHA_MSG_WELCOME};
	char why[256];
	const struct medha_backend_kind *k;
	struct medha_layout lay = {h->tp, h->spp, h->kvp, 0, 0, 0, 0};
	int id = medha_layout_rank(&lay, h->rank_tp, h->rank_spp, h->rank_kvp);

	/* the kinds built here: a kind the registry knows but cannot open
	   (cuda before its backend) has no workers to drive yet */
	k = medha_backend_find(h->backend);
	if (k == NULL || k->open == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EUNSUP,
		    "backend %s: %s", h->backend,
		    k == NULL ? "unknown to this scheduler"
		              : "not built into this scheduler");
		return;
	}
	/* the layout before its rank indexes r->w; the layers once the
	 * model is known (below) */
	if (hello_fits(r, h, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "worker refused: %s", why);
		medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL, "%s", why);
		return;
	}
	if (r->w[id].present && r->w[id].peer != ev->peer) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "rank %d (tp %d, spp %d, kvp %d) is connected already",
		    id, h->rank_tp, h->rank_spp, h->rank_kvp);
		return;
	}
	if (r->core == NULL && make_core(r, h, why, sizeof(why)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "worker refused: %s", why);
		medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL, "%s", why);
		if (r->have_pred) {
			medha_pred_free(&r->pred);
			r->have_pred = 0;
		}
		return;
	}
	if (hello_fits(r, h, why, sizeof(why)) != 0) { /* now its layers */
		medha_log(MEDHA_LOG_ERROR, "worker refused: %s", why);
		medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL, "%s", why);
		return;
	}
	if (r->core != NULL &&
	    (h->block_size != medha_sched_block_size(r->core) ||
	        h->n_blocks < medha_sched_group_capacity(r->core) ||
	        h->vocab != r->vocab || strcmp(h->backend, r->backend) != 0)) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL,
		    "worker does not match the replica (%s backend, blocks "
		    "of %d, %lld blocks, vocab %d)",
		    r->backend, medha_sched_block_size(r->core),
		    (long long)medha_sched_group_capacity(r->core), r->vocab);
		return;
	}
	if (r->fl == NULL &&
	    (r->fl = medha_calloc(h->spp, sizeof(*r->fl))) == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
		    "out of memory");
		return;
	}
	if (r->w[id].present)
		worker_lost(r, &r->w[id], "said HELLO again");
	r->tp = h->tp;
	r->spp = h->spp;
	r->kvp = h->kvp;
	memset(&r->w[id], 0, sizeof(r->w[id]));
	r->w[id].present = 1;
	r->w[id].peer = ev->peer;
	r->w[id].hello = *h;
	r->w[id].last_seen = medha_now();
	r->w[id].sent = r->w[id].done = r->bseq;
	snprintf(r->peers.urls[id], sizeof(r->peers.urls[id]), "%s", h->peer);
	r->nworkers++;
	m.worker_id = id;
	medha_srv_msg(r->f.srv, ev->call, &m);
	medha_log(MEDHA_LOG_INFO,
	    "worker %d (tp %d, spp %d, kvp %d): %s backend, %s, layers "
	    "[%d, %d), pid %d, %d KV blocks of %d",
	    id, h->rank_tp, h->rank_spp, h->rank_kvp, h->backend, h->model,
	    h->layer_lo, h->layer_hi, h->pid, h->n_blocks, h->block_size);
	if (r->nworkers == r->cfg.workers && !r->ready) {
		r->ready = 1;
		r->peers.gen++; /* the table the workers get next */
		r->peers.n = r->cfg.workers;
		r->peers.kvp_tokens = medha_sched_group_tokens(r->core);
		medha_log(MEDHA_LOG_WARN,
		    "ready: %d worker%s (tp %d x spp %d x kvp %d), %s "
		    "backend, model %s, %lld KV blocks of %d",
		    r->nworkers, r->nworkers > 1 ? "s" : "", r->tp, r->spp,
		    r->kvp, r->backend, r->model,
		    (long long)medha_sched_group_capacity(r->core),
		    medha_sched_block_size(r->core));
	}
}

/* A batch from the core into the ring: 1, 0 (nothing to run) or < 0. */
static int
flight_form(struct medha_replica *r)
{
	struct medha_sched_batch b;
	struct flight *f;
	int64_t nids = 0;
	int rc;

	if ((rc = medha_sched_next_batch(r->core, now_s(r), &b)) != 1) {
		if (rc < 0)
			medha_log(MEDHA_LOG_ERROR, "forming a batch: %s",
			    medha_strerror(rc));
		return rc;
	}
	f = &r->fl[(r->fl_head + r->nfl) % r->spp];
	memset(f, 0, sizeof(*f));
	f->b = b;
	for (int i = 0; i < b.n_items; i++)
		nids += b.items[i].decode ? 1 : b.items[i].tokens;
	f->b.items = medha_reallocarray(NULL, b.n_items, sizeof(*b.items));
	f->mi = medha_calloc(b.n_items, sizeof(*f->mi));
	f->ids = medha_reallocarray(NULL, (size_t)nids, sizeof(int32_t));
	f->tok = medha_reallocarray(NULL, b.n_items, sizeof(int32_t));
	if (f->b.items == NULL || f->mi == NULL || f->ids == NULL ||
	    f->tok == NULL) {
		flight_clear(f);
		medha_log(MEDHA_LOG_ERROR, "out of memory sending a batch");
		replica_fault(r, "out of memory");
		return MEDHA_ENOMEM;
	}
	memcpy(f->b.items, b.items, b.n_items * sizeof(*b.items));
	nids = 0;
	for (int i = 0; i < b.n_items; i++) {
		const struct medha_sched_item *it = &b.items[i];
		struct lreq *q = lreq_get(r, it->req);
		struct medha_msg_item *mi = &f->mi[i];

		MEDHA_ASSERT(q != NULL);
		mi->handle = it->req;
		mi->pos = it->kv;
		mi->ids = f->ids + nids;
		mi->n_ids = it->decode ? 1 : it->tokens;
		memcpy(mi->ids, it->decode ? &q->last : q->ids + it->kv,
		    (size_t)mi->n_ids * sizeof(int32_t));
		nids += mi->n_ids;
		mi->sample = it->decode || it->last;
		if (r->kvp > 1) {
			/* KVP: the groups of the pieces up to the one the
			   tokens fall in (the core never cuts across one) */
			const struct medha_req *cr =
			    medha_sched_req(r->core, it->req);
			int64_t P = medha_sched_group_tokens(r->core);
			int k = (int)(it->kv / P);
			MEDHA_ASSERT(cr != NULL && k < cr->kv.n_groups);
			mi->n_groups = k + 1;
			for (int g = 0; g <= k; g++)
				mi->groups[g] = (uint8_t)cr->kv.groups[g];
		}
		if (!it->decode && it->kv == 0) {
			mi->has_params = 1;
			mi->params = q->sp;
			q->started = 1;
		}
		f->tok[i] = -1;
	}
	f->seq = ++r->bseq;
	f->left = r->cfg.workers;
	f->left0 = r->tp * r->kvp;
	r->nfl++;
	r->batches++;
	return 1;
}

/* Form the next batch when stage 0 is free and fewer than spp fly. */
static void
flights_fill(struct medha_replica *r)
{
	if (!r->ready || r->core == NULL || r->nfl >= r->spp)
		return;
	if (r->nfl > 0 &&
	    r->fl[(r->fl_head + r->nfl - 1) % r->spp].left0 > 0)
		return; /* stage 0 still runs the last one */
	if (flight_form(r) == 1)
		for (int i = 0; i < r->cfg.workers; i++)
			if (r->w[i].present && r->w[i].call != NULL)
				dispatch(r, &r->w[i], 0);
}

/* Answer w's held call with its next batch, or with IDLE when asked
 * to or when it has sequences to free. A free goes out once w has been
 * sent every batch that was formed before its request ended: the
 * worker frees before it runs the batch of the same message, and a
 * request cancelled while its prompt chunks fly still has items in the
 * batches it was not sent yet. */
static void
dispatch(struct medha_replica *r, struct wslot *w, int idle_ok)
{
	struct medha_msg m;
	struct flight *f = NULL;
	int64_t nf = 0;

	if (w->call == NULL || w->done < w->sent)
		return;
	while (nf < w->nfrees && nf < MEDHA_PROTO_MAX_ITEMS &&
	    w->frees_after[nf] <= w->sent)
		nf++; /* the rest go with the next message */
	for (int i = 0; i < r->nfl && f == NULL; i++) {
		struct flight *g = &r->fl[(r->fl_head + i) % r->spp];
		if (g->seq > w->sent)
			f = g;
	}
	memset(&m, 0, sizeof(m));
	if (f != NULL) {
		m.type = MEDHA_MSG_BATCH;
		m.batch.seq = f->seq;
		m.batch.items = f->mi;
		m.batch.n_items = f->b.n_items;
		if (w->gen_sent != r->peers.gen && r->cfg.workers > 1) {
			m.batch.peers = &r->peers;
			w->gen_sent = r->peers.gen;
		}
		w->sent = f->seq;
	} else if (idle_ok || nf > 0)
		m.type = MEDHA_MSG_IDLE;
	else
		return;
	m.batch.frees = w->frees;
	m.batch.n_frees = nf;
	medha_srv_msg(r->f.srv, w->call, &m);
	w->call = NULL;
	w->nfrees -= nf;
	if (w->nfrees > 0) { /* (frees may be NULL when there are none) */
		memmove(w->frees, w->frees + nf,
		    (size_t)w->nfrees * sizeof(*w->frees));
		memmove(w->frees_after, w->frees_after + nf,
		    (size_t)w->nfrees * sizeof(*w->frees_after));
	}
	w->last_seen = medha_now();
}

/* The batches at the head of the ring that every worker has answered. */
static void
flights_land(struct medha_replica *r)
{
	while (r->nfl > 0 && r->fl[r->fl_head].left == 0) {
		struct flight *f = &r->fl[r->fl_head];
		struct medha_sched_result *out =
		    medha_calloc(f->b.n_items, sizeof(*out));

		if (out == NULL) {
			replica_fault(r, "out of memory");
			return;
		}
		for (int i = 0; i < f->b.n_items; i++) {
			const struct medha_sched_item *it = &f->b.items[i];
			struct lreq *q = lreq_get(r, it->req);

			out[i].token = -1;
			if (!(it->decode || it->last) || f->tok[i] < 0)
				continue;
			out[i].token = f->tok[i];
			if (q != NULL) {
				out[i].stop = on_token(r, q, out[i].token);
				send_tokens(r, q, 0);
			}
		}
		medha_sched_batch_done(r->core, &f->b, out, now_s(r));
		free(out);
		flight_clear(f);
		r->fl_head = (r->fl_head + 1) % r->spp;
		r->nfl--;
		drain_records(r);
	}
}

static void
on_result(struct medha_replica *r, struct wslot *w,
    const struct medha_msg_result *res)
{
	struct flight *f;
	int64_t k = 0;

	if (res->seq <= w->done || res->seq > w->sent) {
		medha_log(MEDHA_LOG_WARN,
		    "worker %d: result of batch %llu, expected %llu",
		    (int)(w - r->w), (unsigned long long)res->seq,
		    (unsigned long long)w->sent);
		return;
	}
	w->done = res->seq;
	if ((f = flight_of(r, res->seq)) == NULL)
		return; /* a batch made void by a fault */
	if (res->error[0] != '\0') {
		char reason[300];
		snprintf(reason, sizeof(reason),
		    "batch failed on worker %d: %s", (int)(w - r->w),
		    res->error);
		medha_log(MEDHA_LOG_ERROR, "%s", reason);
		replica_fault(r, reason);
		return;
	}
	/* tokens come in item order; each item's from one worker */
	for (int i = 0; i < f->b.n_items && k < res->n_tokens; i++)
		if (f->mi[i].handle == res->tokens[k].handle)
			f->tok[i] = res->tokens[k++].token;
	if (k < res->n_tokens)
		medha_log(MEDHA_LOG_WARN,
		    "worker %d: %lld tokens of batch %llu for no item",
		    (int)(w - r->w), (long long)(res->n_tokens - k),
		    (unsigned long long)res->seq);
	f->left--;
	if (w->hello.rank_spp == 0)
		f->left0--;
	flights_land(r);
}

/* ---- client requests ---- */

static void
on_submit(void *arg, struct medha_srv_ev *ev, struct medha_reqspec *rs)
{
	struct medha_replica *r = arg;
	struct medha_msg m = {.type = MEDHA_MSG_ACCEPTED};
	struct medha_client *c;
	struct lreq *q;
	size_t n = 0;
	int rc;

	if (r->f.drain.on) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EUNSUP,
		    "shutting down: not accepting requests");
		return;
	}
	if (r->core == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "not ready: %d of %d workers connected", r->nworkers,
		    r->cfg.workers);
		return;
	}
	if (r->f.live >= r->cfg.max_queue) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOSPACE,
		    "overloaded: %lld requests in flight", (long long)r->f.live);
		return;
	}
	if ((c = medha_clients_find(&r->f.clients, ev->peer, 1)) == NULL ||
	    (q = calloc(1, sizeof(*q))) == NULL) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM, "out of memory");
		return;
	}
	if (rs->prompt_ids != NULL) {
		q->ids = rs->prompt_ids;
		rs->prompt_ids = NULL;
		q->n_prompt = rs->prompt_tokens;
	} else if (rs->prompt != NULL) {
		if (r->tok == NULL) {
			medha_srv_error(r->f.srv, ev->call, MEDHA_EUNSUP,
			    "no tokenizer for %s: send prompt_ids or "
			    "prompt_tokens",
			    r->model);
			goto fail;
		}
		rc = medha_tok_encode(r->tok, rs->prompt, strlen(rs->prompt),
		    MEDHA_TOK_DEFAULT, &q->ids, &n);
		if (rc != 0) {
			medha_srv_error(r->f.srv, ev->call, rc, "tokenizing: %s",
			    medha_strerror(rc));
			goto fail;
		}
		q->n_prompt = (int64_t)n;
	} else {
		/* made up below, so never more than the KV cache holds: a
		 * bigger one could never run, and would cost its size */
		int64_t kv = medha_sched_group_capacity(r->core) *
		    medha_sched_block_size(r->core);
		q->n_prompt = rs->prompt_tokens;
		if (q->n_prompt / r->pred.kvp > kv) {
			medha_srv_error(r->f.srv, ev->call, MEDHA_ERANGE,
			    "a prompt of %lld tokens: more than the replica's "
			    "KV cache holds (%lld per group)",
			    (long long)q->n_prompt, (long long)kv);
			goto fail;
		}
		if ((q->ids = medha_reallocarray(NULL, (size_t)q->n_prompt,
		         sizeof(*q->ids))) == NULL) {
			medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
			    "no memory for a prompt of %lld tokens",
			    (long long)q->n_prompt);
			goto fail;
		}
		/* a made-up prompt: the same ids for the same request id */
		uint64_t z = 1469598103934665603ULL;
		for (const char *s = rs->id; *s != '\0'; s++)
			z = (z ^ (unsigned char)*s) * 1099511628211ULL;
		for (int64_t i = 0; i < q->n_prompt; i++) {
			z = z * 6364136223846793005ULL + 1442695040888963407ULL;
			q->ids[i] = (int32_t)((z >> 33) % (uint64_t)r->vocab);
		}
	}
	if (q->n_prompt < 1) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL, "the prompt is empty");
		goto fail;
	}
	for (int64_t i = 0; i < q->n_prompt; i++)
		if (q->ids[i] < 0 || q->ids[i] >= r->vocab) {
			medha_srv_error(r->f.srv, ev->call, MEDHA_EINVAL,
			    "prompt_ids[%lld] = %d: outside the vocabulary "
			    "(%d)",
			    (long long)i, q->ids[i], r->vocab);
			goto fail;
		}
	if (r->ctx_len > 0 && rs->max_tokens > r->ctx_len - q->n_prompt) {
		medha_srv_error(r->f.srv, ev->call, MEDHA_ERANGE,
		    "%lld prompt + %lld output tokens exceed the model's "
		    "context of %lld",
		    (long long)q->n_prompt, (long long)rs->max_tokens,
		    (long long)r->ctx_len);
		goto fail;
	}
	memcpy(q->id, rs->id, sizeof(q->id));
	q->peer = ev->peer;
	q->sp = rs->sampling;
	q->ignore_eos = rs->ignore_eos;
	q->no_stream = rs->no_stream;
	for (int i = 0; i < rs->n_stop; i++) {
		q->stop[i] = rs->stop[i];
		rs->stop[i] = NULL;
		if (strlen(q->stop[i]) > q->stop_max)
			q->stop_max = strlen(q->stop[i]);
	}
	q->n_stop = rs->n_stop;
	rs->n_stop = 0;
	rs->prompt_tokens = q->n_prompt;
	rs->arrival = now_s(r);
	if ((rc = medha_sched_arrive(r->core, rs, rs->arrival, &q->handle)) !=
	    0) {
		medha_srv_error(r->f.srv, ev->call, rc, "%s", medha_strerror(rc));
		goto fail;
	}
	{
		size_t slot = (size_t)(q->handle & 0xffffffffu);
		if (slot >= r->slots) {
			size_t ns = r->slots ? r->slots : 256;
			while (ns <= slot)
				ns *= 2;
			void *p = medha_reallocarray(r->by_slot, ns,
			    sizeof(*r->by_slot));
			if (p == NULL) {
				medha_sched_cancel(r->core, q->handle,
				    "out of memory", now_s(r));
				medha_srv_error(r->f.srv, ev->call, MEDHA_ENOMEM,
				    "out of memory");
				drain_records(r);
				goto fail;
			}
			r->by_slot = p;
			memset(r->by_slot + r->slots, 0,
			    (ns - r->slots) * sizeof(*r->by_slot));
			r->slots = ns;
		}
		r->by_slot[slot] = q;
	}
	r->f.live++;
	c->live++;
	memcpy(m.accepted.id, q->id, sizeof(m.accepted.id));
	m.accepted.handle = q->handle;
	medha_srv_msg(r->f.srv, ev->call, &m);
	drain_records(r); /* rejected at once: its record follows */
	return;
fail:
	lreq_free(q);
}

static int
on_cancel(void *arg, uint32_t peer, uint64_t h)
{
	struct medha_replica *r = arg;
	struct lreq *q = lreq_get(r, h);

	if (q == NULL || q->peer != peer)
		return MEDHA_ENOTFOUND;
	medha_sched_cancel(r->core, h, "cancelled by its client", now_s(r));
	drain_records(r);
	return 0;
}

static void
on_status(void *arg, struct medha_msg_status *s)
{
	struct medha_replica *r = arg;

	s->workers = r->nworkers;
	s->workers_wanted = r->cfg.workers;
	s->ready = r->ready;
	if (r->core != NULL) {
		int64_t waiting = 0;
		for (int i = 0; i < medha_sched_pending(r->core); i++)
			waiting += medha_sched_active(r->core, i)->state ==
			    MEDHA_REQ_WAITING;
		s->queue = waiting;
		s->kv_blocks = medha_sched_group_capacity(r->core);
		s->kv_used = medha_sched_group_reserved(r->core, 0);
		s->block_size = medha_sched_block_size(r->core);
		s->work = medha_sched_pending_work(r->core, &s->prefill);
	}
	snprintf(s->model, sizeof(s->model), "%s", r->model);
	snprintf(s->backend, sizeof(s->backend), "%s", r->backend);
}

/* A worker's connection closed: 1, or 0 if peer is no worker's. */
static int
on_peer_gone(void *arg, uint32_t peer)
{
	struct medha_replica *r = arg;

	for (int i = 0; i < r->cfg.workers; i++)
		if (r->w[i].present && r->w[i].peer == peer) {
			worker_lost(r, &r->w[i], "connection closed");
			return 1;
		}
	return 0;
}

/* A client went away: its requests cancelled. */
static int
on_client_gone(void *arg, uint32_t peer)
{
	struct medha_replica *r = arg;
	int n = 0;

	for (size_t s = 0; s < r->slots; s++) {
		struct lreq *q = r->by_slot[s];
		if (q == NULL || q->peer != peer)
			continue;
		medha_sched_cancel(r->core, q->handle, "client went away",
		    now_s(r));
		n++;
	}
	drain_records(r);
	return n;
}

/* A worker's message: READY, RESULT or HEARTBEAT (after its HELLO). */
static void
on_worker(struct medha_replica *r, struct medha_srv_ev *ev,
    const struct medha_msg *m)
{
	struct wslot *w = worker_of(r, ev->peer,
	    m->type == MEDHA_MSG_RESULT ? m->result.worker_id : m->worker_id);

	if (w == NULL) {
		medha_log(MEDHA_LOG_WARN,
		    "peer %u: message refused: %s from a peer that is not a "
		    "worker of this replica",
		    ev->peer, medha_msg_type_name(m->type));
		medha_srv_error(r->f.srv, ev->call, MEDHA_ENOTFOUND,
		    "not a worker of this replica: say HELLO");
		return;
	}
	w->last_seen = medha_now();
	if (m->type == MEDHA_MSG_HEARTBEAT) {
		answer_type(r, ev->call, MEDHA_MSG_OK);
		return;
	}
	if (w->call != NULL) /* a second request: the first ends */
		medha_srv_drop(r->f.srv, w->call);
	w->call = ev->call;
	w->call_since = medha_now();
	/* the next batch goes out before the tokens of this one */
	medha_clients_hold(&r->f.clients);
	if (m->type == MEDHA_MSG_RESULT)
		on_result(r, w, &m->result);
	else if (w->done < w->sent) {
		/* READY with a batch out: the worker started over */
		w->done = w->sent;
		replica_fault(r, "worker dropped its batch");
	}
	flights_fill(r);
	dispatch(r, w, 0);
	medha_clients_release(&r->f.clients);
}

/* The messages of workers; the rest are refused. */
static int
on_other(void *arg, struct medha_srv_ev *ev, struct medha_msg *m)
{
	struct medha_replica *r = arg;

	switch (m->type) {
	case MEDHA_MSG_HELLO: on_hello(r, ev, &m->hello); return 0;
	case MEDHA_MSG_READY:
	case MEDHA_MSG_RESULT:
	case MEDHA_MSG_HEARTBEAT: on_worker(r, ev, m); return 0;
	default: return MEDHA_EUNSUP;
	}
}

/* Stopping, the drain over: every live request cancelled. */
static void
cancel_all(void *arg)
{
	struct medha_replica *r = arg;

	for (size_t s = 0; s < r->slots; s++)
		if (r->by_slot[s] != NULL)
			medha_sched_cancel(r->core, r->by_slot[s]->handle,
			    "scheduler stopped", now_s(r));
	drain_records(r);
}

static int64_t
activity(void *arg)
{
	const struct medha_replica *r = arg;

	return r->batches + r->served;
}

/* Held calls answered, dead workers noticed, batches sent. */
static void
housekeeping(void *arg)
{
	struct medha_replica *r = arg;
	double t = medha_now();

	uint32_t deaf = medha_clients_tick(&r->f.clients, t);
	if (deaf != 0) {
		medha_log(MEDHA_LOG_WARN,
		    "client %u has not collected its events for %d s: "
		    "cancelling its requests", deaf, MEDHA_CLIENT_STALL_S);
		medha_front_gone(&r->f, deaf);
	}
	for (int i = 0; i < r->cfg.workers; i++) {
		struct wslot *w = &r->w[i];
		if (!w->present)
			continue;
		if (t - w->last_seen > DEAD) {
			worker_lost(r, w, "silent for too long");
			continue;
		}
		dispatch(r, w, w->call != NULL && t - w->call_since >= HB);
	}
	flights_fill(r);
}

static const struct medha_front_ops ops = {
    .name = "scheduler",
    .take_at_once = TAKE_AT_ONCE,
    .submit = on_submit,
    .cancel = on_cancel,
    .status = on_status,
    .other = on_other,
    .peer_gone = on_peer_gone,
    .client_gone = on_client_gone,
    .cancel_all = cancel_all,
    .pass = housekeeping,
    .activity = activity,
};

/* ---- life cycle ---- */

int
medha_replica_open(struct medha_replica **rp,
    const struct medha_replica_config *c, char *why, size_t whylen)
{
	struct medha_replica *r;
	struct medha_srv *srv;
	int rc;

	*rp = NULL;
	if (c->listen == NULL || c->workers < 1 || c->workers > 4096 ||
	    c->cpu_threads < 1 || c->drain_timeout < 0 || c->max_queue < 1)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "bad replica configuration");
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->w = medha_calloc(c->workers, sizeof(*r->w))) == NULL ||
	    (r->peers.urls = medha_calloc(c->workers,
	         sizeof(*r->peers.urls))) == NULL) {
		if (r != NULL)
			free(r->w);
		free(r);
		return medha_why(why, whylen, MEDHA_ENOMEM, "out of memory");
	}
	r->cfg = *c;
	r->t0 = medha_now();
	if ((rc = medha_srv_open(&srv, c->listen, why, whylen)) != 0) {
		free(r->peers.urls);
		free(r->w);
		free(r);
		return rc;
	}
	medha_front_init(&r->f, &ops, r, srv, c->drain_timeout);
	*rp = r;
	return 0;
}

int
medha_replica_run(struct medha_replica *r, volatile sig_atomic_t *stop)
{
	int rc;

	medha_log(MEDHA_LOG_INFO, "listening at %s for %d worker%s",
	    r->cfg.listen, r->cfg.workers, r->cfg.workers > 1 ? "s" : "");
	if ((rc = medha_front_run(&r->f, stop)) != 0)
		return rc;
	medha_log(MEDHA_LOG_WARN, "stopped: %lld requests served, %lld batches",
	    (long long)r->served, (long long)r->batches);
	return 0;
}

void
medha_replica_close(struct medha_replica *r)
{
	if (r == NULL)
		return;
	for (int i = 0; i < r->cfg.workers; i++) {
		if (r->w[i].call != NULL)
			medha_srv_drop(r->f.srv, r->w[i].call);
		free(r->w[i].frees);
		free(r->w[i].frees_after);
	}
	if (r->fl != NULL)
		flights_void(r);
	free(r->fl);
	free(r->peers.urls);
	medha_front_free(&r->f);
	for (size_t s = 0; s < r->slots; s++)
		if (r->by_slot[s] != NULL)
			lreq_free(r->by_slot[s]);
	free(r->by_slot);
	free(r->w);
	medha_sched_free(r->core);
	if (r->have_pred)
		medha_pred_free(&r->pred);
	medha_tok_close(r->tok);
	free(r);
}
