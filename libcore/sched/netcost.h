/*
 * netcost.h: what the links between a replica's machines cost a batch.
 * Each kind of link has a one-way latency and a bandwidth: TP (between
 * the ranks of one stage and KVP group, inside a node), SPP (a stage's
 * hidden states to the next stage), KVP (the partial attention outputs
 * and their log-sum-exps between the groups of one stage) and the
 * scheduler's (its batch out to every worker, their results back).
 * A message over a link takes latency + bytes / bandwidth; the bytes
 * are what medha's workers send (f32 rows over net/coll.h, the batch
 * and result messages of medha-proto(7)), and a link's bandwidth is
 * shared by the ranks whose messages cross it (the tp ranks of a stage
 * on one host, every worker on the scheduler's).
 *
 * The simulator (sim.c) places the parts on a batch's path as the live
 * replica overlaps them: the batch message before stage 0 starts, the
 * collectives of every layer inside each stage's time (a layer waits
 * for them), the hand-off between stages before the next one starts
 * (stage k is free for the next batch meanwhile), and stage 0's answer
 * before the scheduler forms the next batch, the last stage's before
 * the batch is done. The scheduler core sizes batches without them, as
 * the live one does. All zero (the default): no network, every time
 * as before.
 *
 *	struct medha_wire w;
 *	if (medha_wire_parse("0.01,100mbit", &w, why, sizeof(why)) == 0)
 *		pred.net.w[MEDHA_NET_SPP] = w;
 *	medha_net_batch(&pred, s, &b, &nc);
 */
#ifndef MEDHA_NETCOST_H
#define MEDHA_NETCOST_H

#include <stddef.h>

struct medha_pred;
struct medha_sched;
struct medha_sched_batch;

enum medha_net_kind {
	MEDHA_NET_TP = 0, /* TP all-gathers, each layer */
	MEDHA_NET_SPP,    /* hidden states from a stage to the next */
	MEDHA_NET_KVP,    /* the KVP exchange, each layer */
	MEDHA_NET_SCHED,  /* batches out, results back */
	MEDHA_NET_KINDS
};

/* One kind of link. */
struct medha_wire {
	double lat; /* one way, s */
	double bw;  /* bytes/s; 0: unlimited */
};

/* The links of a replica (all zero: none). */
struct medha_net {
	struct medha_wire w[MEDHA_NET_KINDS];
};

/* What the network adds to one batch, s. */
struct medha_netcost {
	double dispatch; /* the batch message, scheduler to the workers */
	double stage;    /* to each stage: its layers' TP and KVP exchanges */
	double hop;      /* hidden states from one stage to the next */
	double answer;   /* a stage's results back to the scheduler */
};

/* "tp", "spp", "kvp", "sched"; NULL if k is out of range. */
const char *medha_net_name(int k);

/*
 * A link as a flag gives it: LATENCY[,BANDWIDTH], the latency in
 * seconds (0 to 1e3), the bandwidth in bits/s with an optional suffix
 * kbit, mbit, gbit (tc's: 100mbit) or unlimited when absent. Fills *w.
 * Returns 0, or MEDHA_EINVAL with why.
 */
int
medha_wire_parse(const char *s, struct medha_wire *w, char *why, size_t whylen);

/* latency + bytes / bandwidth; 0 for a link that is all zero. */
double medha_wire_time(const struct medha_wire *w, double bytes);

/* 1 if any link of n costs anything. */
int medha_net_any(const struct medha_net *n);

/*
 * The network's part of batch b formed by s, on p->net's links: zeros
 * when p->net is all zero. b's items must be s's (valid until the next
 * batch).
 */
void medha_net_batch(const struct medha_pred *p, const struct medha_sched *s,
    const struct medha_sched_batch *b, struct medha_netcost *c);

#endif
