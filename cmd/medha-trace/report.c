/*
 * report.c: "medha-trace report", what a run's result records add up to.
 * Requests are split into short and long by prompt length; for all, short
 * and long it gives percentiles of TTFT, TPOT and end-to-end latency over
 * completed requests, the share of requests that met their SLOs,
 * throughput, percentiles of the time between tokens (every gap, from the
 * records' TBT histograms merged) and of TTFT over the prompt's prefill
 * time alone, as an aligned table or one JSON object. The default table
 * fits 100 columns (TTFT, TPOT, SLO attainment, throughput); --wide has
 * every column. With --plot it has gnuplot draw their CDFs, with the
 * SLOs, into a PNG, the samples and the picture passing through files in
 * a temporary directory: the picture is copied to its place with every
 * write checked, as gnuplot says nothing of a failed one.
 */
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

const char *const cls_names[NCLS] = {"all", "short", "long"};
const char *const metric_names[NMETRIC] = {"ttft", "tpot", "e2e"};

static int
series_push(struct series *s, double v)
{
	double *p;

	if (s->n == s->cap) {
		p = medha_reallocarray(s->v, s->cap ? s->cap * 2 : 256,
		    sizeof(*p));
		if (p == NULL)
			return MEDHA_ENOMEM;
		s->v = p;
		s->cap = s->cap ? s->cap * 2 : 256;
	}
	s->v[s->n++] = v;
	return 0;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* q-quantile of sorted v, linear between order statistics (numpy's). */
double
percentile(const struct series *s, double q)
{
	double h = (s->n - 1) * q;
	size_t lo = (size_t)floor(h);

	if (lo + 1 >= s->n)
		return s->v[s->n - 1];
	return s->v[lo] + (h - lo) * (s->v[lo + 1] - s->v[lo]);
}

static int
cls_add(struct cls *c, const struct medha_record *r)
{
	int rc;

	if (c->requests++ == 0 || r->arrival < c->first_arrival)
		c->first_arrival = r->arrival;
	if ((r->ttft_slo > 0 &&
	        (rc = series_push(&c->slo[0], r->ttft_slo)) != 0) ||
	    (r->tpot_slo > 0 &&
	        (rc = series_push(&c->slo[1], r->tpot_slo)) != 0))
		return rc;
	if (r->status != MEDHA_STATUS_OK)
		return 0;
	c->completed++;
	c->out_tokens += r->output_tokens;
	if (c->completed == 1 || r->finish > c->last_finish)
		c->last_finish = r->finish;
	if ((r->ttft_slo <= 0 || r->ttft <= r->ttft_slo) &&
	    (r->tpot_slo <= 0 || r->output_tokens < 2 ||
	        r->tpot_mean <= r->tpot_slo))
		c->met++;
	if ((rc = series_push(&c->m[M_TTFT], r->ttft)) != 0 ||
	    (rc = series_push(&c->m[M_E2E], r->finish - r->arrival)) != 0)
		return rc;
	if (r->output_tokens >= 2 &&
	    (rc = series_push(&c->m[M_TPOT], r->tpot_mean)) != 0)
		return rc;
	if (r->prefill_alone > 0 && isfinite(r->ttft / r->prefill_alone) &&
	    (rc = series_push(&c->ttft_norm, r->ttft / r->prefill_alone)) != 0)
		return rc;
	if (r->tbt.n > 0) {
		/* tpot_max is exact; a record without it has its histogram */
		double max = r->tpot_max > 0 ? r->tpot_max
		                             : medha_tbt_quantile(&r->tbt, 1);
		if (max > c->tbt_max)
			c->tbt_max = max;
		return medha_tbt_merge(&c->tbt, &r->tbt);
	}
	return 0;
}

/* Completed requests (out: tokens) per second over the class's span. */
static double
cls_rate(const struct cls *c, int tokens)
{
	double span = c->last_finish - c->first_arrival;

	if (c->completed == 0 || !(span > 0))
		return 0;
	return (tokens ? c->out_tokens : c->completed) / span;
}

/* Reads the records of one file ("-": stdin) into the classes. */
static int
read_records(const char *path, int64_t long_min, struct cls *cls)
{
	struct medha_reader *r = NULL;
	struct medha_record rec;
	const char *name = path;
	char why[200], *line, *s;
	long long lineno = 0;
	size_t len;
	FILE *f = stdin;
	int c, rc, status = 1;

	if (strcmp(path, "-") == 0)
		name = "stdin";
	else if ((f = fopen(path, "r")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", path, strerror(errno));
		return 1;
	}
	if ((rc = medha_reader_open(&r, f)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", name, medha_strerror(rc));
		goto out;
	}
	while ((rc = medha_reader_line(r, &line, &len)) == 1) {
		lineno++;
		for (s = line; *s == ' ' || *s == '\t'; s++)
			;
		if (*s == '\0' || *s == '#')
			continue;
		if ((rc = medha_record_parse(s, &rec, why, sizeof(why))) != 0) {
			if (strstr(s, "\"status\"") == NULL &&
			    strstr(s, "\"max_tokens\"") != NULL)
				medha_log(MEDHA_LOG_ERROR,
				    "%s: line %lld: a request of a trace, not "
				    "a result record: run the trace through "
				    "medha-sched --sim (or medha-trace replay) "
				    "and report on what it prints",
				    name, lineno);
			else
				medha_log(MEDHA_LOG_ERROR, "%s: line %lld: %s",
				    name, lineno,
				    rc == MEDHA_EFORMAT ? why
				                        : medha_strerror(rc));
			goto out;
		}
		c = rec.prompt_tokens >= long_min ? CLS_LONG : CLS_SHORT;
		if ((rc = cls_add(&cls[CLS_ALL], &rec)) != 0 ||
		    (rc = cls_add(&cls[c], &rec)) != 0) {
			medha_record_clear(&rec);
			medha_log(MEDHA_LOG_ERROR, "%s", medha_strerror(rc));
			goto out;
		}
		report_cache_add(CLS_ALL, &rec);
		report_cache_add(c, &rec);
		medha_record_clear(&rec);
	}
	if (rc < 0)
		medha_log(MEDHA_LOG_ERROR, "%s: line %lld: %s", name,
		    lineno + 1, medha_reader_error(r));
	else
		status = 0;
out:
	medha_reader_close(r);
	if (f != stdin)
		fclose(f);
	return status;
}

/* ---- output ---- */

/* v in 7 characters where fewer decimals than dec make it fit. */
static void
cell7(double v, int dec)
{
	char b[64];

	while (snprintf(b, sizeof(b), "%.*f", dec, v) > 7 && dec > 0)
		dec--;
	printf(" %7s", b);
}

/*
 * The table, one row per class with requests. The default fits 100
 * columns: TTFT and TPOT percentiles, SLO attainment and throughput;
 * wide adds end-to-end latency, TBT and normalised TTFT.
 */
static void
print_table(const struct cls *cls, int wide)
{
	static const char *units[NMETRIC] = {"(s)", "(ms)", "(s)"};
	static const double scale[NMETRIC] = {1, 1e3, 1};
	static const double q[3] = {0.5, 0.9, 0.99};
	const int nm = wide ? NMETRIC : M_E2E; /* e2e: wide only */
	const struct cls *c;
	int i, m, k;
	double v;

	if (!wide) { /* the percentiles under their metric */
		printf("%-5s %8s %9s", "", "", "");
		for (m = 0; m < nm; m++) {
			char g[32];
			int w = snprintf(g, sizeof(g), " %s %s ",
			    metric_names[m], units[m]);
			printf(" %.*s%s%.*s", (23 - w) / 2,
			    "-----------------------", g, 23 - w - (23 - w) / 2,
			    "-----------------------");
		}
		printf("\n");
	}
	printf("%-5s %8s %9s", "class", "requests", "completed");
	for (m = 0; m < nm; m++)
		for (k = 0; k < 3; k++)
			if (wide)
				printf(" %5s_p%-2d", metric_names[m],
				    (int)(q[k] * 100 + 0.5));
			else
				printf(" %7s", k == 0 ? "p50" : k == 1 ? "p90"
				                                       : "p99");
	printf(wide ? " %7s %9s %9s" : " %6s %8s %9s", "slo", "req/s",
	    "tok/s");
	if (wide) {
		for (k = 0; k < 3; k++)
			printf("   tbt_p%-2d", (int)(q[k] * 100 + 0.5));
		printf(" %9s", "tbt_max");
		for (k = 0; k < 3; k++)
			printf(" ttftn_p%-2d", (int)(q[k] * 100 + 0.5));
		printf("\n%-5s %8s %9s", "", "", "");
		for (m = 0; m < NMETRIC; m++)
			for (k = 0; k < 3; k++)
				printf(" %9s", units[m]);
		printf(" %7s %9s %9s", "", "", "");
		for (k = 0; k < 4; k++)
			printf(" %9s", "(ms)");
		for (k = 0; k < 3; k++)
			printf(" %9s", "(x)");
	}
	printf("\n");
	for (i = 0; i < NCLS; i++) {
		c = &cls[i];
		if (c->requests == 0) /* a class with no requests: no row */
			continue;
		printf("%-5s %8lld %9lld", cls_names[i], (long long)c->requests,
		    (long long)c->completed);
		for (m = 0; m < nm; m++)
			for (k = 0; k < 3; k++) {
				if (c->m[m].n == 0) {
					printf(wide ? " %9s" : " %7s", "-");
					continue;
				}
				v = scale[m] * percentile(&c->m[m], q[k]);
				if (wide)
					printf(m == M_TPOT ? " %9.2f" : " %9.3f",
					    v);
				else
					cell7(v, m == M_TPOT ? 2 : 3);
			}
		printf(wide ? " %6.1f%%" : " %5.1f%%",
		    100.0 * c->met / c->requests);
		printf(wide ? " %9.3f %9.1f" : " %8.3f %9.1f", cls_rate(c, 0),
		    cls_rate(c, 1));
		for (k = 0; wide && k < 4; k++)
			if (c->tbt.n == 0)
				printf(" %9s", "-");
			else
				printf(" %9.2f",
				    1e3 *
				        (k < 3 ? medha_tbt_quantile(&c->tbt,
				                     q[k])
				               : c->tbt_max));
		for (k = 0; wide && k < 3; k++)
			if (c->ttft_norm.n == 0)
				printf(" %9s", "-");
			else
				printf(" %9.2f",
				    percentile(&c->ttft_norm, q[k]));
		printf("\n");
	}
}

static json_t *
cls_json(const struct cls *c)
{
	static const char *qname[3] = {"p50", "p90", "p99"};
	static const double q[3] = {0.5, 0.9, 0.99};
	json_t *o, *p;
	int m, k;

	o = json_object();
	json_object_set_new(o, "requests", json_integer(c->requests));
	json_object_set_new(o, "completed", json_integer(c->completed));
	for (m = 0; m < NMETRIC; m++) {
		p = json_object();
		for (k = 0; k < 3; k++)
			json_object_set_new(p, qname[k],
			    c->m[m].n == 0
			        ? json_null()
			        : json_real(percentile(&c->m[m], q[k])));
		json_object_set_new(o, metric_names[m], p);
	}
	p = json_object();
	for (k = 0; k < 3; k++)
		json_object_set_new(p, qname[k],
		    c->tbt.n == 0
		        ? json_null()
		        : json_real(medha_tbt_quantile(&c->tbt, q[k])));
	json_object_set_new(p, "max",
	    c->tbt.n == 0 ? json_null() : json_real(c->tbt_max));
	json_object_set_new(o, "tbt", p);
	p = json_object();
	for (k = 0; k < 3; k++)
		json_object_set_new(p, qname[k],
		    c->ttft_norm.n == 0
		        ? json_null()
		        : json_real(percentile(&c->ttft_norm, q[k])));
	json_object_set_new(o, "ttft_norm", p);
	json_object_set_new(o, "slo_attainment",
	    c->requests == 0 ? json_null()
	                     : json_real((double)c->met / c->requests));
	json_object_set_new(o, "throughput_rps", json_real(cls_rate(c, 0)));
	json_object_set_new(o, "throughput_tps", json_real(cls_rate(c, 1)));
	return o;
}

static int
print_json(const struct cls *cls)
{
	json_t *root;
	char *s;
	int i;

	root = json_object();
	json_object_set_new(root, "requests", json_integer(cls[0].requests));
	json_object_set_new(root, "completed", json_integer(cls[0].completed));
	for (i = 0; i < NCLS; i++)
		json_object_set_new(root, cls_names[i], cls_json(&cls[i]));
	report_cache_json(root, cls_names);
	s = json_dumps(root, JSON_REAL_PRECISION(9));
	json_decref(root);
	if (s == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s", medha_strerror(MEDHA_ENOMEM));
		return 1;
	}
	printf("%s\n", s);
	free(s);
	return 0;
}

/* ---- the subcommand ---- */

enum { OPT_JSON = 256, OPT_LONG_THRESHOLD, OPT_PLOT, OPT_TITLE, OPT_WIDE };

/* -h: every option of longopts below, as medha-trace(1) says */
static const struct medha_help report_help[] = {
    {"-h, --help", "print this help and exit"},
    {"--json", "print one JSON object, not the table (times in s)"},
    {"--long-threshold tokens",
        "a request is long from this prompt length (131072)"},
    {"--plot file.png", "also draw latency CDFs into a PNG with gnuplot(1)"},
    {"--title text", "the plot's title: what the records are of"},
    {"--wide", "every column: e2e, TBT and TTFT / prefill too"},
    {"file ...", "result records, JSON Lines (default: stdin)"},
};

int
trace_report(int argc, char *argv[])
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"long-threshold", required_argument, NULL, OPT_LONG_THRESHOLD},
	    {"plot", required_argument, NULL, OPT_PLOT},
	    {"title", required_argument, NULL, OPT_TITLE},
	    {"wide", no_argument, NULL, OPT_WIDE},
	    {NULL, 0, NULL, 0},
	};
	static char *dash[] = {"-", NULL};
	struct cls cls[NCLS];
	int64_t long_min = 131072; /* --long-threshold: 128K tokens */
	const char *png = NULL;    /* --plot: none */
	const char *title = NULL;  /* --title: none */
	int ch, json = 0, wide = 0, i, m, status = 0;

	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h': HELP("report", report_help);
		case OPT_JSON: json = 1; break;
		case OPT_LONG_THRESHOLD:
			long_min =
			    flag_i64("--long-threshold", optarg, 1, INT64_MAX);
			break;
		case OPT_PLOT: png = optarg; break;
		case OPT_TITLE: title = optarg; break;
		case OPT_WIDE: wide = 1; break;
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc == 0) {
		argc = 1;
		argv = dash;
	}
	memset(cls, 0, sizeof(cls));
	for (i = 0; i < argc && status == 0; i++)
		status = read_records(argv[i], long_min, cls);
	if (status == 0 && cls[CLS_ALL].requests == 0) {
		medha_log(MEDHA_LOG_ERROR, "no records in %s",
		    argc == 1 && strcmp(argv[0], "-") == 0 ? "the input"
		                                           : "the files");
		status = 1;
	}
	if (status == 0) {
		for (i = 0; i < NCLS; i++) {
			for (m = 0; m < NMETRIC; m++)
				if (cls[i].m[m].n > 0)
					qsort(cls[i].m[m].v, cls[i].m[m].n,
					    sizeof(double), cmp_double);
			if (cls[i].ttft_norm.n > 0)
				qsort(cls[i].ttft_norm.v, cls[i].ttft_norm.n,
				    sizeof(double), cmp_double);
			for (m = 0; m < 2; m++)
				if (cls[i].slo[m].n > 0)
					qsort(cls[i].slo[m].v, cls[i].slo[m].n,
					    sizeof(double), cmp_double);
		}
		if (json)
			status = print_json(cls);
		else {
			print_table(cls, wide);
			report_cache_print(cls_names);
		}
		if (status == 0 && png != NULL)
			status = report_plot(png, title, cls);
	}
	for (i = 0; i < NCLS; i++) {
		for (m = 0; m < NMETRIC; m++)
			free(cls[i].m[m].v);
		free(cls[i].ttft_norm.v);
		free(cls[i].slo[0].v);
		free(cls[i].slo[1].v);
		medha_tbt_free(&cls[i].tbt);
	}
	return status;
}
