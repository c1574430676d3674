/*
 * batchcost.h: the predicted latency of one batch on a tp x spp x kvp
 * replica, composed from the runtime predictor's operator times.
 *
 * Per KVP group: the linear layers of the tokens whose KV that group
 * appends, the prefill attention of every chunk against the shard of its
 * KV held there, and the decode attention over the shards held there.
 * Composed per layer, since every layer waits for all groups: the most
 * linear work of any group (the queries must exist before any group
 * attends, and the MLP runs on the merged output), plus the slowest
 * group's attention, plus the merge of partial attention outputs of
 * requests that span groups; a stage is that over its layers, plus the
 * send to the next stage; the last stage adds the output projection.
 * The batch latency is the sum over the spp stages.
 *
 * The scheduler sizes chunks by trial: add an item, read the latency,
 * undo it exactly.
 *
 *	struct medha_cost a = {0};
 *	struct medha_cost_undo u;
 *	medha_cost_add(&a, pred, &kv, &lease, 512, 0, 0, 1, &u);
 *	double t = medha_cost_latency(&a, pred, kvp).latency;
 *	medha_cost_undo(&a, &u);
 */
#ifndef MEDHA_BATCHCOST_H
#define MEDHA_BATCHCOST_H

#include "sched/kvplace.h"
#include "sched/pred.h"

#include <stdint.h>

/* The work of one batch, per KVP group. */
struct medha_cost {
	int64_t lin[MEDHA_KVP_MAX];    /* tokens whose linear layers run here */
	int64_t dec_n[MEDHA_KVP_MAX];  /* decode sequences attending here */
	int64_t dec_kv[MEDHA_KVP_MAX]; /* KV tokens those decodes read here */
	double attn[MEDHA_KVP_MAX];    /* prefill attention time here, s */
	int64_t merge_tokens; /* query tokens of multi-group requests */
	int merge_groups;     /* most groups one of them spans */
	int64_t n_logits;     /* sequences that need logits */
	int64_t n_tokens;
	int n_items;
};

/* What one medha_cost_add() changed. */
struct medha_cost_undo {
	int ng; /* groups touched */
	int g[MEDHA_KVP_MAX];
	int64_t lin[MEDHA_KVP_MAX], dec_n[MEDHA_KVP_MAX], dec_kv[MEDHA_KVP_MAX];
	double attn[MEDHA_KVP_MAX];
	int64_t merge_tokens, n_logits, n_tokens;
	int merge_groups, n_items;
};

struct medha_lat {
	double stage;   /* each of stages 0..spp-2 (with the send), s */
	double last;    /* the last stage (with the output projection), s */
	double latency; /* through all stages, s */
};

/*
 * Add t tokens of a sequence whose KV lease is l and which holds kv
 * tokens before them: a decode token (decode = 1) or a prefill chunk
 * (last = 1 if it ends the prompt, so it needs logits). If u is not NULL
 * it records how to undo this.
 */
void medha_cost_add(struct medha_cost *a, const struct medha_pred *p,
    const struct medha_kvplace *pl, const struct medha_kvlease *l, int64_t t,
    int64_t kv, int decode, int last, struct medha_cost_undo *u);
void medha_cost_undo(struct medha_cost *a, const struct medha_cost_undo *u);

struct medha_lat medha_cost_latency(const struct medha_cost *a,
    const struct medha_pred *p, int kvp);
/* One prefill chunk of c tokens after kv cached ones, alone, one group. */
struct medha_lat
medha_cost_lone(const struct medha_pred *p, int64_t c, int64_t kv);

#endif
