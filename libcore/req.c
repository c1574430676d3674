/*
 * req.c: the shared request and record structs (req.h): ownership
 * helpers and the names of statuses and finish reasons, which both
 * codecs (JSON Lines and msgpack) use.
 */
#include "req.h"

#include <string.h>

const struct medha_sampler_params medha_sampling_greedy = {.temp = 0,
    .top_k = 0,
    .top_p = 1,
    .seed = 1};

void
medha_reqspec_clear(struct medha_reqspec *rs)
{
	free(rs->prompt);
	free(rs->prompt_ids);
	rs->prompt = NULL;
	rs->prompt_ids = NULL;
	for (int i = 0; i < rs->n_stop && i < MEDHA_STOP_MAX; i++) {
		free(rs->stop[i]);
		rs->stop[i] = NULL;
	}
	rs->n_stop = 0;
}

int
medha_reqspec_copy(struct medha_reqspec *dst, const struct medha_reqspec *src)
{
	*dst = *src;
	dst->prompt = NULL;
	dst->prompt_ids = NULL;
	dst->n_stop = 0;
	memset(dst->stop, 0, sizeof(dst->stop));
	if (src->prompt != NULL && (dst->prompt = strdup(src->prompt)) == NULL)
		goto nomem;
	if (src->prompt_ids != NULL) {
		dst->prompt_ids = medha_reallocarray(NULL,
		    (size_t)src->prompt_tokens, sizeof(*dst->prompt_ids));
		if (dst->prompt_ids == NULL)
			goto nomem;
		memcpy(dst->prompt_ids, src->prompt_ids,
		    (size_t)src->prompt_tokens * sizeof(*dst->prompt_ids));
	}
	for (int i = 0; i < src->n_stop && i < MEDHA_STOP_MAX; i++) {
		if ((dst->stop[i] = strdup(src->stop[i])) == NULL)
			goto nomem;
		dst->n_stop = i + 1;
	}
	return 0;
nomem:
	medha_reqspec_clear(dst);
	return MEDHA_ENOMEM;
}

static const char *status_names[MEDHA_STATUS_COUNT] = {"ok", "rejected",
    "failed", "cancelled"};

const char *
medha_status_name(int status)
{
	if (status < 0 || status >= MEDHA_STATUS_COUNT)
		return "unknown";
	return status_names[status];
}

int
medha_status_parse(const char *name)
{
	for (int i = 0; i < MEDHA_STATUS_COUNT; i++)
		if (strcmp(name, status_names[i]) == 0)
			return i;
	return -1;
}

static const char *finish_names[MEDHA_FINISH_COUNT] = {"", "length", "stop"};

const char *
medha_finish_name(int finish)
{
	if (finish < 0 || finish >= MEDHA_FINISH_COUNT)
		return "";
	return finish_names[finish];
}

int
medha_finish_parse(const char *name)
{
	for (int i = 1; i < MEDHA_FINISH_COUNT; i++)
		if (strcmp(name, finish_names[i]) == 0)
			return i;
	return -1;
}

void
medha_record_clear(struct medha_record *rec)
{
	free(rec->token_ids);
	free(rec->text);
	rec->token_ids = NULL;
	rec->text = NULL;
	rec->n_token_ids = 0;
}
