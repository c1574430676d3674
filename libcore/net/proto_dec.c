/*
 * proto_dec.c: the wire protocol's decoder (net/proto.h). A frame goes
 * through three gates. First proto_scan (proto.c) reads the raw bytes
 * before msgpack-c sees them: one value of the protocol's types, ending
 * where the input does, no array or map claiming more elements than
 * there are bytes left; only then does msgpack_unpack_next build its
 * object tree, whose size is bounded by the input's. Second, the tree is
 * walked into the message's struct, checking msgpack types, keys and the
 * limits on counts before anything is allocated. Third, the struct goes
 * through proto_check, the checks the encoder runs too. This file holds
 * the frame and each message's body; the typed getters are in
 * proto_dec_get.c, requests and records in proto_dec_req.c, and what the
 * three share in proto_dec_impl.h.
 */
#include "net/proto_dec_impl.h"

#include <string.h>

/* ---- the messages ---- */

static int
dec_events(struct dec *d, const msgpack_object *o, struct medha_msg_events *e)
{
	const msgpack_object *a, *x;
	struct medha_msg_event *ev;
	char path[48];
	uint64_t kind;
	uint32_t i;
	int rc;

	if ((rc = dec_get_arr(d, o, "", 0, MEDHA_PROTO_MAX_EVENTS)) != 0)
		return rc;
	if ((e->ev = medha_calloc(o->via.array.size, sizeof(*e->ev))) == NULL)
		return MEDHA_ENOMEM;
	e->n = o->via.array.size;
	for (i = 0; i < o->via.array.size; i++) {
		ev = &e->ev[i];
		x = &o->via.array.ptr[i];
		PROTO_PATH(path, "[%u]", i);
		if ((rc = dec_get_arr(d, x, path, 3, 5)) != 0)
			return rc;
		a = x->via.array.ptr;
		if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    a[0].via.u64 > 1 ||
		    (a[0].via.u64 == 1 && x->via.array.size != 3) ||
		    (a[0].via.u64 == 0 && x->via.array.size < 4))
			return BAD(d, path,
			    "not [0, handle, ids, text(, logprobs)] or [1, "
			    "handle, record]");
		kind = a[0].via.u64;
		ev->kind = (int)kind;
		PROTO_PATH(path, "[%u].handle", i);
		if ((rc = dec_get_u64(d, &a[1], path, &ev->handle)) != 0)
			return rc;
		if (kind == MEDHA_EVENT_RECORD) {
			if ((ev->record = calloc(1, sizeof(*ev->record))) ==
			    NULL)
				return MEDHA_ENOMEM;
			PROTO_PATH(path, "[%u].record", i);
			if ((rc = dec_record(d, &a[2], path, ev->record)) != 0)
				return rc;
			continue;
		}
		PROTO_PATH(path, "[%u].ids", i);
		if ((rc = dec_get_ids(d, &a[2], path, 0, UINT32_MAX, &ev->ids,
		         &ev->n_ids)) != 0)
			return rc;
		PROTO_PATH(path, "[%u].text", i);
		if ((rc = dec_dup_text(d, &a[3], path, 1, &ev->text,
		         &ev->text_len)) != 0)
			return rc;
		PROTO_PATH(path, "[%u].logprobs", i);
		if (x->via.array.size == 5 &&
		    (rc = dec_lps(d, &a[4], path, ev->n_ids, &ev->lps)) != 0)
			return rc;
	}
	return 0;
}

enum {
	ST_WORKERS,
	ST_WANTED,
	ST_PENDING,
	ST_QUEUE,
	ST_KV_BLOCKS,
	ST_KV_USED,
	ST_BLOCK_SIZE,
	ST_PREFILL,
	ST_WORK,
	ST_READY,
	ST_MODEL,
	ST_BACKEND,
	ST_EVICTED,
	ST_PROGRESS,
	ST_EXPERTS,
	ST_N
};
static const char *const st_keys[ST_N] = {"workers", "workers_wanted",
    "pending", "queue", "kv_blocks", "kv_used", "block_size", "prefill", "work", "ready",
    "model", "backend", "evicted", "progress", "experts"};

/* A mixture of experts' counts: an array of at most
   MEDHA_PROTO_MAX_EXPERTS integers >= 0. */
