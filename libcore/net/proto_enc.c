/*
 * proto_enc.c: the wire protocol's encoder (net/proto.h). A message is
 * first put through proto_check, the checks the decoder ends with, then
 * written with msgpack-c's packer into a growing buffer; the packer's
 * failures (only allocation) are kept in a sticky flag and looked at
 * once, at the end. Doubles go out as float64, so they come back as they
 * were; text goes out as a msgpack string when it is UTF-8 and as bytes
 * (bin) when it is not; optional request keys are written only when they
 * differ from their defaults.
 */
#include "net/proto_impl.h"

#include <msgpack.h>
#include <string.h>

struct enc {
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int err; /* sticky: a packer call failed */
};

static void
put_u64(struct enc *e, uint64_t v)
{
	e->err |= msgpack_pack_uint64(&e->pk, v) != 0;
}

static void
put_i64(struct enc *e, int64_t v)
{
	e->err |= msgpack_pack_int64(&e->pk, v) != 0;
}

static void
put_f64(struct enc *e, double v)
{
	e->err |= msgpack_pack_double(&e->pk, v) != 0;
}

static void
put_bool(struct enc *e, int v)
{
	e->err |=
	    (v ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk)) != 0;
}

static void
put_arr(struct enc *e, size_t n)
{
	e->err |= msgpack_pack_array(&e->pk, n) != 0;
}

static void
put_map(struct enc *e, size_t n)
{
	e->err |= msgpack_pack_map(&e->pk, n) != 0;
}

/* n bytes as a msgpack string. */
static void
put_str(struct enc *e, const char *p, size_t n)
{
	e->err |= msgpack_pack_str(&e->pk, n) != 0;
	e->err |= msgpack_pack_str_body(&e->pk, p, n) != 0;
}

static void
put_name(struct enc *e, const char *s)
{
	put_str(e, s, strlen(s));
}

/* Bytes, as msgpack's bin. */
static void
put_bin(struct enc *e, const char *p, size_t n)
{
	e->err |= msgpack_pack_bin(&e->pk, n) != 0;
	e->err |= msgpack_pack_bin_body(&e->pk, p, n) != 0;
}

/* Text: a string if it is UTF-8, else bytes. */
static void
put_text(struct enc *e, const char *p, size_t n)
{
	if (proto_utf8_valid(p, n)) {
		put_str(e, p, n);
		return;
	}
	put_bin(e, p, n);
}

static void
put_ids(struct enc *e, const int32_t *ids, int64_t n)
{
	put_arr(e, (size_t)n);
	for (int64_t i = 0; i < n; i++)
		put_i64(e, ids[i]);
}

/* ---- requests and records ---- */

/*
 * A drawn token's log-probabilities: [logprob, [[id, logprob], ...]],
 * with the tokens' names where lp has them: [logprob, [[id, logprob,
 * bytes], ...], bytes].
 */
static void
put_lp(struct enc *e, const struct medha_token_lp *lp)
{
	const char *b;
	size_t n;

	put_arr(e, 2 + (lp->nnamed > 0));
	put_f64(e, lp->logprob);
	put_arr(e, (size_t)lp->ntop);
	for (int i = 0; i < lp->ntop; i++) {
		b = medha_token_lp_bytes(lp, 1 + i, &n);
		put_arr(e, 2 + (b != NULL));
		put_i64(e, lp->top[i].id);
		put_f64(e, lp->top[i].logprob);
		if (b != NULL)
			put_bin(e, b, n);
	}
	if ((b = medha_token_lp_bytes(lp, 0, &n)) != NULL)
		put_bin(e, b, n);
}

static void
put_lps(struct enc *e, const struct medha_token_lp *lps, int64_t n)
{
	put_arr(e, (size_t)n);
	for (int64_t i = 0; i < n; i++)
		put_lp(e, &lps[i]);
}

