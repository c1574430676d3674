/*
 * sched.h: the scheduler core. A pure library: no sockets, no clock of
 * its own. It is handed events (a request arrives, a batch is done) with
 * a time, and asked for the next batch. The simulator (sim.c) and the
 * live medha-sched drive the same code.
 *
 * One iteration (doc/DESIGN.md section 6): every running decode that is not
 * waiting for its previous token enters the batch (one token each);
 * prefills are taken in policy order (fcfs, edf, lrs, medha, sarathi);
 * each gets a chunk sized so the predicted batch latency stays within
 * the target, or the tightest TPOT SLO of the batch's decodes if that is
 * less, but a batch without decodes holds at least the predictor's
 * smallest efficient chunk (adaptive), or a share of a fixed token
 * budget (fixed N); KVP groups were chosen at admission and are entered
 * as the prompt grows.
 *
 * Calling protocol: medha_sched_next_batch() only when pipeline stage 0
 * is free (so every chunk handed out before has left stage 0, and the
 * next chunk of the same prompt may go, except under sarathi, which
 * waits for it to leave the last stage); medha_sched_batch_done() when a
 * batch leaves the last stage, with each item's sampled token and
 * whether its sequence stopped; records of finished requests are then
 * taken with medha_sched_pop_record(). A request is known by the 64-bit
 * handle medha_sched_arrive() gives it; a handle is never reused, so a
 * batch item whose request was cancelled meanwhile is simply skipped.
 * The scheduler's memory depends on the requests in flight, not on those
 * served (finished requests' slots are reused).
 *
 *	uint64_t h;
 *	medha_sched_arrive(s, &spec, now, &h);
 *	while (medha_sched_next_batch(s, now, &b) == 1) { ...run b...;
 *		medha_sched_batch_done(s, &b, results, later); }
 *	while (medha_sched_pop_record(s, &rec) == 1) ...;
 */
#ifndef MEDHA_SCHED_H
#define MEDHA_SCHED_H

#include "batch.h" /* MEDHA_KV_BLOCK */
#include "sched/kvplace.h"
#include "sched/prefix.h"
#include "medha.h"
#include "sched/pred.h"
#include "req.h"

#include <stdint.h>

#define MEDHA_KVP_MAX 64    /* most KVP groups a replica may have */
#define MEDHA_SLACK_SEGS 16 /* pieces of the remaining-prefill-time curve */

enum medha_policy {
	MEDHA_POLICY_FCFS = 0, /* arrival order */
	MEDHA_POLICY_EDF,      /* earliest TTFT deadline */
	MEDHA_POLICY_LRS,      /* least relative slack */
	MEDHA_POLICY_MEDHA,    /* lrs + prefill-prefill batching */
	MEDHA_POLICY_SARATHI,  /* fcfs, fixed budget, one chunk of a
	                          prompt in flight at a time */
};
/* Returns MEDHA_POLICY_* or -1. */
int medha_policy_parse(const char *name);
const char *medha_policy_name(int policy);

/*
 * What a request reserves at admission (man/medha-sched.1, "Memory"):
 * EST, its prompt and an estimate of its output (SGLang's decaying
 * ratio of its max_tokens), growing on demand as it decodes, and a
 * short request is preempted when a group has no block for the next
 * step; MAX, its prompt and all its max_tokens (nothing is ever
 * preempted); VLLM, vLLM's rule as a baseline: the prompt alone, every
 * request preemptible, the newest first.
 */
enum medha_reserve {
	MEDHA_RESERVE_EST = 0,
	MEDHA_RESERVE_MAX,
	MEDHA_RESERVE_VLLM,
};
/* Returns MEDHA_RESERVE_* or -1 ("est", "max", "vllm"). */
int medha_reserve_parse(const char *name);
const char *medha_reserve_name(int reserve);

/* The output estimate (EST): the ratio starts at INIT, falls by
 * (INIT - FLOOR) / DECAY_STEPS each batch with decodes, and goes back
 * to INIT when a request is preempted (SGLang's defaults); the estimate
 * is at most SPAN x the running mean output of the requests completed
 * (weight NEW for the newest), COLD tokens before any. SPAN 0.5: on the
 * Azure conversation trace with context-sized caps and a tight pool
 * (doc/RESULTS.md) twice the mean kept requests waiting that vLLM's
 * rule ran (8% fewer requests a second within the SLOs), half of it
 * matched vLLM with fewer preemptions; a request past its reservation
 * grows on demand anyway. */
