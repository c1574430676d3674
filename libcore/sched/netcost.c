/*
 * netcost.c: the links' share of a batch's time (netcost.h). The bytes
 * follow what the live workers send: f32 rows (serve/worker/peers.c,
 * engine/backend.c's medha_kvp_exchange), so the KV and weight types
 * of the model do not enter.
 */
#include "sched/netcost.h"

#include "sched/pred.h"
#include "sched/sched.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const kind_names[MEDHA_NET_KINDS] = {
    "tp",
    "spp",
    "kvp",
    "sched",
};

/* medha-proto(7) frames, roughly: a message's header and map keys, an
 * item of a batch (handle, position, flags, groups), a token id, a
 * sampled token in a result (handle, id) */
#define MSG_BYTES 64.0
#define ITEM_BYTES 32.0
#define ID_BYTES 5.0
#define RESULT_BYTES 16.0

/* TP all-gathers a dense layer of the cpu backend makes (cpu/cpu.c):
 * the attention output, the projection after it, the MLP's gate and
 * its output */
#define TP_GATHERS 4

const char *
medha_net_name(int k)
{
	return k >= 0 && k < MEDHA_NET_KINDS ? kind_names[k] : NULL;
}

/* A number in [lo, hi] at s, its end in *end; 0, or -1. */
static int
number(const char *s, double lo, double hi, double *x, char **end)
{
	char *e;

	errno = 0;
	*x = strtod(s, &e);
	if (e == s || errno != 0 || !isfinite(*x) || *x < lo || *x > hi)
		return -1;
	*end = e;
	return 0;
}

int
medha_wire_parse(const char *s, struct medha_wire *w, char *why, size_t whylen)
{
	static const struct {
		const char *suffix;
		double mult;
	} units[] = {{"", 1}, {"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6},
	    {"gbit", 1e9}};
	double lat, bits;
	char *e;
	size_t i;

	memset(w, 0, sizeof(*w));
	if (s == NULL || number(s, 0, 1e3, &lat, &e) != 0 ||
	    (*e != '\0' && *e != ','))
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%s: expected LATENCY[,BANDWIDTH]: seconds from 0 to "
		    "1000, then bits/s (100mbit)",
		    s != NULL ? s : "(null)");
	w->lat = lat;
	if (*e == '\0')
		return 0;
	s = e + 1;
	if (number(s, 1, 1e15, &bits, &e) != 0)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%s: expected a bandwidth in bits/s from 1 to 1e15, a "
		    "suffix kbit, mbit or gbit allowed",
		    s);
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcasecmp(e, units[i].suffix) == 0)
			break;
	if (i == sizeof(units) / sizeof(units[0]) ||
	    bits * units[i].mult > 1e15)
		return medha_why(why, whylen, MEDHA_EINVAL,
		    "%s: expected a bandwidth in bits/s from 1 to 1e15, a "
		    "suffix kbit, mbit or gbit allowed",
		    s);
	w->bw = bits * units[i].mult / 8;
	return 0;
}

double
medha_wire_time(const struct medha_wire *w, double bytes)
{
	return w->lat + (w->bw > 0 ? bytes / w->bw : 0);
}

int
medha_net_any(const struct medha_net *n)
{
	for (int k = 0; k < MEDHA_NET_KINDS; k++)
		if (n->w[k].lat > 0 || n->w[k].bw > 0)
			return 1;
	return 0;
}

/* The distinct KVP groups an item's tokens attend to: the groups of
 * the pieces up to the one they fall in (the core never cuts across
 * one), as the live replica hands them to the workers */
static int
item_groups(const struct medha_sched *s, const struct medha_sched_item *it)
{
	const struct medha_req *r = medha_sched_req(s, it->req);
	int64_t P = medha_sched_group_tokens(s);
	uint64_t seen = 0;
	int k, n = 0;

	if (r == NULL || P <= 0)
		return 1;
	k = (int)(it->kv / P);
	if (k >= r->kv.n_groups)
		k = r->kv.n_groups - 1;
	for (int i = 0; i <= k; i++) {
		uint64_t bit = (uint64_t)1 << r->kv.groups[i];
		n += !(seen & bit);
		seen |= bit;
	}
	return n > 0 ? n : 1;
}

void
medha_net_batch(const struct medha_pred *p, const struct medha_sched *s,
    const struct medha_sched_batch *b, struct medha_netcost *c)
{
	const struct medha_net *n = &p->net;
	const struct medha_model_config *m = &p->model.c;
	const double f32 = 4, tp = p->tp, L = p->stage_layers;
	double workers = (double)p->tp * p->spp * p->kvp,
	       T = (double)b->n_tokens;
	double ids = 0, sampled = 0, merge = 0;
	int groups = 1;

	memset(c, 0, sizeof(*c));
	if (!medha_net_any(n) || b->n_items == 0)
		return;
	for (int i = 0; i < b->n_items; i++) {
		const struct medha_sched_item *it = &b->items[i];
		int g = p->kvp > 1 ? item_groups(s, it) : 1;
		ids += it->decode ? 1 : (double)it->tokens;
		sampled += it->decode || it->last;
		if (g > 1) {
			merge += (double)it->tokens;
			if (g > groups)
				groups = g;
		}
	}
	/* every worker gets the batch; each answers (its sampled tokens) */
	c->dispatch = medha_wire_time(&n->w[MEDHA_NET_SCHED],
	    workers * (MSG_BYTES + b->n_items * ITEM_BYTES + ids * ID_BYTES));
	c->answer = medha_wire_time(&n->w[MEDHA_NET_SCHED],
	    workers * MSG_BYTES + sampled * RESULT_BYTES);
	/* each TP rank sends its stage's whole hidden states on */
	if (p->spp > 1)
		c->hop = medha_wire_time(&n->w[MEDHA_NET_SPP],
		    tp * T * m->dim * f32);
	/* each layer: the TP ranks' gathers, each rank's share to the
	 * others (tp - 1 of tp parts of each row) */
	if (p->tp > 1)
		c->stage += L * TP_GATHERS *
		    medha_wire_time(&n->w[MEDHA_NET_TP],
		        (tp - 1) * T *
		            ((double)m->n_heads * m->head_dim + 2.0 * m->dim +
		                m->ffn_dim) *
		            f32 / TP_GATHERS);
	/* each layer: one exchange with each other group, in turn, of the
	 * merged tokens' outputs and log-sum-exps (every head over the tp
	 * ranks) */
	if (groups > 1)
		c->stage += L * (groups - 1) *
		    medha_wire_time(&n->w[MEDHA_NET_KVP],
		        merge * m->n_heads * (m->head_dim + 1.0) * f32);
}
