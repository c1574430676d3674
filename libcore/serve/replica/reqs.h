/*
 * reqs.h: the live replica's requests (reqs.c): what it keeps of each
 * that the core does not, the table that finds one by handle, and its
 * life as a state with its transitions in one function, rep_req_move.
 * Calls the workers' sequences (seqs.h) and the core (core.h), nothing
 * above. Not for use outside serve/replica/.
 *
 * A request's life in the replica:
 *
 *	NEW --ACK--> TOKENIZING --CANCEL--> CANCELLING
 *	 |               |  \                   |
 *	 |            ARRIVE  `------END--------+--> (freed)
 *	 |               v                      ^
 *	 `---ARRIVE--> QUEUED --SEND--> RUNNING-'  (END from either)
 *
 * NEW is a SUBMIT being looked at; DROP lets one that the core has not
 * go without a record (refused with an ERROR, the tokenizer's thread
 * could not take it, closing). END is its record sent (out.c): every request
 * acknowledged ends with exactly one record.
 *
 *	q = rep_req_new();					(NEW)
 *	medha_sched_arrive(core, &rs, now, &q->handle);
 *	if (rep_req_move(r, q, REP_REQ_ARRIVE) != 0) ...	(QUEUED)
 *	q = rep_lreq_get(r, handle);
 *	rep_req_move(r, q, REP_REQ_END);			(freed)
 */
#ifndef MEDHA_REP_REQS_H
#define MEDHA_REP_REQS_H

#include "serve/replica/core.h"
#include "serve/replica/seqs.h"

#include "map.h"
#include "net/proto.h"

struct medha_replica;

enum rep_req_state {
	REP_REQ_NEW,        /* made at its SUBMIT; in no table */
	REP_REQ_TOKENIZING, /* acknowledged with a handle of the
	                       replica's (PRE_SLOT's), its text on the
	                       tokenizer's thread; the core has it not */
	REP_REQ_CANCELLING, /* so, and cancelled by its client: ends when
	                       its text comes back */
	REP_REQ_QUEUED,     /* the core has it; no worker holds its
	                       sequence */
	REP_REQ_RUNNING,    /* its first item was sent: the workers hold
	                       its sequence, freed at its end */
	REP_REQ_NSTATES
};

enum rep_req_event {
	REP_REQ_ACK,    /* NEW -> TOKENIZING: ACCEPTED before tokenizing */
	REP_REQ_ARRIVE, /* NEW, TOKENIZING -> QUEUED: into the core */
	REP_REQ_CANCEL, /* TOKENIZING, CANCELLING -> CANCELLING */
	REP_REQ_SEND,   /* QUEUED, RUNNING -> RUNNING: an item goes out */
	REP_REQ_END,    /* any but NEW -> freed: its record was sent */
	REP_REQ_DROP,   /* NEW, TOKENIZING, CANCELLING -> freed, no
	                   record */
};

/* The slot of the handles given to clients before the core had their
 * requests (their text was being tokenized): no core slot is ever it. */
#define PRE_SLOT 0xffffffffu

/* A request: filled in at its SUBMIT (intake.c), its forks added by
 * flights.c, its output by out.c, its state moved here alone. */
struct lreq {
	enum rep_req_state state; /* changed by rep_req_move alone */
	uint64_t handle; /* the core's; 0 before QUEUED */
	uint64_t ch;     /* the client's: the core's, or one given when its
	                    SUBMIT was acknowledged before its text was
	                    tokenized (rep_lreq_get finds it by either) */
	double t_sub;    /* when its SUBMIT came (now_s) */
	uint32_t peer; /* the client's connection */
	char id[MEDHA_ID_MAX];
	int32_t *ids; /* (n_prompt) the prompt; NULL: made up (rep_made_up) */
	uint64_t made_up; /* the made-up prompt's seed */
	int64_t n_prompt;
	int64_t held; /* bytes of ids counted in reqs.held */
	struct medha_sampler_params sp;
	int ignore_eos;
	int no_stream; /* no token events: the record carries the output */
	int n_stop;
	char *stop[MEDHA_STOP_MAX];
	size_t stop_max; /* longest stop string */
	int n_stop_ids;
	int32_t stop_ids[MEDHA_STOP_IDS_MAX]; /* end it as the end of
	                                         generation does */
	double first_batch; /* when it was first in a batch (now_s) */
	int32_t last;    /* the last sampled token: the next decode's input */
	int32_t *out;    /* (n_out) generated ids */
	struct medha_token_lp *lps; /* (n_out) their logprobs, or NULL */
	int64_t n_out, out_cap;
	char *text; /* (text_len) generated text, NUL-terminated */
	size_t text_len, text_cap, text_sent;
	int64_t ids_sent; /* ids already sent in token events */
	int stop_hit;     /* its last token completed a stop string: one
	                     more output token than the core counted */
	/* prefix caching: the runs its sequence is forked from (the core's
	   FORK ops), sent with its first item */
	struct medha_msg_fork *forks;
	int64_t n_forks, forks_cap;
};

struct rep_reqs {
	struct lreq **by_slot; /* (slots) by the core's slot (handle &
	                          0xffffffff) */
	size_t slots;
	struct medha_map by_ch; /* a client's handle given before its text
	                           was tokenized -> its lreq */
	uint32_t pre_seq;       /* the last such handle's */
	int64_t held;           /* bytes of prompt ids held by live ones */
	int64_t n[REP_REQ_NSTATES]; /* how many are in each state */
};

/* Every request freed (closing). */
void rep_reqs_free(struct medha_replica *r);
/* The forks not sent yet dropped (a fault: the KV they name is gone; a
 * request admitted again is forked anew). */
void rep_reqs_drop_forks(struct medha_replica *r);
/* A request, NEW, or NULL. */
struct lreq *rep_req_new(void);
/*
 * q through event ev (the diagram above); an event its state does not
 * take is a programmer's error. The table, the live counts (the front's,
 * its client's, held bytes) and the workers' frees change here alone.
 * ACK and ARRIVE may fail: MEDHA_ENOMEM, q as it was; else 0. After END
 * and DROP q is freed.
 */
int rep_req_move(struct medha_replica *r, struct lreq *q,
    enum rep_req_event ev);
/* The handle of the next request acknowledged before it is tokenized. */
uint64_t rep_reqs_pre_handle(struct medha_replica *r);
/* The request of handle h (the core's or the client's), or NULL. */
struct lreq *rep_lreq_get(const struct medha_replica *r, uint64_t h);
/* Requests whose text is on the tokenizer's thread. */
int64_t rep_reqs_tokenizing(const struct medha_replica *r);
/* n ids of q's prompt from position at into out, made up or given; past
 * its prompt, its output (a preempted request's prefill). */
void rep_prompt_ids(const struct medha_replica *r, const struct lreq *q,
    int64_t at, int64_t n, int32_t *out);

#endif
