/*
 * medha-trace: makes, converts, replays and reports traces. This file
 * dispatches to the subcommands (gen.c, report.c, replay.c, and convert
 * below), and holds what they share: usage and help, checked flag
 * numbers, and opening an output file that is compressed when its name
 * ends in ".zst". man/medha-trace.1 describes the program,
 * man/medha-trace.5 the formats.
 */
#include "medha-trace.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

/* The subcommands, in the synopsis's order. */
static const struct {
	const char *name;
	const char *argv0; /* getopt's prefix for its messages */
	int (*fn)(int, char *[]);
	const char *what;     /* its line in -h */
	const char *synopsis; /* without "usage: " */
} cmds[] = {
    {"gen", "medha-trace gen", trace_gen,
        "write a synthetic trace of short and long requests",
        "medha-trace gen [-h] [-l fraction] [-n count | -t seconds] "
        "[-o file]\n"
        "           [-q qps] [-s seed] [--base file] [--long-max tokens]\n"
        "           [--long-min tokens] [--max-tokens n] [--prompts file]\n"
        "           [--short-max tokens] [--tpot-slo seconds]\n"
        "           [--ttft-floor seconds] [--ttft-mult factor]\n"},
    {"convert", "medha-trace convert", trace_convert,
        "rewrite a CSV or JSON Lines trace as medha JSON Lines",
        "medha-trace convert [-h] [-o file] [--time-scale factor] "
        "[file]\n"},
    {"report", "medha-trace report", trace_report,
        "sum up result records: latencies, SLOs, throughput",
        "medha-trace report [-h] [--json] [--long-threshold tokens]\n"
        "           [--plot file.png] [--title text] [file ...]\n"},
    {"replay", "medha-trace replay", trace_replay,
        "submit a trace to a live replica, write its records",
        "medha-trace replay -a addr [-hv] [-o file] [--speed x] "
        "[--stream]\n"
        "           [--text] [--token-ids] [--wait seconds] [file]\n"},
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void
synopsis(FILE *fp)
{
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(fp, "%s%s", i == 0 ? "usage: " : "       ",
		    cmds[i].synopsis);
	fprintf(fp, "       medha-trace -h\n");
}

void
usage(int status)
{
	synopsis(status == 0 ? stdout : stderr);
	exit(status);
}

static void help_done(void) __attribute__((noreturn));
static void help_top(void) __attribute__((noreturn));

/* The end of -h: stdout must have taken it all. */
static void
help_done(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		medha_log(MEDHA_LOG_ERROR, "stdout: %s", strerror(errno));
		exit(1);
	}
	exit(0);
}

/* -h without a subcommand: the synopsis and what each subcommand does */
static void
help_top(void)
{
	synopsis(stdout);
	printf("\nSubcommands (medha-trace SUBCOMMAND -h for its options):\n");
	for (size_t i = 0; i < NCMDS; i++)
		printf("  %-22s  %s\n", cmds[i].name, cmds[i].what);
	help_done();
}

void
help(const char *sub, const struct medha_help *lines, size_t n)
{
	size_t i;

	for (i = 0; i < NCMDS && strcmp(cmds[i].name, sub) != 0; i++)
		;
	if (i < NCMDS)
		printf("usage: %s", cmds[i].synopsis);
	exit(medha_help_print(lines, n));
}

double
flag_f64(const char *flag, const char *arg, double lo, double hi, int lo_open)
{
	double v;

	if (medha_flag_f64(flag, arg, lo, hi, lo_open, &v) != 0)
		exit(2);
	return v;
}

int64_t
flag_i64(const char *flag, const char *arg, int64_t lo, int64_t hi)
{
	int64_t v;

	if (medha_flag_i64(flag, arg, lo, hi, &v) != 0)
		exit(2);
	return v;
}

