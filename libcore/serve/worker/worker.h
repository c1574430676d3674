/*
 * worker.h: a live worker (medha-worker -s): one backend (engine/
 * backend.h) serving one replica's scheduler over the wire protocol
 * (net/proto.h, medha-proto(7)). It dials the scheduler, says HELLO
 * (backend, model, layout, KV block size and count), then asks for work
 * with READY and answers each BATCH with a RESULT of the tokens it
 * sampled; in a replica of several workers it runs its part of every
 * batch and exchanges hidden states, TP gathers and KVP partial
 * attention with its peers (net/coll.h). doc/DESIGN.md follows a
 * request through it.
 *
 *	struct medha_worker_config c = { .addr = "ipc:///tmp/r0.sock",
 *	    .model = "model.gguf", .gpu = "cpu", .tp = 1, .spp = 1,
 *	    .kvp = 1, .lookahead = 1 };
 *	(open a backend be: medha_backend_open)
 *	rc = medha_worker_run(be, &c, &stop_flag, why, sizeof(why));
 *	medha_backend_close(be);
 */
#ifndef MEDHA_WORKER_H
#define MEDHA_WORKER_H

#include "engine/backend.h"

#include <signal.h>

struct medha_worker_config {
	const char *addr;  /* the scheduler's address (-s) */
	const char *model; /* as given with -m: announced in HELLO */
	const char *gpu;   /* the predictor's device: "cpu" or a GPU name */
	int tp, spp, kvp;  /* the replica's layout (1 each; layout.h) */
	int rank;          /* this worker's, in [0, tp * spp * kvp) */
	const char *peer;  /* where the other workers reach this one; NULL:
	                      beside the scheduler's address */
	int lookahead;     /* run the next step ahead (1; --no-lookahead: 0) */
	int retry_forever; /* a HELLO refused for good is retried for ever
	                      (net/greet.h), not given up */
};

/*
 * Serve the scheduler at c->addr with backend be (the caller's, used
 * by one thread at a time) until *stop becomes non-zero (a signal
 * handler's flag); a scheduler that goes away is waited for and greeted
 * again. Returns 0 after the stop, or MEDHA_EINVAL (a bad address or
 * layout), MEDHA_EIO (cannot listen for peers) or MEDHA_ENOMEM, with a
 * reason in why, before it served anything; MEDHA_EAUTH or MEDHA_EINVAL
 * when its HELLO was refused for good (net/greet.h).
 */
int medha_worker_run(struct medha_backend *be,
    const struct medha_worker_config *c, volatile sig_atomic_t *stop,
    char *why, size_t whylen);

#endif
