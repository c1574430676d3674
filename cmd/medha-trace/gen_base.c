/*
 * gen_base.c: "medha-trace gen --base": a real trace's requests as the
 * short ones, long requests mixed in at Poisson times over its span.
 */
#include "gen.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * --base: the base trace's requests, with long ones mixed in at Poisson
 * times over its span so that they are long_frac of the whole, all in
 * arrival order and numbered anew. Requests without SLOs get them by the
 * same rule as generated ones.
 */
int
gen_mixed(struct gen *g, const char *path, struct medha_writer *w)
{
	struct medha_trace_in *t;
	struct medha_reqspec rs = {0}, *v = NULL;
	size_t n = 0, cap = 0, nbase;
	double t0, t1, rate, at;
	FILE *f;
	int rc;

	if ((f = fopen(path, "rb")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", path, strerror(errno));
		return 1;
	}
	if ((rc = medha_trace_open(&t, f)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", path, medha_strerror(rc));
		fclose(f);
		return 1;
	}
	while ((rc = medha_trace_next(t, &rs)) == 1) {
		if (n == cap) {
			size_t ncap = cap ? 2 * cap : 1024;
			void *m = medha_reallocarray(v, ncap, sizeof(*v));
			if (m == NULL) {
				rc = MEDHA_ENOMEM;
				break;
			}
			v = m;
			cap = ncap;
		}
		/* the request (its prompt, ids and stop strings) moves
		   into v: the next read would free them */
		v[n] = rs;
		memset(&rs, 0, sizeof(rs));
		set_slos(g, &v[n]);
		n++;
	}
	if (rc < 0 || n == 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", path,
		    rc == MEDHA_ENOMEM ? "out of memory"
		        : rc < 0       ? medha_trace_error(t)
		                       : "no requests");
		medha_reqspec_clear(&rs);
		medha_trace_close(t);
		fclose(f);
		for (size_t i = 0; i < n; i++)
			medha_reqspec_clear(&v[i]);
		free(v);
		return 1;
	}
	medha_reqspec_clear(&rs);
	medha_trace_close(t);
	fclose(f);

	nbase = n;
	qsort(v, n, sizeof(*v), by_arrival);
	t0 = v[0].arrival;
	t1 = v[n - 1].arrival;
	/* long requests at rate frac/(1-frac) x the base's rate */
	rate = g->long_frac >= 1 || t1 <= t0
	    ? 0
	    : g->long_frac / (1 - g->long_frac) * (double)nbase / (t1 - t0);
	for (at = t0; rate > 0;) {
		double u1, u2, r;
		at += -log(rng_uniform(g->s)) / rate;
		u1 = rng_uniform(g->s);
		u2 = rng_uniform(g->s);
		if (at >= t1)
			break;
		if (n == cap) {
			void *m = medha_reallocarray(v, cap * 2, sizeof(*v));
			if (m == NULL) {
				medha_log(MEDHA_LOG_ERROR,
				    "out of memory mixing in long requests "
				    "(%zu so far)",
				    n - nbase);
				for (size_t i = 0; i < n; i++)
					medha_reqspec_clear(&v[i]);
				free(v);
				return 1;
			}
			v = m;
			cap *= 2;
		}
		memset(&v[n], 0, sizeof(v[n]));
		r = sqrt(-2 * log(u1));
		long_shape(g, r * cos(2 * M_PI * u2), r * sin(2 * M_PI * u2),
		    &v[n]);
		v[n].arrival = at;
		set_slos(g, &v[n]);
		n++;
	}
	qsort(v, n, sizeof(*v), by_arrival);
	rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		snprintf(v[i].id, sizeof(v[i].id), "%zu", i);
		if ((rc = cap_apply(&g->cap, &v[i])) != 0)
			break;
		rc = medha_reqspec_write(w, &v[i]);
	}
	if (rc != 0 && rc != MEDHA_ERANGE) /* cap_apply's is said */
		medha_log(MEDHA_LOG_ERROR, "writing the trace: %s",
		    medha_strerror(rc));
	medha_log(MEDHA_LOG_INFO, "%zu base requests, %zu long ones mixed in",
	    nbase, n - nbase);
	for (size_t i = 0; i < n; i++)
		medha_reqspec_clear(&v[i]);
	free(v);
	return rc != 0;
}