#define MEDHA_EST_INIT 0.7
#define MEDHA_EST_FLOOR 0.1
#define MEDHA_EST_DECAY_STEPS 600
#define MEDHA_EST_SPAN 0.5
#define MEDHA_EST_NEW 0.1
#define MEDHA_EST_COLD 512
/* --preempt-below by default: the prompt whose prefill alone takes this
 * long on the replica, s */
#define MEDHA_PREEMPT_SECS 5.0
/* recover_timeout by default, s: a worker's host partitioned for a
 * minute, and its links' TCP backoff after healing (medha-sched(1)) */
#define MEDHA_RECOVER_TIMEOUT 120.0

/* long_tpot by default: a long request's decode bounds every batch while
 * it decodes to this x its decode's latency alone */
#define MEDHA_LONG_TPOT 1.5

struct medha_sched_config {
	int policy;            /* MEDHA_POLICY_* (medha) */
	int64_t chunk;         /* fixed token budget; 0 = adaptive (0);
	                          sarathi needs one */
	int64_t max_chunk;     /* adaptive: largest chunk (8192) */
	int64_t min_chunk;     /* adaptive: tokens a batch without decodes
	                          holds at least; 0 = the predictor's smallest
	                          efficient chunk (0) */
	double target;         /* adaptive: target batch latency, s (0.05);
	                          lowered per batch to its decodes' tightest
	                          tpot_slo */
	double share_cap;      /* medha: most a long prefill gives up (0.5) */
	double deadline_mult;  /* no ttft_slo: x predicted prefill time (1.5) */
	double deadline_floor; /* no ttft_slo: at least this, s (0.5) */
	int block_size;        /* KV block, tokens (MEDHA_KV_BLOCK); a live
	                          scheduler takes its workers' */
	int64_t kv_blocks; /* blocks per KVP group; 0 = from GPU memory (0) */
	double mem_util;   /* fraction of GPU memory usable (0.9) */
	int64_t kvp_max_tokens; /* KV tokens per request per group; 0 = no limit
	                           (0) */
	int max_prefills;       /* prefills in one batch (64) */
	int max_seqs;           /* requests holding KV at once; 0 = no limit but
	                           memory (0); a live scheduler takes its workers' */
	int prefix_cache;       /* 1: reuse the KV of cached prompt prefixes
	                           (prefix.h; medha-sched(1)) (0) */
	int window_kv;          /* 1: the backend's window layers hold only
	                           the KV blocks their window still sees, and
	                           requests reserve so (medha_kvplace_window);
	                           0: every layer counts as global (0) */
	int window_exact;       /* 1 (with window_kv and prefix_cache): the
	                           window layers' KV of the index's blocks
	                           goes too as their owner's window moves on
	                           (medha-worker --window-kv), so a hit is
	                           taken only where each fork's owner still
	                           holds what it needs (sched_prefix.c); 0: the
	                           index's blocks keep every layer (0) */
	int reserve;            /* MEDHA_RESERVE_* (est) */
	int64_t preempt_below;  /* est: a prompt this long or longer keeps
	                           the full reservation and is never
	                           preempted; 0 = the prompt whose prefill
	                           alone takes MEDHA_PREEMPT_SECS (0) */
	double long_tpot;       /* adaptive: while a request whose prompt is
	                           preempt_below tokens or more decodes, every
	                           batch's limit is at most this x its decode's
	                           latency alone (its TPOT target; not below
	                           the tpot_slo floor); 0 = off
	                           (MEDHA_LONG_TPOT) */
	double recover_timeout; /* a request that held KV on a lost worker
	                           is recomputed (medha_sched_worker_lost)
	                           if it is admitted again within this many
	                           seconds of the loss, and fails past it;
	                           0: it fails at once
	                           (MEDHA_RECOVER_TIMEOUT) */
};
void medha_sched_config_default(struct medha_sched_config *c);

enum medha_req_state {
	MEDHA_REQ_WAITING = 0, /* arrived, no KV memory reserved yet */
	MEDHA_REQ_PREFILL,     /* memory reserved, prompt in progress */
	MEDHA_REQ_DECODE,      /* first token out, generating */
	MEDHA_REQ_DONE,
};

/*
 * A request in the scheduler. What every iteration reads or writes of a
 * running decode comes first, in the first two cache lines of its slot:
 * state to tbt, and the head of the KVP placement (its first groups).
 * With a thousand requests in flight the iteration is bound by these
 * loads (bench-sched: laid out as declared before, a request's 1.7 KB
 * put them on seven lines).
 */