static int
dec_experts(struct dec *d, const msgpack_object *o, int64_t *v, int *n)
{
	int rc;

	if ((rc = dec_get_arr(d, o, "experts", 0, MEDHA_PROTO_MAX_EXPERTS)) !=
	    0)
		return rc;
	for (uint32_t i = 0; i < o->via.array.size; i++)
		if ((rc = dec_get_i64(d, &o->via.array.ptr[i], "experts",
		         &v[i])) != 0)
			return rc;
		else if (v[i] < 0)
			return BAD(d, "experts", "a count below 0");
	*n = (int)o->via.array.size;
	return 0;
}

static int
dec_status(struct dec *d, const msgpack_object *o, struct medha_msg_status *s)
{
	int64_t *n[] = {&s->workers, &s->workers_wanted, &s->pending, &s->queue,
	    &s->kv_blocks, &s->kv_used, &s->block_size, &s->prefill};
	const msgpack_object *v[ST_N];
	int rc, k;

	if ((rc = dec_get_map(d, o, "", st_keys, ST_N, v)) != 0 ||
	    (rc = dec_need(d, "", st_keys, ST_N, v, (1u << ST_EVICTED) - 1)) !=
	        0)
		return rc;
	for (k = 0; k <= ST_PREFILL; k++)
		if ((rc = dec_get_i64(d, v[k], st_keys[k], n[k])) != 0)
			return rc;
	s->evicted = 0; /* optional: a scheduler before it sends none */
	if (v[ST_EVICTED] != NULL &&
	    (rc = dec_get_i64(d, v[ST_EVICTED], "evicted", &s->evicted)) != 0)
		return rc;
	s->n_experts = 0; /* optional likewise */
	if (v[ST_EXPERTS] != NULL &&
	    (rc = dec_experts(d, v[ST_EXPERTS], s->experts, &s->n_experts)) !=
	        0)
		return rc;
	s->progress = 0; /* optional likewise */
	if (v[ST_PROGRESS] != NULL &&
	    (rc = dec_get_i64(d, v[ST_PROGRESS], "progress", &s->progress)) !=
	        0)
		return rc;
	if ((rc = dec_get_num(d, v[ST_WORK], "work", &s->work)) != 0)
		return rc;
	if (!(s->work >= 0 && s->work <= 1e18))
		return BAD(d, "work", "not a number of seconds >= 0");
	if ((rc = dec_get_bool(d, v[ST_READY], "ready", &s->ready)) != 0 ||
	    (rc = dec_get_str(d, v[ST_MODEL], "model", 0, s->model,
	         sizeof(s->model), 0)) != 0 ||
	    (rc = dec_get_str(d, v[ST_BACKEND], "backend", 0, s->backend,
	         sizeof(s->backend), 0)) != 0)
		return rc;
	return 0;
}

enum {
	HE_TP,
	HE_SPP,
	HE_KVP,
	HE_RANK_TP,
	HE_RANK_SPP,
	HE_RANK_KVP,
	HE_BLOCK_SIZE,
	HE_N_BLOCKS,
	HE_MAX_SEQS,
	HE_VOCAB,
	HE_DIM,
	HE_PID,
	HE_BACKEND,
	HE_MODEL,
	HE_GPU,
	HE_LAYERS,
	HE_PEER,
	HE_FP,
	HE_CAPS,
	HE_N
};
static const char *const he_keys[HE_N] = {"tp", "spp", "kvp", "rank_tp",
    "rank_spp", "rank_kvp", "block_size", "n_blocks", "max_seqs", "vocab",
    "dim", "pid", "backend", "model", "gpu", "layers", "peer", "fingerprint",
    "caps"};

