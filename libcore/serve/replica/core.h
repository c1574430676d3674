/*
 * core.h: the replica's scheduler core, its predictor and its tokenizer
 * (core.c), made from a worker's HELLO. Calls nothing of the replica's
 * but its configuration. Not for use outside serve/replica/.
 *
 * Nothing is made from a HELLO, nor dropped for it, before all of it is
 * checked (rep_core_model_check, rep_core_layout_check, rep_core_model,
 * and the caller's checks of its place): a refused HELLO leaves the
 * replica as it was.
 *
 *	if ((change = rep_core_model_check(&c, h, idle, why, len)) < 0) ...
 *	if (rep_core_model(cfg, h, &pm, why, len) != 0) ...
 *	if (change) rep_core_drop(&c, h);
 *	if (rep_core_make(&c, cfg, h, &pm, why, len) != 0) ...
 *	(c.sched, c.tok, c.pred: the core's)
 *	rep_core_free(&c);
 */
#ifndef MEDHA_REP_CORE_H
#define MEDHA_REP_CORE_H

#include "serve/replica/replica.h"

#include "net/proto.h"
#include "sched/pred.h"
#include "tok/tokenizer.h"

struct rep_core {
	struct medha_sched *sched; /* NULL until a HELLO makes it */
	struct medha_pred pred;
	int have_pred;
	struct medha_tok *tok; /* NULL: token ids only */
	size_t max_piece;      /* bytes of the longest token */
	int sim;               /* the workers are sim: no EOG check */
	int prefix;            /* the core caches prefixes (workers fork) */
	unsigned caps;         /* the workers' MEDHA_HELLO_* (all alike) */
	int vocab;
	int64_t ctx_len; /* 0: no limit */
	int tp, spp, kvp; /* the layout it was made for */
	int n_layers;
	char model[MEDHA_PROTO_NAME_MAX];
	char backend[MEDHA_PROTO_BACKEND_MAX];
	char fp[MEDHA_PROTO_FP_LEN + 1]; /* the model's fingerprint: -m's
	                                    (fp_fixed), else the workers' */
	int fp_fixed;
};

/* c, with no core; -m (cfg->model) fingerprinted. 0 or an error with
 * why. */
int rep_core_init(struct rep_core *c, const struct medha_replica_config *cfg,
    char *why, size_t whylen);
void rep_core_free(struct rep_core *c);
/*
 * Whether h's model (its fingerprint) may join: with -m only that
 * model's; without, the first worker's, and another only while idle (no
 * worker connected, nothing in flight). 0 (the replica's model, or none
 * made yet), 1 (another: once h is found good, the caller drops the
 * core with rep_core_drop and makes one from h), or an error with why.
 * Changes nothing.
 */
int rep_core_model_check(const struct rep_core *c,
    const struct medha_msg_hello *h, int idle, char *why, size_t whylen);
/*
 * Whether h's layout (tp x spp x kvp) may join: the core's, or any
 * before a core is made; another only while idle (nworkers 0, nothing in
 * flight: waiting says how many requests are). 0 (the core's layout, or
 * no core), 1 (another: drop the core, make one from h), or an error
 * with why naming both layouts. Changes nothing.
 */
int rep_core_layout_check(const struct rep_core *c,
    const struct medha_msg_hello *h, int nworkers, int idle, int64_t waiting,
    char *why, size_t whylen);
/* The core, predictor and tokenizer dropped, for h's model or layout
 * (logged); -m's fingerprint stays. */
void rep_core_drop(struct rep_core *c, const struct medha_msg_hello *h);
/* The model a core made from h serves, resolved and checked against h
 * (vocab, width, device): 0, or an error with why. Makes nothing. */
int rep_core_model(const struct medha_replica_config *cfg,
    const struct medha_msg_hello *h, struct medha_pred_model *m, char *why,
    size_t whylen);
/* The core, its predictor and the tokenizer from h and m: 0, or an
 * error with why and none made. */
int rep_core_make(struct rep_core *c, const struct medha_replica_config *cfg,
    const struct medha_msg_hello *h, struct medha_pred_model *m, char *why,
    size_t whylen);

#endif