struct medha_req {
	int state;         /* MEDHA_REQ_* */
	int busy;          /* a decode token or last chunk (sarathi: any chunk)
	                      is in flight */
	int64_t kv_tokens; /* KV tokens appended (or being appended) */
	int64_t decoded;   /* output tokens produced */
	uint64_t handle;   /* its stable id (medha_sched_arrive) */
	double last_token, tpot_max;
	int64_t max_tokens;      /* spec's, and */
	double tpot_slo;         /* spec's, beside the fields read with them */
	double tpot_long; /* a long request's TPOT target (long_tpot x its
	                     decode alone), s; 0 for any other */
	struct medha_tbt tbt;    /* owned: the gaps between its tokens */
	struct medha_kvlease kv; /* KVP placement, fixed at admission */
	int64_t sched_prefill;   /* prompt tokens handed to batches */
	double first_token;
	double deadline;      /* absolute TTFT deadline, s */
	double deadline_dur;  /* deadline - arrival, s */
	double prefill_alone; /* predicted prefill time alone, s */
	double cum[MEDHA_SLACK_SEGS +
	    1]; /* predicted time to prefill x_i tokens alone */
	struct medha_reqspec spec; /* as it arrived (prompt, prompt_ids,
	                              prefix and stop strings dropped: the
	                              caller's) */
	int64_t cached; /* prompt tokens found in the prefix cache (at
	                   arrival; at admission, final): its prefill
	                   starts there */
	int preempted;   /* times it was preempted */
	int64_t resumed; /* output tokens folded into spec.prompt_tokens
	                    when it was last preempted: its prefill
	                    recomputes them, and the last chunk's token is
	                    its next output (0: never preempted) */
	double recover_by; /* its worker was lost: it fails unless it is
	                      admitted again by then (0: not recovering;
	                      medha_sched_recover_expire) */
	double lost_at;       /* its first loss since its last token */
	int64_t lost_decoded; /* its decoded then */
};

/* A batch item: one sequence's tokens in this iteration. */
struct medha_sched_item {
	uint64_t req;   /* request handle (medha_sched_req) */
	int64_t tokens; /* 1 for a decode, the chunk for a prefill */
	int64_t kv;     /* KV tokens of this sequence before these tokens */
	int decode;     /* 1 for a decode token */
	int last;       /* 1 if this is the prompt's last chunk */
};

/*
 * Prefix caching on the workers (man/medha-sched.1, "Prefix cache"):
 * what a worker does to its KV sequences, one per request handle, before
 * it runs a batch's items, in the order given. TRIM: req's request
 * ended, or blocks of it the cache held were evicted: keep its positions
 * [0, to) (what the cache still holds of it; its other blocks go), or
 * free it when to is 0. FORK: req's sequence, new (or holding exactly
 * from positions), takes src's positions [from, to): the full blocks
 * shared, a last partial block copied. With the cache on, every request
 * that ends gets a TRIM (its sequence is let go only so). MOVE: req was
 * preempted: its sequence, kept to [0, to), is src's from now on (src is
 * a handle no request has: the cache's blocks of it live there, and
 * later FORKs and TRIMs name src); req has no sequence after it. A
 * preempted request whose KV the cache does not keep gets a TRIM to 0,
 * with the cache on or off.
 */
enum medha_kvop_kind {
	MEDHA_KVOP_TRIM = 1,
	MEDHA_KVOP_FORK = 2,
	MEDHA_KVOP_MOVE = 3,
};
struct medha_kvop {
	int op;           /* MEDHA_KVOP_* */
	uint64_t req;     /* the request handle of the sequence */
	uint64_t src;     /* FORK: whose sequence it takes positions from */
	int64_t from, to; /* FORK: src's positions [from, to); TRIM: keep
	                     [0, to) */
};

struct medha_sched_batch {
	uint64_t seq;      /* iteration number, from 0 */
	double start;      /* time it was formed (enters stage 0), s */
	double stage_time; /* predicted time in each of stages 0..spp-2, s */
	double last_time;  /* predicted time in the last stage (+ lm head), s */
	double latency;    /* predicted latency through all stages, s */
	int n_items, n_decode;
	int64_t n_tokens;
	struct medha_sched_item *items; /* owned by the scheduler; valid until
	                             the next medha_sched_next_batch() */
	struct medha_kvop *ops; /* (n_ops) prefix caching: to do before the
	                           items, in order; owned likewise; given
	                           also when there are no items */
	int n_ops;
};

