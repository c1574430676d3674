/*
 * medha-worker.h: what medha-worker's two modes share: the daemon mode
 * (daemon.c) that serves a scheduler, beside the one-shot mode in
 * main.c.
 */
#ifndef MEDHA_WORKER_CMD_H
#define MEDHA_WORKER_CMD_H

#include "engine/backend.h"

struct worker_daemon_opts {
	const char *addr;  /* the scheduler's address (-s) */
	const char *model; /* as given with -m: announced in HELLO */
	const char *gpu;   /* the predictor's device: "cpu" or a GPU name */
	int tp, spp, kvp;  /* the replica's layout (1 each) */
	int rank;          /* this worker's, in [0, tp * spp * kvp): rank_tp +
	                      tp * (rank_spp + spp * rank_kvp) */
	const char *peer;  /* where the other workers reach this one; NULL:
	                      beside the scheduler's address */
	int lookahead;     /* run the next step ahead (1; --no-lookahead: 0) */
};


/*
 * Serve the scheduler at o->addr with backend be until SIGTERM or
 * SIGINT. Returns the exit status (0 after a stop on a signal).
 */
int worker_daemon(struct medha_backend *be, const struct worker_daemon_opts *o);

#endif