static int
dec_hello(struct dec *d, const msgpack_object *o, struct medha_msg_hello *h)
{
	int *n[] = {&h->tp, &h->spp, &h->kvp, &h->rank_tp, &h->rank_spp,
	    &h->rank_kvp, &h->block_size, &h->n_blocks, &h->max_seqs, &h->vocab,
	    &h->dim, &h->pid};
	const msgpack_object *v[HE_N];
	int rc, k;

	if ((rc = dec_get_map(d, o, "", he_keys, HE_N, v)) != 0 ||
	    (rc = dec_need(d, "", he_keys, HE_N, v, (1u << HE_PEER) - 1)) != 0)
		return rc;
	if (v[HE_PEER] != NULL &&
	    (rc = dec_get_str(d, v[HE_PEER], "peer", 0, h->peer,
	         sizeof(h->peer), 0)) != 0)
		return rc;
	if (v[HE_CAPS] != NULL) {
		int64_t caps;
		if ((rc = dec_get_i64(d, v[HE_CAPS], "caps", &caps)) != 0)
			return rc;
		if (caps < 0 || caps > UINT32_MAX)
			return BAD(d, "caps", "not a 32-bit mask");
		h->caps = (unsigned)caps;
	}
	if (v[HE_FP] != NULL &&
	    (rc = dec_get_str(d, v[HE_FP], "fingerprint", 0, h->fingerprint,
	         sizeof(h->fingerprint), 0)) != 0)
		return rc;
	for (k = 0; k <= HE_PID; k++)
		if ((rc = dec_get_int(d, v[k], he_keys[k], n[k])) != 0)
			return rc;
	if ((rc = dec_get_str(d, v[HE_BACKEND], "backend", 0, h->backend,
	         sizeof(h->backend), 1)) != 0 ||
	    (rc = dec_get_str(d, v[HE_MODEL], "model", 0, h->model,
	         sizeof(h->model), 1)) != 0 ||
	    (rc = dec_get_str(d, v[HE_GPU], "gpu", 0, h->gpu, sizeof(h->gpu),
	         1)) != 0 ||
	    (rc = dec_get_arr(d, v[HE_LAYERS], "layers", 2, 2)) != 0 ||
	    (rc = dec_get_int(d, &v[HE_LAYERS]->via.array.ptr[0], "layers[0]",
	         &h->layer_lo)) != 0 ||
	    (rc = dec_get_int(d, &v[HE_LAYERS]->via.array.ptr[1], "layers[1]",
	         &h->layer_hi)) != 0)
		return rc;
	return 0;
}

/* [temperature, top_k, top_p, seed] or with [presence_penalty,
 * frequency_penalty, repetition_penalty, min_p] after them, then
 * [logprobs, top_logprobs], then [skip], then [min_tokens, ban ids] */
static int
dec_params(struct dec *d, const msgpack_object *o, const char *pfx,
    struct medha_sampler_params *sp)
{
	static const char *const more[] = {"presence_penalty",
	    "frequency_penalty", "repetition_penalty", "min_p"};
	const msgpack_object *a = o->via.array.ptr;
	float *mv[] = {&sp->presence_penalty, &sp->frequency_penalty,
	    &sp->repetition_penalty, &sp->min_p};
	char path[96];
	int rc;

	if ((rc = dec_get_arr(d, o, pfx, 4, 13)) != 0)
		return rc;
	if (o->via.array.size != 4 && o->via.array.size != 8 &&
	    o->via.array.size != 10 && o->via.array.size != 11 &&
	    o->via.array.size != 13)
		return BAD(d, pfx, "not an array of 4, 8, 10, 11 or 13");
	if (o->via.array.size >= 11 &&
	    (rc = dec_get_u64(d, &a[10],
	         dec_join(path, sizeof(path), pfx, "skip"), &sp->skip)) != 0)
		return rc;
	if (o->via.array.size == 13) {
		int32_t *ids = NULL;
		int64_t k = 0;
		if ((rc = dec_get_i64(d, &a[11],
		         dec_join(path, sizeof(path), pfx, "min_tokens"),
		         &sp->min_tokens)) != 0 ||
		    (rc = dec_get_ids(d, &a[12],
		         dec_join(path, sizeof(path), pfx, "ban"), 0,
		         MEDHA_BAN_MAX, &ids, &k)) != 0) {
			free(ids);
			return rc;
		}
		if (k > 0)
			memcpy(sp->ban, ids, (size_t)k * sizeof(*ids));
		sp->n_ban = (int)k;
		free(ids);
	}
	if (o->via.array.size >= 10 &&
	    ((rc = dec_get_bool(d, &a[8],
	          dec_join(path, sizeof(path), pfx, "logprobs"),
	          &sp->logprobs)) != 0 ||
	        (rc = dec_get_int(d, &a[9],
	             dec_join(path, sizeof(path), pfx, "top_logprobs"),
	             &sp->top_logprobs)) != 0))
		return rc;
	for (uint32_t i = 4; i < o->via.array.size && i < 8; i++)
		if ((rc = dec_get_float(d, &a[i],
		         dec_join(path, sizeof(path), pfx, more[i - 4]),
		         mv[i - 4])) != 0)
			return rc;
	if ((rc = dec_get_float(d, &a[0],
	         dec_join(path, sizeof(path), pfx, "temperature"),
	         &sp->temp)) != 0 ||
	    (rc = dec_get_int(d, &a[1],
	         dec_join(path, sizeof(path), pfx, "top_k"), &sp->top_k)) !=
	        0 ||
	    (rc = dec_get_float(d, &a[2],
	         dec_join(path, sizeof(path), pfx, "top_p"), &sp->top_p)) !=
	        0 ||
	    (rc = dec_get_u64(d, &a[3],
	         dec_join(path, sizeof(path), pfx, "seed"), &sp->seed)) != 0)
		return rc;
	return 0;
}

