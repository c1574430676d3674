/*
 * report_cache.c: "medha-trace report"'s prefix cache lines: per class,
 * the prompt tokens, those whose KV came from the prefix cache
 * (records' cached_tokens), their share, and the hit rate (requests
 * with a cached token or more, over the class's requests). Printed
 * only when some record of the input says cached_tokens.
 */
#include "medha-trace.h"

#include <jansson.h>

#define NCACHE 3 /* report.c's classes: all, short, long */

static struct {
	int64_t requests, prompt, cached, hits;
} cc[NCACHE];
static int seen; /* a record said cached_tokens */

void
report_cache_add(int cls, const struct medha_record *rec)
{
	if (cls < 0 || cls >= NCACHE)
		return;
	cc[cls].requests++;
	cc[cls].prompt += rec->prompt_tokens;
	cc[cls].cached += rec->cached_tokens;
	cc[cls].hits += rec->cached_tokens > 0;
	seen |= rec->cached_tokens > 0;
}

static double
share(int64_t a, int64_t b)
{
	return b > 0 ? (double)a / (double)b : 0;
}

void
report_cache_print(const char *const *names)
{
	if (!seen)
		return;
	printf("\n%-5s %13s %13s %7s %9s %8s\n", "class", "prompt_tokens",
	    "cached_tokens", "cached", "hits", "hit_rate");
	for (int i = 0; i < NCACHE; i++)
		if (cc[i].requests > 0) /* as the main table: no empty class */
			printf("%-5s %13lld %13lld %6.1f%% %9lld %7.1f%%\n", names[i],
			    (long long)cc[i].prompt, (long long)cc[i].cached,
			    100 * share(cc[i].cached, cc[i].prompt),
			    (long long)cc[i].hits,
			    100 * share(cc[i].hits, cc[i].requests));
}

void
report_cache_json(void *root, const char *const *names)
{
	if (!seen)
		return;
	for (int i = 0; i < NCACHE; i++) {
		json_t *o = json_object_get(root, names[i]), *p;
		if (o == NULL)
			continue;
		p = json_object();
		json_object_set_new(p, "prompt_tokens",
		    json_integer(cc[i].prompt));
		json_object_set_new(p, "cached_tokens",
		    json_integer(cc[i].cached));
		json_object_set_new(p, "hits", json_integer(cc[i].hits));
		json_object_set_new(p, "hit_rate",
		    json_real(share(cc[i].hits, cc[i].requests)));
		json_object_set_new(o, "prefix_cache", p);
	}
}