static void
enc_reqspec(struct enc *e, const struct medha_reqspec *rs)
{
	const struct medha_sampler_params *sp = &rs->sampling,
	                                  *g = &medha_sampling_greedy;
	int with_pt = rs->prompt_ids == NULL && rs->prompt_tokens > 0;
	size_t n = 3; /* id, arrival, max_tokens */

	n += (rs->prompt != NULL) + (rs->prompt_ids != NULL) + with_pt;
	n += (sp->temp != g->temp) + (sp->top_k != g->top_k) +
	    (sp->top_p != g->top_p) + (sp->seed != g->seed);
	n += (sp->presence_penalty != 0) + (sp->frequency_penalty != 0) +
	    (sp->repetition_penalty != 0) + (sp->min_p != 0);
	n += (sp->logprobs != 0) + (sp->top_logprobs != 0);
	n += (rs->ignore_eos != 0) + (rs->n_stop > 0) + (rs->no_stream != 0);
	n += rs->n_stop_ids > 0;
	n += sp->min_tokens > 0;
	n += rs->cache_salt != 0;
	n += (rs->ttft_slo != 0) + (rs->tpot_slo != 0);
	put_map(e, n);
	put_name(e, "id");
	put_name(e, rs->id);
	put_name(e, "arrival");
	put_f64(e, rs->arrival);
	if (rs->prompt != NULL) {
		put_name(e, "prompt");
		put_text(e, rs->prompt, strlen(rs->prompt));
	}
	if (rs->prompt_ids != NULL) {
		put_name(e, "prompt_ids");
		put_ids(e, rs->prompt_ids, rs->prompt_tokens);
	}
	if (with_pt) {
		put_name(e, "prompt_tokens");
		put_i64(e, rs->prompt_tokens);
	}
	put_name(e, "max_tokens");
	put_i64(e, rs->max_tokens);
	if (sp->temp != g->temp) {
		put_name(e, "temperature");
		put_f64(e, sp->temp);
	}
	if (sp->top_k != g->top_k) {
		put_name(e, "top_k");
		put_i64(e, sp->top_k);
	}
	if (sp->top_p != g->top_p) {
		put_name(e, "top_p");
		put_f64(e, sp->top_p);
	}
	if (sp->seed != g->seed) {
		put_name(e, "seed");
		put_u64(e, sp->seed);
	}
	{
		static const char *const names[] = {"presence_penalty",
		    "frequency_penalty", "repetition_penalty", "min_p"};
		const float v[] = {sp->presence_penalty, sp->frequency_penalty,
		    sp->repetition_penalty, sp->min_p};
		for (int i = 0; i < 4; i++)
			if (v[i] != 0) {
				put_name(e, names[i]);
				put_f64(e, v[i]);
			}
	}
	if (sp->logprobs) {
		put_name(e, "logprobs");
		put_bool(e, 1);
	}
	if (sp->top_logprobs != 0) {
		put_name(e, "top_logprobs");
		put_i64(e, sp->top_logprobs);
	}
	if (rs->ignore_eos) {
		put_name(e, "ignore_eos");
		put_bool(e, 1);
	}
	if (rs->no_stream) {
		put_name(e, "stream");
		put_bool(e, 0);
	}
	if (rs->n_stop > 0) {
		put_name(e, "stop");
		put_arr(e, (size_t)rs->n_stop);
		for (int i = 0; i < rs->n_stop; i++)
			put_text(e, rs->stop[i], strlen(rs->stop[i]));
	}
	if (rs->n_stop_ids > 0) {
		put_name(e, "stop_token_ids");
		put_ids(e, rs->stop_ids, rs->n_stop_ids);
	}
	if (sp->min_tokens > 0) {
		put_name(e, "min_tokens");
		put_i64(e, sp->min_tokens);
	}
	if (rs->cache_salt != 0) {
		put_name(e, "cache_salt");
		put_u64(e, rs->cache_salt);
	}
	if (rs->ttft_slo != 0) {
		put_name(e, "ttft_slo");
		put_f64(e, rs->ttft_slo);
	}
	if (rs->tpot_slo != 0) {
		put_name(e, "tpot_slo");
		put_f64(e, rs->tpot_slo);
	}
}