static int
dec_frees(struct dec *d, const msgpack_object *o, struct medha_msg_batch *b)
{
	char path[32];
	int rc;

	if ((rc = dec_get_arr(d, o, "frees", 0, MEDHA_PROTO_MAX_ITEMS)) != 0)
		return rc;
	if ((b->frees = medha_calloc(o->via.array.size, sizeof(*b->frees))) ==
	    NULL)
		return MEDHA_ENOMEM;
	b->n_frees = o->via.array.size;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		const msgpack_object *e = &o->via.array.ptr[i];
		PROTO_PATH(path, "frees[%u]", i);
		if (e->type == MSGPACK_OBJECT_ARRAY) { /* [handle, keep] */
			if ((rc = dec_get_arr(d, e, path, 2, 2)) != 0)
				return rc;
			if (b->keeps == NULL &&
			    (b->keeps = medha_calloc(o->via.array.size,
			         sizeof(*b->keeps))) == NULL)
				return MEDHA_ENOMEM;
			if ((rc = dec_get_u64(d, &e->via.array.ptr[0], path,
			         &b->frees[i])) != 0 ||
			    (rc = dec_get_i64(d, &e->via.array.ptr[1], path,
			         &b->keeps[i])) != 0)
				return rc;
			if (b->keeps[i] < 1)
				return BAD(d, path, "a kept length below 1");
			continue;
		}
		if ((rc = dec_get_u64(d, e, path, &b->frees[i])) != 0)
			return rc;
	}
	return 0;
}

/* An item's KVP groups: [g, ...], each below MEDHA_PROTO_MAX_GROUPS. */
static int
dec_groups(struct dec *d, const msgpack_object *o, uint32_t i,
    struct medha_msg_item *it)
{
	char path[48];
	int rc, g;

	PROTO_PATH(path, "items[%u].groups", i);
	if ((rc = dec_get_arr(d, o, path, 0, MEDHA_PROTO_MAX_GROUPS)) != 0)
		return rc;
	it->n_groups = (int)o->via.array.size;
	for (uint32_t k = 0; k < o->via.array.size; k++) {
		if ((rc = dec_get_int(d, &o->via.array.ptr[k], path, &g)) != 0)
			return rc;
		if (g < 0 || g >= MEDHA_PROTO_MAX_GROUPS)
			return BAD(d, path, "a group not in [0, %d)",
			    MEDHA_PROTO_MAX_GROUPS);
		it->groups[k] = (uint8_t)g;
	}
	return 0;
}

/* An item's fork: [[src, from, to], ...] (prefix caching). */
static int
dec_forks(struct dec *d, const msgpack_object *o, uint32_t i,
    struct medha_msg_item *it)
{
	char path[64];
	int rc;

	PROTO_PATH(path, "items[%u].forks", i);
	if ((rc = dec_get_arr(d, o, path, 1, MEDHA_PROTO_MAX_ITEMS)) != 0)
		return rc;
	if ((it->forks = medha_calloc(o->via.array.size,
	         sizeof(*it->forks))) == NULL)
		return MEDHA_ENOMEM;
	it->n_forks = o->via.array.size;
	for (uint32_t k = 0; k < o->via.array.size; k++) {
		const msgpack_object *r = &o->via.array.ptr[k];
		PROTO_PATH(path, "items[%u].forks[%u]", i, k);
		if ((rc = dec_get_arr(d, r, path, 3, 3)) != 0 ||
		    (rc = dec_get_u64(d, &r->via.array.ptr[0], path,
		         &it->forks[k].src)) != 0 ||
		    (rc = dec_get_i64(d, &r->via.array.ptr[1], path,
		         &it->forks[k].from)) != 0 ||
		    (rc = dec_get_i64(d, &r->via.array.ptr[2], path,
		         &it->forks[k].to)) != 0)
			return rc;
	}
	return 0;
}

