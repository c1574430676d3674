/*
 * backend_sim.h: the sim backend behind the backend interface
 * (backend.h): no numerics at all. A forward call waits the time the
 * runtime predictor (sched/pred.h) gives for the batch on the named GPU
 * and model, then returns placeholder tokens, a fixed function of each
 * sequence's position (never an end-of-generation decision: the
 * scheduler does not look for one from sim workers). It keeps the same
 * sequence and position book as a real backend, so a scheduler drives it
 * exactly as it drives the cpu one, and a topology of dozens of workers
 * runs on one small machine.
 *
 *	struct medha_backend *be;
 *	struct medha_backend_sim_opts o = { .gpu = "a100",
 *	    .model = "llama3-8b" };
 *	if (medha_backend_sim_open(&be, &o, why, sizeof(why)) != 0)
 *		errx(1, "%s", why);
 */
#ifndef MEDHA_BACKEND_SIM_H
#define MEDHA_BACKEND_SIM_H

#include "engine/backend.h"

struct medha_backend_sim_opts {
	const char *gpu;   /* the predictor's device ("a100") */
	const char *model; /* a built-in model name or a GGUF path */
	const char *table; /* a measured profile (medha-profile(5)) or NULL */
	int tp, spp, kvp;  /* the replica's layout (1 each) */
	int ep;            /* experts split whole over the TP ranks
	                      (medha_pred_set_ep) (0) */
	int stage;         /* the SPP stage it runs (0): its layers, and the
	                      stage's predicted time (not the whole batch's) */
	int max_seqs;      /* sequences at once (0: 1024) */
	int64_t kv_blocks; /* KV blocks (0: the predictor's capacity at a
	                      memory use of 0.9) */
	double speed;      /* waits are divided by this (0: 1) */
};

/*
 * A sim backend for o. On success *be is the caller's, for
 * medha_backend_close(). Returns 0, MEDHA_ENOTFOUND (unknown GPU or
 * model), MEDHA_EINVAL, MEDHA_ENOSPACE (no KV memory left on the GPU) or
 * MEDHA_ENOMEM, with a reason in why.
 */
int medha_backend_sim_open(struct medha_backend **be,
    const struct medha_backend_sim_opts *o, char *why, size_t whylen);

/* The placeholder token a sim backend returns after pos tokens. */
int32_t medha_backend_sim_token(int64_t pos, int vocab);

#endif