static void
enc_record(struct enc *e, const struct medha_record *r)
{
	const double t[] = {r->arrival, r->first_token, r->finish, r->ttft,
	    r->tpot_mean, r->tpot_max, r->ttft_slo, r->tpot_slo};
	static const char *tn[] = {"arrival", "first_token", "finish", "ttft",
	    "tpot_mean", "tpot_max", "ttft_slo", "tpot_slo"};
	size_t i, n = 12;

	n += (r->finish_reason != MEDHA_FINISH_NONE) + (r->reason[0] != '\0');
	n += (r->token_ids != NULL) + (r->text != NULL);
	n += r->token_ids != NULL && r->logprobs != NULL;
	n += (r->prefill_alone > 0) + (r->tbt.n > 0) + (r->cached_tokens > 0) +
	    (r->queue_time > 0) + (r->preemptions > 0) + (r->code != 0);
	put_map(e, n);
	put_name(e, "id");
	put_name(e, r->id);
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		put_name(e, tn[i]);
		put_f64(e, t[i]);
	}
	put_name(e, "prompt_tokens");
	put_i64(e, r->prompt_tokens);
	put_name(e, "output_tokens");
	put_i64(e, r->output_tokens);
	put_name(e, "status");
	put_name(e, medha_status_name(r->status));
	if (r->finish_reason != MEDHA_FINISH_NONE) {
		put_name(e, "finish_reason");
		put_name(e, medha_finish_name(r->finish_reason));
	}
	if (r->reason[0] != '\0') {
		put_name(e, "reason");
		put_text(e, r->reason, strlen(r->reason));
	}
	if (r->token_ids != NULL && r->logprobs != NULL) {
		put_name(e, "logprobs");
		put_lps(e, r->logprobs, r->n_token_ids);
	}
	if (r->token_ids != NULL) {
		put_name(e, "token_ids");
		put_ids(e, r->token_ids, r->n_token_ids);
	}
	if (r->text != NULL) {
		put_name(e, "text");
		put_text(e, r->text, strlen(r->text));
	}
	if (r->queue_time > 0) {
		put_name(e, "queue_time");
		put_f64(e, r->queue_time);
	}
	if (r->prefill_alone > 0) {
		put_name(e, "prefill_alone");
		put_f64(e, r->prefill_alone);
	}
	if (r->cached_tokens > 0) {
		put_name(e, "cached_tokens");
		put_i64(e, r->cached_tokens);
	}
	if (r->preemptions > 0) {
		put_name(e, "preemptions");
		put_i64(e, r->preemptions);
	}
	if (r->code != 0) {
		put_name(e, "code");
		put_i64(e, r->code);
	}
	if (r->tbt.n > 0) {
		put_name(e, "tbt");
		put_arr(e, (size_t)r->tbt.n);
		for (int i = 0; i < r->tbt.n; i++) {
			put_arr(e, 2);
			put_i64(e, r->tbt.bin[i].bucket);
			put_i64(e, r->tbt.bin[i].count);
		}
	}
}

/* ---- the messages ---- */

static void
enc_events(struct enc *e, const struct medha_msg_events *ev)
{
	put_arr(e, (size_t)ev->n);
	for (int64_t i = 0; i < ev->n; i++) {
		const struct medha_msg_event *x = &ev->ev[i];

		put_arr(e, x->kind == MEDHA_EVENT_TOKENS ? 4 + (x->lps != NULL)
		                                         : 3);
		put_i64(e, x->kind);
		put_u64(e, x->handle);
		if (x->kind == MEDHA_EVENT_RECORD) {
			enc_record(e, x->record);
			continue;
		}
		put_ids(e, x->ids, x->n_ids);
		put_text(e, x->text != NULL ? x->text : "", x->text_len);
		if (x->lps != NULL)
			put_lps(e, x->lps, x->n_ids);
	}
}

static void
enc_status(struct enc *e, const struct medha_msg_status *s)
{
	const int64_t n[] = {s->workers, s->workers_wanted, s->pending,
	    s->queue, s->kv_blocks, s->kv_used, s->block_size, s->prefill,
	    s->evicted, s->progress};
	static const char *nn[] = {"workers", "workers_wanted", "pending",
	    "queue", "kv_blocks", "kv_used", "block_size", "prefill", "evicted",
	    "progress"};

	put_map(e, 14 + (s->n_experts > 0));
	if (s->n_experts > 0) {
		put_name(e, "experts");
		put_arr(e, (size_t)s->n_experts);
		for (int i = 0; i < s->n_experts; i++)
			put_i64(e, s->experts[i]);
	}
	for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
		put_name(e, nn[i]);
		put_i64(e, n[i]);
	}
	put_name(e, "work");
	put_f64(e, s->work);
	put_name(e, "ready");
	put_bool(e, s->ready);
	put_name(e, "model");
	put_name(e, s->model);
	put_name(e, "backend");
	put_name(e, s->backend);
}

static void
enc_hello(struct enc *e, const struct medha_msg_hello *h)
{
	const int n[] = {h->tp, h->spp, h->kvp, h->rank_tp, h->rank_spp,
	    h->rank_kvp, h->block_size, h->n_blocks, h->max_seqs, h->vocab,
	    h->dim, h->pid};
	static const char *nn[] = {"tp", "spp", "kvp", "rank_tp", "rank_spp",
	    "rank_kvp", "block_size", "n_blocks", "max_seqs", "vocab", "dim",
	    "pid"};

	put_map(e, 16 + (h->peer[0] != '\0') + (h->fingerprint[0] != '\0') +
	        (h->caps != 0));
	if (h->caps != 0) {
		put_name(e, "caps");
		put_i64(e, h->caps);
	}
	if (h->peer[0] != '\0') {
		put_name(e, "peer");
		put_name(e, h->peer);
	}
	if (h->fingerprint[0] != '\0') {
		put_name(e, "fingerprint");
		put_name(e, h->fingerprint);
	}
	put_name(e, "backend");
	put_name(e, h->backend);
	put_name(e, "model");
	put_name(e, h->model);
	put_name(e, "gpu");
	put_name(e, h->gpu);
	for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
		put_name(e, nn[i]);
		put_i64(e, n[i]);
	}
	put_name(e, "layers");
	put_arr(e, 2);
	put_i64(e, h->layer_lo);
	put_i64(e, h->layer_hi);
}

