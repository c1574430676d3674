/*
 * out.h: what the live replica sends a request's client (out.c): its
 * tokens as they come, turned into text and cut at a stop string, and
 * its record at its end (the core's, or one of the replica's own for a
 * request that ended before the core had it). Calls the requests
 * (reqs.h), the sequences and the core below them, nothing above. Not
 * for use outside serve/replica/.
 */
#ifndef MEDHA_REP_OUT_H
#define MEDHA_REP_OUT_H

#include "serve/replica/reqs.h"

/* A token sampled for q: its text, stop strings, the end of output.
 * MEDHA_FINISH_STOP if the request ends here, else 0. */
int rep_on_token(struct medha_replica *r, struct lreq *q, int32_t tok,
    const struct medha_token_lp *lp);
/* Its new tokens (and, final, what is held back) to its client. */
void rep_send_tokens(struct medha_replica *r, struct lreq *q, int final);
/* The records the core has ready, sent to their clients; their
 * requests END (reqs.h). */
void rep_drain_records(struct medha_replica *r);
/*
 * q, acknowledged before its text was tokenized (TOKENIZING or
 * CANCELLING), ends before the core had it: a record of status, code (a
 * refusal's MEDHA_E*, or 0) and why for its client (if still there),
 * and q ENDs (freed).
 */
void rep_pre_end(struct medha_replica *r, struct lreq *q, int status,
    int code, const char *why);

#endif