struct medha_sched;

/*
 * The predictor p is borrowed and must outlive s. Returns 0,
 * MEDHA_EINVAL (bad config), MEDHA_ENOSPACE (the GPUs have no memory
 * left for KV after the weights) or MEDHA_ENOMEM.
 */
int medha_sched_init(struct medha_sched **s, const struct medha_sched_config *c,
    const struct medha_pred *p);
void medha_sched_free(struct medha_sched *s);

/*
 * A request arrives at `now` (spec's prompt, prompt_ids and stop strings
 * are not kept: the caller keeps what it needs under the handle). *handle
 * (if not NULL) gets its handle, never 0. A request that could never be
 * served (prompt + max_tokens larger than the replica's KV memory, or no
 * prompt_tokens) gets a "rejected" record at once (and still a handle).
 * Returns 0 or MEDHA_ENOMEM.
 */
int medha_sched_arrive(struct medha_sched *s, const struct medha_reqspec *spec,
    double now, uint64_t *handle);

/*
 * The request's client went away or asked to stop: it ends with a
 * "cancelled" record (reason copied from `reason`) and its KV is freed at
 * once; items of it still in flight are skipped when their batch is done.
 * Returns 0, or MEDHA_ENOTFOUND if the handle is unknown or finished.
 */
int medha_sched_cancel(struct medha_sched *s, uint64_t handle,
    const char *reason, double now);

/*
 * A worker of the replica was lost: every batch in flight is void, the
 * workers' KV (the prefix cache's with it) is gone, and every request
 * that was admitted (holds KV) either ends with a "failed" record giving
 * `reason` (with cfg.recover_timeout 0, or a presence or frequency
 * penalty, which counts its output) or is recomputed: it waits again
 * for a prefill of its prompt and its outputs so far, as a preempted
 * request does (sched_preempt.c; its tokens out are not given again, the
 * last chunk's token is its next), and fails with `reason` if it is not
 * admitted again within cfg.recover_timeout seconds
 * (medha_sched_recover_expire). Requests still waiting for memory stay
 * queued. The caller must not report the void batches as done. Returns
 * the number of requests failed, or MEDHA_ENOMEM.
 */
int
medha_sched_worker_lost(struct medha_sched *s, const char *reason, double now);

/*
 * A batch failed on the workers (an error, a token outside the
 * vocabulary, no memory to send one): as medha_sched_worker_lost, but
 * every request that held KV fails, none is recomputed (the same batch
 * could fail again).
 */
int medha_sched_fault(struct medha_sched *s, const char *reason, double now);

/*
 * Fail, with the reason of the loss, each request recomputed after a
 * lost worker that was not admitted again by its recover_by (call it
 * while the replica is not ready, at least). Returns the number failed,
 * or MEDHA_ENOMEM.
 */
int medha_sched_recover_expire(struct medha_sched *s, double now);

/* Requests waiting to be recomputed after a lost worker (recover_by). */
int64_t medha_sched_recovering(const struct medha_sched *s);

/*
 * Form the next batch at `now` (stage 0 must be free). Returns 1 with *b
 * filled, 0 if there is nothing to run now, or MEDHA_ENOMEM. Either way
 * b->ops (n_ops) are the workers' prefix caching ops since the last call
 * (none with the cache off), to apply before the items, if any.
 */
int medha_sched_next_batch(struct medha_sched *s, double now,
    struct medha_sched_batch *b);

/* What came out of one batch item (medha_sched_batch_done). */
struct medha_sched_result {
	int32_t token; /* the sampled token (decodes, last chunks); -1 none */
	int stop;      /* MEDHA_FINISH_STOP: the sequence ended here (an
	                  end-of-generation token or a stop string); the
	                  token is then not counted as output. 0: go on */
};

/*
 * Batch b (as returned) left the last stage at `now`: tokens come out.
 * res (may be NULL: no early stops, as in simulation) has b->n_items
 * entries, one per item. A request ends with a record when it reaches
 * max_tokens (finish_reason "length") or its result says stop ("stop"),
 * or, below max_tokens, its spec's output_tokens (a trace's real
 * length, req.h; "stop", as the model would end it).
 * Returns 0 or MEDHA_ENOMEM.
 */
int
medha_sched_batch_done(struct medha_sched *s, const struct medha_sched_batch *b,
    const struct medha_sched_result *res, double now);