static void
enc_frees(struct enc *e, const struct medha_msg_batch *b)
{
	put_arr(e, (size_t)b->n_frees);
	for (int64_t i = 0; i < b->n_frees; i++) {
		int64_t keep = b->keeps != NULL ? b->keeps[i] : 0;
		if (keep > 0) { /* a sequence trimmed, not freed */
			put_arr(e, 2);
			put_u64(e, b->frees[i]);
			put_i64(e, keep);
		} else {
			put_u64(e, b->frees[i]);
		}
	}
}

static void
enc_batch(struct enc *e, const struct medha_msg_batch *b)
{
	put_u64(e, b->seq);
	enc_frees(e, b);
	put_arr(e, (size_t)b->n_items);
	for (int64_t i = 0; i < b->n_items; i++) {
		const struct medha_msg_item *it = &b->items[i];

		put_arr(e, it->n_forks > 0 ? 7 : 5 + (it->n_groups > 0));
		put_u64(e, it->handle);
		put_i64(e, it->pos);
		put_ids(e, it->ids, it->n_ids);
		put_bool(e, it->sample);
		if (!it->has_params) {
			e->err |= msgpack_pack_nil(&e->pk) != 0;
		} else {
			const struct medha_sampler_params *sp = &it->params;
			/* the penalties and min-p only where set (4 otherwise),
			   the logprobs where asked for or before what follows
			   them (10), the generator's skip (11), min_tokens's
			   (13, after a skip of 0 or more) */
			int mt = sp->min_tokens > 0;
			int sk = mt || sp->skip != 0;
			int lp = sk || sp->logprobs || sp->top_logprobs;
			int more = lp || sp->presence_penalty != 0 ||
			    sp->frequency_penalty != 0 ||
			    sp->repetition_penalty != 0 || sp->min_p != 0;
			put_arr(e, mt ? 13 : sk ? 11 : lp ? 10 : more ? 8 : 4);
			put_f64(e, sp->temp);
			put_i64(e, sp->top_k);
			put_f64(e, sp->top_p);
			put_u64(e, sp->seed);
			if (more) {
				put_f64(e, sp->presence_penalty);
				put_f64(e, sp->frequency_penalty);
				put_f64(e, sp->repetition_penalty);
				put_f64(e, sp->min_p);
			}
			if (lp) {
				put_bool(e, sp->logprobs);
				put_i64(e, sp->top_logprobs);
			}
			if (sk)
				put_u64(e, sp->skip);
			if (mt) {
				put_i64(e, sp->min_tokens);
				put_ids(e, sp->ban, sp->n_ban);
			}
		}
		if (it->n_groups > 0) {
			put_arr(e, (size_t)it->n_groups);
			for (int g = 0; g < it->n_groups; g++)
				put_i64(e, it->groups[g]);
		} else if (it->n_forks > 0) {
			e->err |= msgpack_pack_nil(&e->pk) != 0;
		}
		if (it->n_forks > 0) {
			put_arr(e, (size_t)it->n_forks);
			for (int64_t k = 0; k < it->n_forks; k++) {
				put_arr(e, 3);
				put_u64(e, it->forks[k].src);
				put_i64(e, it->forks[k].from);
				put_i64(e, it->forks[k].to);
			}
		}
	}
	if (b->peers != NULL) {
		put_arr(e, 3);
		put_u64(e, b->peers->gen);
		put_arr(e, (size_t)b->peers->n);
		for (int i = 0; i < b->peers->n; i++)
			put_name(e, b->peers->urls[i]);
		put_i64(e, b->peers->kvp_tokens);
	}
}

