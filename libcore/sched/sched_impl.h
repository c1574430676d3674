/*
 * sched_impl.h: what the two halves of the scheduler core share and
 * nothing else includes: the scheduler's state, its table of request
 * slots and the candidates of the batch being formed. sched.c holds the
 * requests' side (arrival and deadlines, records, cancellation, views);
 * sched_batch.c forms each batch and takes its results. Internal names
 * carry a plain sched_ prefix; the public API is sched/sched.h.
 *
 * Memory: at admission a request reserves the KV blocks for its prompt
 * and an estimate of its output (all of its output tokens under
 * reserve max, and for a prompt of preempt_below tokens or more, which
 * is then never preempted); a request that cannot get its blocks waits.
 * A decode past its reservation takes blocks as it goes, and when a
 * group has none, a short request is preempted (sched_preempt.c). Its KV is
 * cut into pieces of at most kvp_max_tokens, one KVP group each, chosen
 * at admission by least predicted pending prefill time (kvplace.c); the
 * request enters the next group when its KV passes the previous group's
 * limit, and only its last entered group appends KV.
 */
#ifndef MEDHA_SCHED_IMPL_H
#define MEDHA_SCHED_IMPL_H

#include "sched/sched.h"
#include "sched/batchcost.h"
#include "sched/prefix.h"

#include <stdint.h>

/* slots start on a cache line, so that a request's hot head takes two */
#define REQ_ALIGN 64

/*
 * Internal request: the public view plus bookkeeping. Requests live in a
 * table of slots; a finished request's slot goes on a free list and is
 * reused, with its generation bumped, so a handle (generation << 32 |
 * slot) names one request forever and the table is as large as the most
 * requests ever in flight at once.
 */
struct req {
	_Alignas(REQ_ALIGN) int slot; /* index in s->active, -1 when free */
	uint32_t gen;  /* generation of the slot's current (or last) use */
	int next_free; /* free list link, -1 at the end */
	struct medha_req pub; /* its hot head on the slot's first lines */
	/* prefix caching (prefix.h), with the cache on and a prompt whose
	   tokens are known (ids, or a trace's shared segments) */
	uint64_t *keys; /* owned (nkeys) keys of the cacheable tokens */
	int64_t nkeys;  /* the prompt's first nkeys tokens may be shared */
	int ins_node;   /* deepest index node of its path (0: none): it
	                   holds a reference on it and every node above */
	int64_t ins_tok; /* tokens of that path (full blocks) */
	int ins_stop;    /* its blocks go no further into the index */
	int64_t own_first; /* depth of the first node its block made, -1 */
	int ext_node;      /* the node it is about to extend, -1 none */
	int64_t own_end;   /* positions its nodes' blocks end at */
	int fork_part;     /* the partial block its FORKs copy (0: none),
	                      held until its first item is formed: the
	                      workers fork with that item (sched_prefix.c) */
	int64_t keys_cap;  /* keys' room: a request of token ids (ids) gets
	                      its output ids appended, so that a preempted
	                      one finds its KV in the cache */
	int ids;           /* its prompt came as token ids */
};

struct cand {
	int idx;
	double key;     /* policy order, smaller first */
	int64_t hit;    /* its cached prompt tokens: ties, more first */
	double urgency; /* 1 - relative slack, clamped to [0, 1] */
	int64_t rem;    /* prompt tokens not yet handed out */
	int packed;     /* 1: dealt with in this batch (2: about to be) */
	int rank; /* medha: place in the short index (s->srank), -1 if not in
	             it (too long for one chunk, or packed) */
};

/* short_index sorts by counting while one chunk <= this x candidates */
#define SHORT_COUNT_MAX 4
/* A candidate short enough for one chunk, in the index by its rem. */
struct srank {
	int64_t rem;
	double urgency;
	int pos; /* in s->cands */
};

struct medha_sched {
	struct medha_sched_config cfg;
	const struct medha_pred *pred;
	struct medha_kvplace kv; /* KV blocks per KVP group */
	struct medha_prefix px;  /* cached prefixes, if cfg.prefix_cache */
	/* the workers' part (struct medha_kvop): ops since the last batch,
	   moved to the batch formed (its ops), the buffers swapped */
	struct medha_kvop *pend, *ops;
	int npend, pend_cap, ops_cap;
	int *punref; /* partial blocks forked this batch: let go after it */
	int npunref, punref_cap;
	int oom;     /* an op was lost for memory: reported by next_batch */

	struct req *reqs; /* (reqs_cap) slots */
	int reqs_cap;
	int free_head; /* first free slot, -1 if none */
	int *active;   /* (reqs_cap) slots of requests not done */
	int nactive;
	int nadmitted; /* requests holding KV (prefill or decode) */

	struct medha_record *recs; /* finished, not yet popped (ring) */
	int rec_head, rec_n, rec_cap;

