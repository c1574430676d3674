/*
 * intake.h: a request's arrival at the live replica and its end at its
 * client's word (intake.c): SUBMIT (its prompt, checks, the core's
 * arrival, ACCEPTED; a long text on the tokenizer's thread first),
 * CANCEL, a client gone, the drain's end. Calls the workers' count,
 * the output (out.h), the requests (reqs.h) and the core, nothing
 * above; replica.c calls it. Not for use outside serve/replica/.
 */
#ifndef MEDHA_REP_INTAKE_H
#define MEDHA_REP_INTAKE_H

#include "serve/replica/workers.h"

#include "serve/front.h"
#include "tok/tokq.h"

struct rep_intake {
	struct medha_tokq *tokq; /* the tokenizer's thread (tok/tokq.h;
	                            made at the first long text prompt) */
};

/* The front's ops: a SUBMIT, a CANCEL, a client gone (its requests
 * cancelled: how many), every request cancelled (the drain over). */
void rep_on_submit(void *arg, struct medha_srv_ev *ev,
    struct medha_reqspec *rs);
int rep_on_cancel(void *arg, uint32_t peer, uint64_t h);
int rep_on_client_gone(void *arg, uint32_t peer);
void rep_cancel_all(void *arg);
/* Text prompts tokenized since the last pass, on to the core. */
void rep_tok_collect(struct medha_replica *r);
/* Stop the tokenizer's thread; its requests are let go, unanswered. */
void rep_tok_stop(struct medha_replica *r);

#endif
