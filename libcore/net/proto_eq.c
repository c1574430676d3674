/*
 * proto_eq.c: equality of decoded messages (medha_msg_equal), field by
 * field, for the codec's round-trip tests and its fuzzer: what the
 * decoder makes of what the encoder wrote must equal what it was given.
 */
#include "net/proto_impl.h"

#include <string.h>

static int
ids_eq(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
	return na == nb &&
	    (na == 0 || memcmp(a, b, (size_t)na * sizeof(*a)) == 0);
}

/* Two C strings, either of which may be NULL. */
static int
str_eq(const char *a, const char *b)
{
	return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

static int
sampling_eq(const struct medha_sampler_params *a,
    const struct medha_sampler_params *b)
{
	return a->temp == b->temp && a->top_k == b->top_k &&
	    a->top_p == b->top_p && a->seed == b->seed &&
	    a->presence_penalty == b->presence_penalty &&
	    a->frequency_penalty == b->frequency_penalty &&
	    a->repetition_penalty == b->repetition_penalty &&
	    a->min_p == b->min_p && a->logprobs == b->logprobs &&
	    a->top_logprobs == b->top_logprobs && a->skip == b->skip &&
	    a->min_tokens == b->min_tokens && a->n_ban == b->n_ban &&
	    (a->n_ban <= 0 ||
	        memcmp(a->ban, b->ban, (size_t)a->n_ban * sizeof(*a->ban)) ==
	            0);
}

static int
reqspec_eq(const struct medha_reqspec *a, const struct medha_reqspec *b)
{
	if (strcmp(a->id, b->id) != 0 || a->arrival != b->arrival ||
	    a->prompt_tokens != b->prompt_tokens ||
	    a->max_tokens != b->max_tokens || a->ttft_slo != b->ttft_slo ||
	    a->tpot_slo != b->tpot_slo || !str_eq(a->prompt, b->prompt) ||
	    (a->prompt_ids == NULL) != (b->prompt_ids == NULL) ||
	    (a->prompt_ids != NULL &&
	        !ids_eq(a->prompt_ids, a->prompt_tokens, b->prompt_ids,
	            b->prompt_tokens)) ||
	    !sampling_eq(&a->sampling, &b->sampling) ||
	    !a->ignore_eos != !b->ignore_eos || !a->no_stream != !b->no_stream ||
	    a->cache_salt != b->cache_salt ||
	    a->n_stop != b->n_stop || a->n_stop_ids != b->n_stop_ids ||
	    (a->n_stop_ids > 0 &&
	        memcmp(a->stop_ids, b->stop_ids,
	            (size_t)a->n_stop_ids * sizeof(*a->stop_ids)) != 0))
		return 0;
	for (int i = 0; i < a->n_stop; i++)
		if (!str_eq(a->stop[i], b->stop[i]))
			return 0;
	return 1;
}

/* n log-probabilities of a and b the same (both NULL too) */
static int
lps_eq(const struct medha_token_lp *a, const struct medha_token_lp *b,
    int64_t n)
{
	if (a == NULL || b == NULL)
		return a == b;
	for (int64_t i = 0; i < n; i++) {
		if (a[i].logprob != b[i].logprob || a[i].ntop != b[i].ntop)
			return 0;
		for (int k = 0; k < a[i].ntop; k++)
			if (a[i].top[k].id != b[i].top[k].id ||
			    a[i].top[k].logprob != b[i].top[k].logprob)
				return 0;
		if (a[i].nnamed != b[i].nnamed)
			return 0;
		for (int k = 0; k < a[i].nnamed; k++) {
			size_t na, nb;
			const char *pa = medha_token_lp_bytes(&a[i], k, &na),
			           *pb = medha_token_lp_bytes(&b[i], k, &nb);
			if (na != nb || memcmp(pa, pb, na) != 0)
				return 0;
		}
	}
	return 1;
}

static int
tbt_eq(const struct medha_tbt *a, const struct medha_tbt *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (a->bin[i].bucket != b->bin[i].bucket ||
		    a->bin[i].count != b->bin[i].count)
			return 0;
	return 1;
}

static int
record_eq(const struct medha_record *a, const struct medha_record *b)
{
	return strcmp(a->id, b->id) == 0 && a->arrival == b->arrival &&
	    a->first_token == b->first_token && a->finish == b->finish &&
	    a->prompt_tokens == b->prompt_tokens &&
	    a->output_tokens == b->output_tokens && a->ttft == b->ttft &&
	    a->tpot_mean == b->tpot_mean && a->tpot_max == b->tpot_max &&
	    a->ttft_slo == b->ttft_slo && a->tpot_slo == b->tpot_slo &&
	    a->status == b->status && a->finish_reason == b->finish_reason &&
	    strcmp(a->reason, b->reason) == 0 &&
	    (a->token_ids == NULL) == (b->token_ids == NULL) &&
	    ids_eq(a->token_ids, a->n_token_ids, b->token_ids,
	        b->n_token_ids) &&
	    str_eq(a->text, b->text) && a->prefill_alone == b->prefill_alone &&
	    a->cached_tokens == b->cached_tokens &&
	    a->preemptions == b->preemptions && a->code == b->code &&
	    a->queue_time == b->queue_time &&
	    tbt_eq(&a->tbt, &b->tbt) &&
	    lps_eq(a->token_ids != NULL ? a->logprobs : NULL,
	        b->token_ids != NULL ? b->logprobs : NULL, a->n_token_ids);
}

static int
event_eq(const struct medha_msg_event *a, const struct medha_msg_event *b)
{
	if (a->kind != b->kind || a->handle != b->handle)
		return 0;
	if (a->kind == MEDHA_EVENT_RECORD)
		return record_eq(a->record, b->record);
	return ids_eq(a->ids, a->n_ids, b->ids, b->n_ids) &&
	    a->text_len == b->text_len &&
	    (a->text_len == 0 || memcmp(a->text, b->text, a->text_len) == 0) &&
	    lps_eq(a->lps, b->lps, a->n_ids);
}

static int
item_eq(const struct medha_msg_item *a, const struct medha_msg_item *b)
{
	return a->handle == b->handle && a->pos == b->pos &&
	    ids_eq(a->ids, a->n_ids, b->ids, b->n_ids) &&
	    !a->sample == !b->sample && !a->has_params == !b->has_params &&
	    (!a->has_params || sampling_eq(&a->params, &b->params)) &&
	    a->n_groups == b->n_groups &&
	    memcmp(a->groups, b->groups, (size_t)a->n_groups) == 0 &&
	    a->n_forks == b->n_forks &&
	    (a->n_forks == 0 ||
	        memcmp(a->forks, b->forks,
	            (size_t)a->n_forks * sizeof(*a->forks)) == 0);
}

static int
peers_eq(const struct medha_msg_peers *a, const struct medha_msg_peers *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	if (a->gen != b->gen || a->n != b->n || a->kvp_tokens != b->kvp_tokens)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (strcmp(a->urls[i], b->urls[i]) != 0)
			return 0;
	return 1;
}

static int
batch_eq(const struct medha_msg_batch *a, const struct medha_msg_batch *b)
{
	if (a->seq != b->seq || a->n_frees != b->n_frees ||
	    a->n_items != b->n_items ||
	    (a->n_frees > 0 &&
	        memcmp(a->frees, b->frees,
	            (size_t)a->n_frees * sizeof(*a->frees)) != 0))
		return 0;
	for (int64_t i = 0; i < a->n_frees; i++)
		if ((a->keeps != NULL ? a->keeps[i] : 0) !=
		    (b->keeps != NULL ? b->keeps[i] : 0))
			return 0;
	for (int64_t i = 0; i < a->n_items; i++)
		if (!item_eq(&a->items[i], &b->items[i]))
			return 0;
	return peers_eq(a->peers, b->peers);
}

int
medha_msg_equal(const struct medha_msg *a, const struct medha_msg *b)
{
	const struct medha_msg_status *s = &a->status, *t = &b->status;
	const struct medha_msg_hello *h = &a->hello, *k = &b->hello;

	if (a->type != b->type)
		return 0;
	switch (a->type) {
	case MEDHA_MSG_SUBMIT: return reqspec_eq(&a->submit, &b->submit);
	case MEDHA_MSG_ACCEPTED:
		return strcmp(a->accepted.id, b->accepted.id) == 0 &&
		    a->accepted.handle == b->accepted.handle;
	case MEDHA_MSG_EVENTS:
		if (a->events.n != b->events.n)
			return 0;
		for (int64_t i = 0; i < a->events.n; i++)
			if (!event_eq(&a->events.ev[i], &b->events.ev[i]))
				return 0;
		return 1;
	case MEDHA_MSG_CANCEL: return a->cancel == b->cancel;
	case MEDHA_MSG_STATUS_REPLY:
		return s->workers == t->workers &&
		    s->workers_wanted == t->workers_wanted &&
		    !s->ready == !t->ready && s->pending == t->pending &&
		    s->queue == t->queue && s->kv_blocks == t->kv_blocks &&
		    s->kv_used == t->kv_used &&
		    s->block_size == t->block_size &&
		    s->prefill == t->prefill && s->work == t->work &&
		    s->evicted == t->evicted && s->progress == t->progress &&
		    s->n_experts == t->n_experts &&
		    memcmp(s->experts, t->experts,
		        sizeof(int64_t) * (size_t)s->n_experts) == 0 &&
		    strcmp(s->model, t->model) == 0 &&
		    strcmp(s->backend, t->backend) == 0;
	case MEDHA_MSG_ERROR:
		return a->error.code == b->error.code &&
		    strcmp(a->error.reason, b->error.reason) == 0;
	case MEDHA_MSG_HELLO:
		return strcmp(h->backend, k->backend) == 0 &&
		    strcmp(h->model, k->model) == 0 &&
		    strcmp(h->gpu, k->gpu) == 0 && h->tp == k->tp &&
		    h->spp == k->spp && h->kvp == k->kvp &&
		    h->rank_tp == k->rank_tp && h->rank_spp == k->rank_spp &&
		    h->rank_kvp == k->rank_kvp && h->layer_lo == k->layer_lo &&
		    h->layer_hi == k->layer_hi && h->caps == k->caps &&
		    h->block_size == k->block_size &&
		    h->n_blocks == k->n_blocks && h->max_seqs == k->max_seqs &&
		    h->vocab == k->vocab && h->dim == k->dim &&
		    h->pid == k->pid && strcmp(h->peer, k->peer) == 0 &&
		    strcmp(h->fingerprint, k->fingerprint) == 0;
	case MEDHA_MSG_WELCOME:
	case MEDHA_MSG_READY:
	case MEDHA_MSG_HEARTBEAT: return a->worker_id == b->worker_id;
	case MEDHA_MSG_RESULT:
		if (a->result.worker_id != b->result.worker_id ||
		    a->result.seq != b->result.seq ||
		    a->result.n_tokens != b->result.n_tokens ||
		    a->result.n_experts != b->result.n_experts ||
		    memcmp(a->result.experts, b->result.experts,
		        sizeof(int64_t) * (size_t)a->result.n_experts) != 0 ||
		    strcmp(a->result.error, b->result.error) != 0)
			return 0;
		for (int64_t i = 0; i < a->result.n_tokens; i++)
			if (a->result.tokens[i].handle !=
			        b->result.tokens[i].handle ||
			    a->result.tokens[i].token !=
			        b->result.tokens[i].token ||
			    !lps_eq(a->result.tokens[i].lp,
			        b->result.tokens[i].lp, 1))
				return 0;
		return 1;
	case MEDHA_MSG_BATCH:
	case MEDHA_MSG_IDLE: return batch_eq(&a->batch, &b->batch);
	}
	return 1; /* POLL, OK, STATUS */
}