	struct cand *cands;
	int cands_cap;
	/*
	 * medha's index of one batch's candidates that can finish in one
	 * chunk (short_index), each (cands_cap) but nxt (cands_cap + 1):
	 * srank sorted by rem; nxt, a union-find link from each place to the
	 * next place not packed yet; pick, scratch.
	 */
	struct srank *srank;
	int *nxt, *pick;
	int *count;      /* (SHORT_COUNT_MAX * cands_cap + 1) short_index's */
	int nshort;      /* places in srank */
	int first;       /* short_any */
	uint64_t visits; /* medha_sched_visits() */
	struct medha_sched_item *items;
	int items_cap;
	struct medha_cost acc;
	uint64_t seq;
	int64_t min_chunk; /* adaptive: a batch without decodes holds this */
	double tpot_floor; /* a tpot_slo bounds batches down to this, s */
	int ndec;          /* decodes in the batch being formed */
	int nlong;         /* long decodes (tpot_long) decoding, in the
	                      batch being formed or in flight */
	int long_pre;      /* the long prefill in progress that others
	                      yield to (sched_batch.c), -1 */
	int long_turns;    /* long prompts take turns (long_pre) */
	int long_sep;      /* long decodes take batches of their own */
	int long_only;     /* the batch being formed is one */
	double long_lat;   /* the latency of the last one, s */
	/* the progress guarantee (pack_prefill): its counters; whether it
	   gave the batch being formed a chunk, and that batch's cost
	   before it did */
	struct medha_sched_progress prog;
	int prog_now;
	double prog_base;
	double limit; /* the batch being formed's latency limit, s */
	/* growth on demand and preemption (sched_preempt.c) */
	double ratio;          /* est: the output estimate's ratio */
	double out_mean;       /* the completed requests' mean output, 0
	                          before any */
	int64_t preempt_below; /* prompts this long are never preempted */
	int64_t preemptions;   /* medha_sched_preemptions() */
	char lost_reason[200]; /* the last lost worker's: the failure of
	                          those not recovered in time */
	uint32_t ghost;        /* the last handle given a preempted
	                          request's cached KV (MEDHA_KVOP_MOVE) */
};

/* prefix caching (sched_prefix.c): the request's keys at arrival and
 * the prefix it would find; its admission with the longest match (0 or
 * MEDHA_ENOSPACE); its prompt's full blocks into the index as they are
 * handed out; at its end its tail into the index, its references
 * dropped. */
int sched_prefix_arrive(struct medha_sched *s, struct req *q,
    const struct medha_reqspec *spec);
int sched_prefix_admit(struct medha_sched *s, struct req *q);
/* evict what the requests' reservations need of the cached blocks */
void sched_prefix_evict(struct medha_sched *s);
/* the index's drop hook (at init) */
void sched_prefix_init(struct medha_sched *s);
/* an op for the workers (struct medha_kvop) */
void sched_op(struct medha_sched *s, int op, uint64_t req, uint64_t src,
    int64_t from, int64_t to);
/* the end of forming a batch: its ops (moved from pend), the partial
 * blocks forked let go */
void sched_prefix_batch(struct medha_sched *s, struct medha_sched_batch *b);
int sched_prefix_blocks(struct medha_sched *s, struct req *q);
/* a worker lost: the index emptied (its references all gone) */
void sched_prefix_lost(struct medha_sched *s);
/* q's references let go, its keys kept: it is to be recomputed */
void sched_prefix_forget(struct medha_sched *s, struct req *q);
void sched_prefix_finish(struct medha_sched *s, struct req *q, int status);
/* cum[] and the time to prefill prompt tokens [start, prompt) alone */
double sched_plan_alone(const struct medha_sched *s, int64_t start,
    int64_t prompt, double *cum);
/* the pending work of each piece of r's KV (admission, KVP) */
void sched_piece_work(const struct medha_sched *s, const struct medha_req *r,
    int64_t *work);

/* KV tokens a request needs in all: prompt and every output token (a
 * preempted one's prompt holds the outputs it had then). */
static inline int64_t
sched_kv_need(const struct medha_req *r)
{
	return r->spec.prompt_tokens + r->spec.max_tokens - r->resumed;
}

/* growth on demand and preemption (sched_preempt.c): the KV tokens r
 * reserves at admission; the default preempt_below (at init); at the
 * start of each batch, every decode's block for its next token,
 * preempting where a group has none, and the estimate's decay (0 or
 * MEDHA_ENOMEM) */
int64_t sched_kv_admit(const struct medha_sched *s, const struct medha_req *r);
int64_t sched_preempt_default(const struct medha_sched *s);
int sched_grow(struct medha_sched *s, double now);
/* q (admitted) waits again for a prefill of its prompt and its outputs
 * so far (a preemption's, or a lost worker's recomputation) */
void sched_fold_outputs(struct medha_req *r);
void sched_requeue(struct medha_sched *s, struct req *q);
/* r completed: its output into the running mean */
void sched_est_done(struct medha_sched *s, const struct medha_req *r);
/* whether r may be preempted (and reserves by estimate) */
int sched_preemptible(const struct medha_sched *s, const struct medha_req *r);
/* Whether r is long: its prompt, before any preemption folded output
 * into it, has preempt_below tokens or more (never preempted under est;
 * its decodes have a TPOT target, medha_req.tpot_long). */
int sched_long(const struct medha_sched *s, const struct medha_req *r);
/* prefix caching of a preempted request: its computed KV into the index
 * under a new owner (MOVE), or a TRIM to 0; its keys kept, its match
 * found again (0 or MEDHA_ENOMEM) */
int sched_prefix_preempt(struct medha_sched *s, struct req *q, int64_t kv);
/* an output token of q, id tok (-1: not known): its key, for a later
 * preemption. 0 or MEDHA_ENOMEM */
int sched_prefix_out(struct medha_sched *s, struct req *q, int32_t tok);

/* The live request of handle h, or NULL. */
static inline struct req *
sched_lookup(const struct medha_sched *s, uint64_t h)
{
	uint64_t slot = h & 0xffffffffu;
	struct req *q;

	if (slot >= (uint64_t)s->reqs_cap)
		return NULL;
	q = &s->reqs[slot];
	if (q->slot < 0 || q->gen != (uint32_t)(h >> 32))
		return NULL;
	return q;
}

/*
 * Finish q: release its KV, leave its record (status, finish reason fin,
 * reason or NULL) and free its slot. 0 or MEDHA_ENOMEM (the record was
 * lost; the request is finished all the same).
 */
int sched_finish(struct medha_sched *s, struct req *q, int status, int fin,
    const char *reason, double now);

#endif