/* Returns 1 and fills *rec if a finished request's record is waiting. */
int medha_sched_pop_record(struct medha_sched *s, struct medha_record *rec);

/* The prefix cache's counters (all 0 with the cache off). */
void medha_sched_prefix_stats(const struct medha_sched *s,
    struct medha_prefix_stats *st);

/*
 * The prefill progress guarantee (man/medha-sched.1): with adaptive
 * chunks, a batch whose decodes alone fill its limit still takes the
 * smallest chunk (32 tokens) of the first prefill that can go, and so
 * runs over its target.
 */
struct medha_sched_progress {
	int64_t batches; /* batches given a chunk so */
	double extra;    /* predicted time those chunks added to them, s
	                    (their decodes' TPOT paid it) */
};
void medha_sched_progress(const struct medha_sched *s,
    struct medha_sched_progress *st);
/* Preemptions so far (every request's, counted once each time). */
int64_t medha_sched_preemptions(const struct medha_sched *s);
/* The prompt length from which requests are never preempted (est). */
int64_t medha_sched_preempt_below(const struct medha_sched *s);
/* The output estimate's ratio now (est). */
double medha_sched_est_ratio(const struct medha_sched *s);

/* Requests not yet finished (waiting, prefilling or decoding). */
int64_t medha_sched_pending(const struct medha_sched *s);

/* Read-only views for tests, logs and the live front end. */
/* The request of a handle, or NULL if unknown or finished. */
const struct medha_req *
medha_sched_req(const struct medha_sched *s, uint64_t handle);
/* The i-th of the medha_sched_pending() unfinished requests (any order). */
const struct medha_req *medha_sched_active(const struct medha_sched *s, int i);
/*
 * Candidate visits made forming batches so far: a deterministic measure
 * of the scheduler's work, for tests. One per prefill candidate taken in
 * policy order and, under medha, one per step through its index of short
 * candidates (sorting, n log n, is not counted). A batch over n
 * candidates costs O(n log n) of them, never n^2.
 */
uint64_t medha_sched_visits(const struct medha_sched *s);
/* Bytes the scheduler holds (its arrays' capacities): grows with the
 * requests in flight, never with the requests served. */
size_t medha_sched_footprint(const struct medha_sched *s);
int64_t medha_sched_group_capacity(const struct medha_sched *s); /* blocks */
int medha_sched_block_size(const struct medha_sched *s);         /* tokens */
/* KV positions of one request per KVP group (a piece; medha_kvplace) */
int64_t medha_sched_group_tokens(const struct medha_sched *s);
int64_t medha_sched_group_reserved(const struct medha_sched *s, int group);
/* Blocks of a group the prefix cache holds (0 with it off); -1 if no
 * such group */
int64_t medha_sched_group_cached(const struct medha_sched *s, int group);
/* Blocks of a group in use: those requests reserve, and those of the
 * prefix cache that a request shares (the cache's others count as free:
 * they are evicted when needed); what admission leaves out of the room
 * it counts. -1 if no such group */
int64_t medha_sched_group_used(const struct medha_sched *s, int group);
/* Pending prefill work the KVP load balancer counts on a group: ns of
 * predicted prefill time (with one group, which needs no balancing,
 * prompt tokens); -1 if there is no such group. */
int64_t medha_sched_group_pending(const struct medha_sched *s, int group);

/*
 * Check the invariants: reserved blocks within capacity on every group,
 * each request's KV within its reservation. Returns 0 or MEDHA_EINVAL with
 * why filled in.
 */
int medha_sched_check(const struct medha_sched *s, char *why, size_t whylen);

/*
 * The prefill work still ahead of the unfinished requests: their
 * predicted remaining prefill times, each alone, summed (s); with the
 * prompt tokens not yet handed to a batch in *tokens (if not NULL).
 */
double medha_sched_pending_work(const struct medha_sched *s, int64_t *tokens);

/* Predicted time to prefill `prompt` tokens alone on this replica, s. */
double medha_sched_prefill_alone(const struct medha_sched *s, int64_t prompt);

/*
 * Adaptive chunking's floor: the tokens a batch without decodes holds at
 * least (min_chunk, or when that is 0 the smallest multiple of 32 whose
 * linear layers cost at most MEDHA_CHUNK_EFF x per token what those of
 * a max_chunk chunk cost, per the predictor). 0 with a fixed budget.
 */
#define MEDHA_CHUNK_EFF 2.0
int64_t medha_sched_min_chunk(const struct medha_sched *s);

#endif