static int
dec_items(struct dec *d, const msgpack_object *o, struct medha_msg_batch *b)
{
	const msgpack_object *a;
	struct medha_msg_item *it;
	uint64_t total = 0;
	char path[64];
	uint32_t i;
	int rc;

	if ((rc = dec_get_arr(d, o, "items", 0, MEDHA_PROTO_MAX_ITEMS)) != 0)
		return rc;
	if ((b->items = medha_calloc(o->via.array.size, sizeof(*b->items))) ==
	    NULL)
		return MEDHA_ENOMEM;
	b->n_items = o->via.array.size;
	for (i = 0; i < o->via.array.size; i++) {
		it = &b->items[i];
		PROTO_PATH(path, "items[%u]", i);
		if ((rc = dec_get_arr(d, &o->via.array.ptr[i], path, 5, 7)) !=
		    0)
			return rc;
		a = o->via.array.ptr[i].via.array.ptr;
		PROTO_PATH(path, "items[%u].handle", i);
		if ((rc = dec_get_u64(d, &a[0], path, &it->handle)) != 0)
			return rc;
		PROTO_PATH(path, "items[%u].pos", i);
		if ((rc = dec_get_i64(d, &a[1], path, &it->pos)) != 0)
			return rc;
		PROTO_PATH(path, "items[%u].ids", i);
		if (a[2].type == MSGPACK_OBJECT_ARRAY &&
		    (total += a[2].via.array.size) > MEDHA_PROTO_MAX_IDS)
			return BAD(d, "items", "more than %d ids in all",
			    MEDHA_PROTO_MAX_IDS);
		if ((rc = dec_get_ids(d, &a[2], path, 1, UINT32_MAX, &it->ids,
		         &it->n_ids)) != 0)
			return rc;
		PROTO_PATH(path, "items[%u].sample", i);
		if ((rc = dec_get_bool(d, &a[3], path, &it->sample)) != 0)
			return rc;
		if (a[4].type != MSGPACK_OBJECT_NIL) {
			it->has_params = 1;
			PROTO_PATH(path, "items[%u].params", i);
			if ((rc = dec_params(d, &a[4], path, &it->params)) != 0)
				return rc;
		}
		if (o->via.array.ptr[i].via.array.size >= 6 &&
		    !(o->via.array.ptr[i].via.array.size == 7 &&
		        a[5].type == MSGPACK_OBJECT_NIL) &&
		    (rc = dec_groups(d, &a[5], i, it)) != 0)
			return rc;
		if (o->via.array.ptr[i].via.array.size == 7 &&
		    (rc = dec_forks(d, &a[6], i, it)) != 0)
			return rc;
	}
	return 0;
}

/* [gen, [url, ...], kvp_tokens] */
static int
dec_peers(struct dec *d, const msgpack_object *o, struct medha_msg_batch *b)
{
	const msgpack_object *a = o->via.array.ptr, *u;
	struct medha_msg_peers *p;
	char path[32];
	int rc;

	if ((rc = dec_get_arr(d, o, "peers", 3, 3)) != 0 ||
	    (rc = dec_get_arr(d, &a[1], "peers.urls", 1,
	         MEDHA_PROTO_MAX_PEERS)) != 0)
		return rc;
	if ((p = b->peers = medha_calloc(1, sizeof(*p))) == NULL ||
	    (p->urls = medha_calloc(a[1].via.array.size, sizeof(*p->urls))) ==
	        NULL)
		return MEDHA_ENOMEM;
	p->n = (int)a[1].via.array.size;
	if ((rc = dec_get_u64(d, &a[0], "peers.gen", &p->gen)) != 0 ||
	    (rc = dec_get_i64(d, &a[2], "peers.kvp_tokens", &p->kvp_tokens)) !=
	        0)
		return rc;
	for (int i = 0; i < p->n; i++) {
		u = &a[1].via.array.ptr[i];
		PROTO_PATH(path, "peers.urls[%d]", i);
		if ((rc = dec_get_str(d, u, path, 0, p->urls[i],
		         sizeof(p->urls[i]), 0)) != 0)
			return rc;
	}
	return 0;
}