FILE *
out_open(const char *path, struct medha_writer **w)
{
	FILE *f = stdout;
	int rc;

	if (path != NULL && strcmp(path, "-") != 0 &&
	    (f = fopen(path, "w")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", path, strerror(errno));
		return NULL;
	}
	rc = medha_writer_open(w, f,
	    path != NULL && f != stdout && medha_path_is_zst(path));
	if (rc != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s", medha_strerror(rc));
		if (f != stdout)
			fclose(f);
		return NULL;
	}
	return f;
}

int
out_close(const char *path, FILE *f, struct medha_writer *w)
{
	int bad;

	bad = medha_writer_close(w) != 0;
	if (f != stdout && fclose(f) != 0)
		bad = 1;
	if (bad) {
		medha_log(MEDHA_LOG_ERROR, "%s: write error: %s",
		    f != stdout ? path : "stdout", strerror(errno));
		return 1;
	}
	return 0;
}

/* ---- convert ---- */

enum { OPT_TIME_SCALE = 256 };

/* -h: every option of longopts below, as medha-trace(1) says */
static const struct medha_help convert_help[] = {
    {"-h, --help", "print this help and exit"},
    {"-o, --output file", "write to file, not stdout (.zst: compressed)"},
    {"--time-scale factor",
        "multiply arrival times by factor (1); 0.5: 2x load"},
    {"file", "trace: JSON Lines or Azure/Vidur CSV (default: stdin)"},
};

int
trace_convert(int argc, char *argv[])
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"output", required_argument, NULL, 'o'},
	    {"time-scale", required_argument, NULL, OPT_TIME_SCALE},
	    {NULL, 0, NULL, 0},
	};
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t = NULL;
	struct medha_writer *w;
	const char *out = NULL; /* -o: stdout */
	const char *in = "-";   /* stdin */
	double scale = 1;       /* --time-scale: arrivals unchanged */
	FILE *inf = stdin, *outf;
	int ch, rc, wrc = 0, status = 1;

	while ((ch = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h': HELP("convert", convert_help);
		case 'o': out = optarg; break;
		case OPT_TIME_SCALE:
			scale = flag_f64("--time-scale", optarg, 0, 1e6, 1);
			break;
		default: usage(2);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 1)
		usage(2);
	if (argc == 1)
		in = argv[0];
	if (strcmp(in, "-") != 0 && (inf = fopen(in, "r")) == NULL) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", in, strerror(errno));
		return 1;
	}
	if (strcmp(in, "-") == 0)
		in = "stdin";
	if ((rc = medha_trace_open(&t, inf)) != 0) {
		medha_log(MEDHA_LOG_ERROR, "%s: %s", in, medha_strerror(rc));
		goto done;
	}
	if ((outf = out_open(out, &w)) == NULL)
		goto done;
	while ((rc = medha_trace_next(t, &rs)) == 1) {
		rs.arrival *= scale;
		if (rs.arrival > MEDHA_TIME_MAX) {
			/* the reader checked it unscaled */
			medha_log(MEDHA_LOG_ERROR,
			    "%s: request %s: arrival %.9g s after "
			    "--time-scale, more than %.15g",
			    in, rs.id, rs.arrival, MEDHA_TIME_MAX);
			wrc = MEDHA_ERANGE;
			break;
		}
		if ((wrc = medha_reqspec_write(w, &rs)) != 0)
			break;
	}
	if (rc < 0)
		medha_log(MEDHA_LOG_ERROR, "%s: %s", in, medha_trace_error(t));
	else if (wrc != 0 && wrc != MEDHA_EIO && wrc != MEDHA_ERANGE)
		/* out_close reports EIO; ERANGE is said above */
		medha_log(MEDHA_LOG_ERROR, "%s: request %s: %s", in, rs.id,
		    medha_strerror(wrc));
	status = out_close(out, outf, w) != 0 || rc != 0;
done:
	medha_reqspec_clear(&rs);
	medha_trace_close(t);
	if (inf != stdin)
		fclose(inf);
	return status;
}

/* ---- main ---- */

int
main(int argc, char *argv[])
{
	size_t i;
	int status;

	medha_progname = "medha-trace";
	if (argc < 2)
		usage(2);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		help_top();
	for (i = 0; i < NCMDS; i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			break;
	if (i == NCMDS) {
		medha_log(MEDHA_LOG_ERROR, "%s: unknown subcommand", argv[1]);
		usage(2);
	}
	argv[1] = (char *)cmds[i].argv0;
	status = cmds[i].fn(argc - 1, argv + 1);
	if (fclose(stdout) != 0 && status == 0) {
		medha_log(MEDHA_LOG_ERROR, "stdout: %s", strerror(errno));
		status = 1;
	}
	return status;
}