static void
enc_result(struct enc *e, const struct medha_msg_result *r)
{
	put_i64(e, r->worker_id);
	put_u64(e, r->seq);
	put_arr(e, (size_t)r->n_tokens);
	for (int64_t i = 0; i < r->n_tokens; i++) {
		const struct medha_token_lp *lp = r->tokens[i].lp;
		put_arr(e, lp != NULL ? 4 : 2);
		put_u64(e, r->tokens[i].handle);
		put_i64(e, r->tokens[i].token);
		if (lp != NULL) { /* [handle, token, logprob, top] */
			put_f64(e, lp->logprob);
			put_arr(e, (size_t)lp->ntop);
			for (int k = 0; k < lp->ntop; k++) {
				put_arr(e, 2);
				put_i64(e, lp->top[k].id);
				put_f64(e, lp->top[k].logprob);
			}
		}
	}
	put_text(e, r->error, strlen(r->error));
	if (r->n_experts > 0) {
		put_arr(e, (size_t)r->n_experts);
		for (int i = 0; i < r->n_experts; i++)
			put_i64(e, r->experts[i]);
	}
}

/* Elements after [version, type] of each type's frame. */
static const uint8_t body_len[MEDHA_MSG_TYPE_COUNT] = {
    [MEDHA_MSG_SUBMIT] = 1,
    [MEDHA_MSG_ACCEPTED] = 2,
    [MEDHA_MSG_EVENTS] = 1,
    [MEDHA_MSG_CANCEL] = 1,
    [MEDHA_MSG_STATUS_REPLY] = 1,
    [MEDHA_MSG_ERROR] = 2,
    [MEDHA_MSG_HELLO] = 1,
    [MEDHA_MSG_WELCOME] = 1,
    [MEDHA_MSG_READY] = 1,
    [MEDHA_MSG_RESULT] = 4,
    [MEDHA_MSG_HEARTBEAT] = 1,
    [MEDHA_MSG_BATCH] = 3,
    [MEDHA_MSG_IDLE] = 1,
};

static void
enc_body(struct enc *e, const struct medha_msg *m)
{
	switch (m->type) {
	case MEDHA_MSG_SUBMIT: enc_reqspec(e, &m->submit); break;
	case MEDHA_MSG_ACCEPTED:
		put_name(e, m->accepted.id);
		put_u64(e, m->accepted.handle);
		break;
	case MEDHA_MSG_EVENTS: enc_events(e, &m->events); break;
	case MEDHA_MSG_CANCEL: put_u64(e, m->cancel); break;
	case MEDHA_MSG_STATUS_REPLY: enc_status(e, &m->status); break;
	case MEDHA_MSG_ERROR:
		put_i64(e, m->error.code);
		put_text(e, m->error.reason, strlen(m->error.reason));
		break;
	case MEDHA_MSG_HELLO: enc_hello(e, &m->hello); break;
	case MEDHA_MSG_WELCOME:
	case MEDHA_MSG_READY:
	case MEDHA_MSG_HEARTBEAT: put_i64(e, m->worker_id); break;
	case MEDHA_MSG_RESULT: enc_result(e, &m->result); break;
	case MEDHA_MSG_BATCH: enc_batch(e, &m->batch); break;
	case MEDHA_MSG_IDLE: enc_frees(e, &m->batch); break;
	}
}

int
medha_msg_encode(const struct medha_msg *m, void **buf, size_t *len, char *why,
    size_t whylen)
{
	struct enc e;
	int rc;

	*buf = NULL;
	*len = 0;
	if ((rc = proto_check(m, MEDHA_EINVAL, why, whylen)) != 0)
		return rc;
	memset(&e, 0, sizeof(e));
	msgpack_sbuffer_init(&e.sb);
	msgpack_packer_init(&e.pk, &e.sb, msgpack_sbuffer_write);
	put_arr(&e, 2 + (size_t)body_len[m->type] +
	    (m->type == MEDHA_MSG_BATCH && m->batch.peers != NULL) +
	    (m->type == MEDHA_MSG_RESULT && m->result.n_experts > 0));
	put_i64(&e, MEDHA_PROTO_VERSION);
	put_i64(&e, m->type);
	enc_body(&e, m);
	if (e.err) {
		msgpack_sbuffer_destroy(&e.sb);
		return medha_why(why, whylen, MEDHA_ENOMEM, "%s: out of memory",
		    medha_msg_type_name(m->type));
	}
	if (e.sb.size > MEDHA_PROTO_MAX_FRAME) {
		rc = medha_why(why, whylen, MEDHA_EINVAL,
		    "%s: %zu bytes, more than %u", medha_msg_type_name(m->type),
		    e.sb.size, MEDHA_PROTO_MAX_FRAME);
		msgpack_sbuffer_destroy(&e.sb);
		return rc;
	}
	*len = e.sb.size;
	*buf = msgpack_sbuffer_release(&e.sb);
	return 0;
}