static int
dec_result(struct dec *d, const msgpack_object *a, uint32_t nbody,
    struct medha_msg_result *r)
{
	const msgpack_object *o = &a[2], *t;
	char path[48];
	int rc;

	if ((rc = dec_get_int(d, &a[0], "worker_id", &r->worker_id)) != 0 ||
	    (rc = dec_get_u64(d, &a[1], "batch_seq", &r->seq)) != 0 ||
	    (rc = dec_get_str(d, &a[3], "error", 1, r->error, sizeof(r->error),
	         0)) != 0 ||
	    (rc = dec_get_arr(d, o, "tokens", 0, MEDHA_PROTO_MAX_ITEMS)) != 0 ||
	    (nbody > 4 &&
	        (rc = dec_experts(d, &a[4], r->experts, &r->n_experts)) != 0))
		return rc;
	if ((r->tokens = medha_calloc(o->via.array.size, sizeof(*r->tokens))) ==
	    NULL)
		return MEDHA_ENOMEM;
	r->n_tokens = o->via.array.size;
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		t = &o->via.array.ptr[i];
		PROTO_PATH(path, "tokens[%u]", i);
		if ((rc = dec_get_arr(d, t, path, 2, 4)) != 0 ||
		    (rc = dec_get_u64(d, &t->via.array.ptr[0], path,
		         &r->tokens[i].handle)) != 0)
			return rc;
		if (t->via.array.size == 3)
			return BAD(d, path, "not [handle, token(, logprob, top)]");
		if (t->via.array.size == 4) {
			if ((r->tokens[i].lp = calloc(1,
			         sizeof(*r->tokens[i].lp))) == NULL)
				return MEDHA_ENOMEM;
			if ((rc = dec_lp(d, &t->via.array.ptr[2],
			         &t->via.array.ptr[3], NULL, path,
			         r->tokens[i].lp)) !=
			    0)
				return rc;
		}
		t = &t->via.array.ptr[1];
		if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
		    t->via.u64 > INT32_MAX)
			return BAD(d, path, "not a token id");
		r->tokens[i].token = (int32_t)t->via.u64;
	}
	return 0;
}

/* Elements of each type's frame, version and type included. */
static const uint32_t frame_len[MEDHA_MSG_TYPE_COUNT] = {
    [MEDHA_MSG_SUBMIT] = 3,
    [MEDHA_MSG_ACCEPTED] = 4,
    [MEDHA_MSG_POLL] = 2,
    [MEDHA_MSG_EVENTS] = 3,
    [MEDHA_MSG_CANCEL] = 3,
    [MEDHA_MSG_OK] = 2,
    [MEDHA_MSG_STATUS] = 2,
    [MEDHA_MSG_STATUS_REPLY] = 3,
    [MEDHA_MSG_ERROR] = 4,
    [MEDHA_MSG_HELLO] = 3,
    [MEDHA_MSG_WELCOME] = 3,
    [MEDHA_MSG_READY] = 3,
    [MEDHA_MSG_RESULT] = 6,
    [MEDHA_MSG_HEARTBEAT] = 3,
    [MEDHA_MSG_BATCH] = 5,
    [MEDHA_MSG_IDLE] = 3,
};

static int
dec_body(struct dec *d, struct medha_msg *m, const msgpack_object *a,
    uint32_t nbody)
{
	int rc;

	switch (m->type) {
	case MEDHA_MSG_SUBMIT: return dec_reqspec(d, a, &m->submit);
	case MEDHA_MSG_ACCEPTED:
		if ((rc = dec_get_str(d, &a[0], "id", 0, m->accepted.id,
		         sizeof(m->accepted.id), 1)) != 0)
			return rc;
		return dec_get_u64(d, &a[1], "handle", &m->accepted.handle);
	case MEDHA_MSG_EVENTS: return dec_events(d, a, &m->events);
	case MEDHA_MSG_CANCEL: return dec_get_u64(d, a, "handle", &m->cancel);
	case MEDHA_MSG_STATUS_REPLY: return dec_status(d, a, &m->status);
	case MEDHA_MSG_ERROR:
		if ((rc = dec_get_int(d, &a[0], "code", &m->error.code)) != 0)
			return rc;
		return dec_get_str(d, &a[1], "reason", 1, m->error.reason,
		    sizeof(m->error.reason), 0);
	case MEDHA_MSG_HELLO: return dec_hello(d, a, &m->hello);
	case MEDHA_MSG_WELCOME:
	case MEDHA_MSG_READY:
	case MEDHA_MSG_HEARTBEAT:
		return dec_get_int(d, a, "worker_id", &m->worker_id);
	case MEDHA_MSG_RESULT: return dec_result(d, a, nbody, &m->result);
	case MEDHA_MSG_BATCH:
		if ((rc = dec_get_u64(d, &a[0], "batch_seq", &m->batch.seq)) !=
		        0 ||
		    (rc = dec_frees(d, &a[1], &m->batch)) != 0)
			return rc;
		if ((rc = dec_items(d, &a[2], &m->batch)) != 0)
			return rc;
		if (nbody == 4 && a[3].type != MSGPACK_OBJECT_NIL)
			return dec_peers(d, &a[3], &m->batch);
		return 0;
	case MEDHA_MSG_IDLE: return dec_frees(d, a, &m->batch);
	}
	return 0; /* POLL, OK, STATUS: no body */
}

