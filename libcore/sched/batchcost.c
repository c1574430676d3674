/*
 * batchcost.c: batch latency from operator times (batchcost.h). Cheap by
 * design: the scheduler calls it a few times per chunk it sizes.
 */
#include "sched/batchcost.h"

static struct medha_lat
compose(const struct medha_pred *p, double core, int64_t tokens, int64_t logits)
{
	struct medha_lat l;

	l.stage = core + (p->spp > 1 ? medha_pred_spp_send(p, tokens) : 0);
	l.last = core + medha_pred_lm_head(p, logits);
	l.latency = (p->spp - 1) * l.stage + l.last;
	return l;
}

/*
 * Every layer waits for all KVP groups: the queries of a layer must exist
 * before any group attends (QKV), and the output projection and the MLP
 * run on the merged output. So a layer takes the linear layers of the
 * group with the most linear work, then the slowest group's attention
 * (prefill chunks and decodes against the shards held there), then the
 * merge; a stage is that times its layers. Every medha_pred_* time is
 * its layers times a per-layer time, so the sums of the stage times
 * below are that per-layer composition exactly. With one group this is
 * linear + attention, as before; taking the slowest group's linear plus
 * attention (as this did) hid the linear layers of the other groups and
 * overstated what KVP saves.
 */
struct medha_lat
medha_cost_latency(const struct medha_cost *a, const struct medha_pred *p,
    int kvp)
{
	double lin = 0, prefill = 0, decode = 0, core;

	for (int g = 0; g < kvp; g++) {
		double l, d;
		if (a->lin[g] == 0 && a->dec_n[g] == 0 && a->attn[g] == 0)
			continue;
		l = medha_pred_linear(p, a->lin[g]);
		d = medha_pred_attn_decode(p, a->dec_n[g], a->dec_kv[g]);
		if (l > lin)
			lin = l;
		/* the slowest group's attention, kept as its two terms so
		   that one group sums in the order it always did */
		if (a->attn[g] + d > prefill + decode) {
			prefill = a->attn[g];
			decode = d;
		}
	}
	core = lin + prefill + decode;
	if (a->merge_groups > 1)
		core +=
		    medha_pred_kvp_merge(p, a->merge_tokens, a->merge_groups);
	return compose(p, core, a->n_tokens, a->n_logits);
}

struct medha_lat
medha_cost_lone(const struct medha_pred *p, int64_t c, int64_t kv)
{
	double core =
	    medha_pred_linear(p, c) + medha_pred_attn_prefill(p, c, kv);

	return compose(p, core, c, 1);
}

static void
save_group(struct medha_cost_undo *u, const struct medha_cost *a, int g)
{
	for (int i = 0; i < u->ng; i++)
		if (u->g[i] == g)
			return;
	u->g[u->ng] = g;
	u->lin[u->ng] = a->lin[g];
	u->dec_n[u->ng] = a->dec_n[g];
	u->dec_kv[u->ng] = a->dec_kv[g];
	u->attn[u->ng] = a->attn[g];
	u->ng++;
}

void
medha_cost_add(struct medha_cost *a, const struct medha_pred *p,
    const struct medha_kvplace *pl, const struct medha_kvlease *l, int64_t t,
    int64_t kv, int decode, int last, struct medha_cost_undo *u)
{
	int na = medha_kvplace_entered(pl, l, kv + t);

	MEDHA_ASSERT(na >= 1);
	if (u != NULL) {
		u->ng = 0;
		u->merge_tokens = a->merge_tokens;
		u->merge_groups = a->merge_groups;
		u->n_logits = a->n_logits;
		u->n_tokens = a->n_tokens;
		u->n_items = a->n_items;
		for (int i = 0; i < na; i++)
			save_group(u, a, l->groups[i]);
	}
	/* only the last entered group appends KV and runs the linear layers */
	a->lin[l->groups[na - 1]] += t;
	for (int i = 0; i < na; i++) {
		int g = l->groups[i];
		if (decode) {
			a->dec_n[g] += 1;
			a->dec_kv[g] +=
			    medha_kvplace_in_piece(pl, i, 0, kv + 1);
		} else {
			a->attn[g] += medha_pred_attn_prefill(p, t,
			    medha_kvplace_in_piece(pl, i, 0, kv));
		}
	}
	if (na > 1) {
		a->merge_tokens += t;
		if (na > a->merge_groups)
			a->merge_groups = na;
	}
	a->n_logits += decode || last;
	a->n_tokens += t;
	a->n_items++;
}

void
medha_cost_undo(struct medha_cost *a, const struct medha_cost_undo *u)
{
	for (int i = 0; i < u->ng; i++) {
		int g = u->g[i];
		a->lin[g] = u->lin[i];
		a->dec_n[g] = u->dec_n[i];
		a->dec_kv[g] = u->dec_kv[i];
		a->attn[g] = u->attn[i];
	}
	a->merge_tokens = u->merge_tokens;
	a->merge_groups = u->merge_groups;
	a->n_logits = u->n_logits;
	a->n_tokens = u->n_tokens;
	a->n_items = u->n_items;
}
