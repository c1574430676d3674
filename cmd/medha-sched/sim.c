/*
 * sim.c: medha-sched --sim's run: the trace through the scheduler core
 * in virtual time (sched/sim.h), the records and the batch log
 * written, a summary logged. main.c reads the flags and builds the
 * predictor.
 */
#include "../common.h"
#include "sim.h"
#include "sched/sim.h"
#include "io/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct out {
	struct medha_writer *rec;
	struct medha_writer *blog;
	int progress; /* stderr is a terminal */
	int werr;     /* errno of a failed write of records, or 0 */
	int berr;     /* of the batch log */
};

static int
on_record(void *arg, const struct medha_record *rec)
{
	struct out *o = arg;
	int rc;

	errno = 0;
	if ((rc = medha_record_write(o->rec, rec)) != 0 && o->werr == 0)
		o->werr = errno ? errno : EIO;
	return rc;
}

static int
on_batch(void *arg, const struct medha_sched *s,
    const struct medha_sched_batch *b)
{
	struct out *o = arg;
	int rc;

	rc = medha_writer_printf(o->blog, "%.6f %.6f %d", b->start, b->latency,
	    b->n_decode);
	for (int i = 0; i < b->n_items && rc == 0; i++) {
		const struct medha_sched_item *it = &b->items[i];
		if (it->decode)
			continue;
		rc = medha_writer_printf(o->blog, " %s:%lld:%lld",
		    medha_sched_req(s, it->req)->spec.id, (long long)it->tokens,
		    (long long)it->kv);
	}
	if (rc == 0)
		rc = medha_writer_write(o->blog, "\n", 1);
	return rc;
}

static void
on_progress(void *arg, double now, size_t done, size_t total)
{
	struct out *o = arg;

	if (o->progress)
		progress("t=%.0fs  %zu/%zu requests done ", now, done, total);
}

/*
 * --sim: the trace (path; NULL: stdin) through the scheduler in virtual
 * time, a record per request to -o, a line per batch to -b. Returns the
 * exit status (0, or 1 after logging why).
 */
int
sched_sim(const struct medha_sched_config *cfg, const struct medha_pred *pred,
    const char *path, const char *out_path, const char *blog_path)
{
	struct medha_sim_stats st;
	struct medha_sim_hooks hooks;
	struct medha_reqspec *reqs;
	struct out o;
	FILE *of = NULL, *bf = NULL;
	size_t n;
	double t0, wall;
	int rc, status;

	reqs = read_trace_all(path, &n);
	memset(&o, 0, sizeof(o));
	o.progress = isatty(STDERR_FILENO);
	status = 1; /* until it all went well */
	if ((of = out_open(out_path, &o.rec)) == NULL)
		goto out;
	if (blog_path != NULL && (bf = out_open(blog_path, &o.blog)) == NULL)
		goto out;
	memset(&hooks, 0, sizeof(hooks));
	hooks.arg = &o;
	hooks.record = on_record;
	hooks.batch = blog_path != NULL ? on_batch : NULL;
	hooks.progress = on_progress;

	t0 = medha_now();
	rc = medha_sim_run(cfg, pred, reqs, n, &hooks, &st);
	wall = medha_now() - t0;
	if (o.progress)
		fputc('\n', stderr);
	if (rc != 0 && o.werr != 0) {
		medha_log(MEDHA_LOG_ERROR, "writing records to %s: %s",
		    out_path != NULL ? out_path : "stdout", strerror(o.werr));
		goto out;
	}
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "simulation failed: %s",
		    rc < 0 ? medha_strerror(rc) : "write error");
		goto out;
	}
	rc = out_finish(of, o.rec);
	o.rec = NULL;
	of = NULL;
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "writing records to %s: %s",
		    out_path != NULL ? out_path : "stdout", strerror(errno));
		goto out;
	}
	if (o.blog != NULL) {
		rc = out_finish(bf, o.blog);
		o.blog = NULL;
		bf = NULL;
		if (rc != 0) {
			medha_log(MEDHA_LOG_ERROR,
			    "writing the batch log failed");
			goto out;
		}
	}
	medha_log(MEDHA_LOG_INFO,
	    "%zu requests, %lld iterations, %lld tokens, %.1f s virtual "
	    "(stage 0 busy %.1f%%), %.2f s wall",
	    n, (long long)st.iterations, (long long)st.tokens, st.end,
	    st.end > 0 ? 100 * st.busy / st.end : 0, wall);
	medha_log(MEDHA_LOG_INFO,
	    "progress guarantee: %lld batches over their target by a "
	    "32-token chunk, %.3f s added in all",
	    (long long)st.progress.batches, st.progress.extra);
	medha_log(MEDHA_LOG_INFO,
	    "prefix cache: %lld of %lld admissions hit, %lld tokens; %lld "
	    "blocks cached, %lld evicted",
	    (long long)st.prefix.hits, (long long)st.prefix.queries,
	    (long long)st.prefix.hit_tokens, (long long)st.prefix.inserted,
	    (long long)st.prefix.evictions);
	medha_log(MEDHA_LOG_INFO,
	    "memory: reserve %s, %lld preemptions "
	    "(--preempt-below %lld)",
	    medha_reserve_name(cfg->reserve), (long long)st.preemptions,
	    (long long)st.preempt_below);
	status = 0;
out:
	/* on a failure, what is open is let go (its errors are moot) */
	if (o.rec != NULL)
		medha_writer_close(o.rec);
	if (o.blog != NULL)
		medha_writer_close(o.blog);
	if (of != NULL && of != stdout)
		fclose(of);
	if (bf != NULL && bf != stdout)
		fclose(bf);
	for (size_t i = 0; i < n; i++)
		medha_reqspec_clear(&reqs[i]);
	free(reqs);
	return status;
}