static int
dec_frame(struct medha_msg *m, const msgpack_object *o, char *why,
    size_t whylen)
{
	struct dec d = {"frame", why, whylen};
	const msgpack_object *a = o->via.array.ptr;
	uint64_t type;
	int rc;

	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 2)
		return BAD(&d, "", "not an array [version, type, ...]");
	if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(&d, "version", "not a non-negative integer");
	if (a[0].via.u64 != MEDHA_PROTO_VERSION)
		return BAD(&d, "version", "%llu not supported (this is %d)",
		    (unsigned long long)a[0].via.u64, MEDHA_PROTO_VERSION);
	if (a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return BAD(&d, "type", "not a non-negative integer");
	type = a[1].via.u64;
	if (type == 0 || type >= MEDHA_MSG_TYPE_COUNT)
		return BAD(&d, "type", "%llu unknown",
		    (unsigned long long)type);
	m->type = (int)type;
	d.msg = medha_msg_type_name(m->type);
	if (o->via.array.size != frame_len[type] &&
	    !((type == MEDHA_MSG_BATCH || type == MEDHA_MSG_RESULT) &&
	        o->via.array.size == frame_len[type] + 1)) /* peers,
	                                                      experts */
		return BAD(&d, "", "a frame of %u elements, not %u",
		    o->via.array.size, frame_len[type]);
	if ((rc = dec_body(&d, m, a + 2, o->via.array.size - 2)) ==
	    MEDHA_ENOMEM)
		return medha_why(why, whylen, rc, "%s: out of memory", d.msg);
	return rc;
}

static int decode_once(struct medha_msg *m, const void *buf, size_t len,
    char *why, size_t whylen);

int
medha_msg_decode(struct medha_msg *m, const void *buf, size_t len, char *why,
    size_t whylen)
{
	int rc;

	proto_quiet = 1;
	rc = decode_once(m, buf, len, why, whylen);
	proto_quiet = 0;
	if (rc != 0 && rc != MEDHA_ENOMEM) /* again, for the reason */
		rc = decode_once(m, buf, len, why, whylen);
	return rc;
}

static int
decode_once(struct medha_msg *m, const void *buf, size_t len, char *why,
    size_t whylen)
{
	msgpack_unpacked up;
	msgpack_unpack_return ur;
	size_t off = 0;
	int rc;

	memset(m, 0, sizeof(*m));
	if (len > MEDHA_PROTO_MAX_FRAME)
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "frame: %zu bytes, more than %u", len,
		    MEDHA_PROTO_MAX_FRAME);
	if ((rc = proto_scan(buf, len, why, whylen)) != 0)
		return rc;
	msgpack_unpacked_init(&up);
	ur = msgpack_unpack_next(&up, buf, len, &off);
	if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
		msgpack_unpacked_destroy(&up);
		if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
			return medha_why(why, whylen, MEDHA_ENOMEM,
			    "frame: out of memory");
		return medha_why(why, whylen, MEDHA_EFORMAT,
		    "frame: not msgpack");
	}
	rc = dec_frame(m, &up.data, why, whylen);
	msgpack_unpacked_destroy(&up);
	if (rc == 0)
		rc = proto_check(m, MEDHA_EFORMAT, why, whylen);
	if (rc != 0)
		medha_msg_clear(m);
	return rc;
}
