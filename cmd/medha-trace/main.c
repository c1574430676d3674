/*
 * medha-trace: makes, converts, replays and reports traces. This file
 * dispatches to the subcommands (gen.c, report.c, replay.c, and convert
 * below), and holds what they share beside ../common.c: the synopsis
 * and -h built from the table of subcommands. man/medha-trace.1
 * describes the program, man/medha-trace.5 the formats.
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
        "write a synthetic trace (short, long, shared prefixes)",
        "medha-trace gen [-h] [-l fraction] [-n count | -t seconds] "
        "[-o file]\n"
        "           [-q qps] [-s seed] [--base file]\n"
        "           [--context tokens|model] [--context-max tokens]\n"
        "           [--doc-tokens n] [--long-max tokens] [--long-min tokens]\n"
        "           [--max-tokens n] [--max-tokens-policy actual|context|N]\n"
        "           [--prompts file] [--questions n]\n"
        "           [--short-max tokens] [--system-fraction f]\n"
        "           [--system-prompts n] [--system-tokens n]\n"
        "           [--think seconds] [--tpot-slo seconds]\n"
        "           [--ttft-floor seconds] [--ttft-mult factor] [--turns n]\n"},
    {"convert", "medha-trace convert", trace_convert,
        "rewrite a CSV or JSON Lines trace as medha JSON Lines",
        "medha-trace convert [-h] [-o file] [--context tokens|model]\n"
        "           [--max-tokens-policy actual|context|N]\n"
        "           [--time-scale factor] [file]\n"},
    {"report", "medha-trace report", trace_report,
        "sum up result records: latencies, SLOs, throughput",
        "medha-trace report [-h] [--json] [--long-threshold tokens]\n"
        "           [--plot file.png] [--title text] [--wide] [file ...]\n"},
    {"replay", "medha-trace replay", trace_replay,
        "submit a trace to a live replica, write its records",
        "medha-trace replay -a addr [-hv] [-o file] [--speed x] "
        "[--stream]\n"
        "           [--text] [--token-ids] [--wait seconds] [file]\n"},
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

/* The synopsis, every subcommand's lines in turn, "usage: " first. */
static const char *
synopsis(void)
{
	static char buf[2048];
	size_t len = 0;

	if (buf[0] != '\0')
		return buf;
	for (size_t i = 0; i < NCMDS; i++)
		len += snprintf(buf + len, sizeof(buf) - len, "%s%s",
		    i == 0 ? "usage: " : "       ", cmds[i].synopsis);
	snprintf(buf + len, sizeof(buf) - len, "       medha-trace -h\n");
	return buf;
}

void
usage(void)
{
	usage_exit(synopsis());
}

static void help_top(void) __attribute__((noreturn));

/* -h without a subcommand: the synopsis and what each subcommand does */
static void
help_top(void)
{
	struct medha_help lines[1 + NCMDS] = {
	    {NULL, "Subcommands (medha-trace SUBCOMMAND -h for its options):"}};

	for (size_t i = 0; i < NCMDS; i++)
		lines[1 + i] = (struct medha_help){cmds[i].name, cmds[i].what};
	help_exit(synopsis(), lines, 1 + NCMDS);
}

void
help(const char *sub, const struct medha_help *lines, size_t n)
{
	char syn[1024] = "";

	for (size_t i = 0; i < NCMDS; i++)
		if (strcmp(cmds[i].name, sub) == 0)
			snprintf(syn, sizeof(syn), "usage: %s",
			    cmds[i].synopsis);
	help_exit(syn, lines, n);
}

/* ---- convert ---- */

enum { OPT_TIME_SCALE = 256, OPT_CONTEXT, OPT_CAP };

/* -h: every option of longopts below, as medha-trace(1) says */
static const struct medha_help convert_help[] = {
    {"-h, --help", "print this help and exit"},
    {"-o, --output file", "write to file, not stdout (.zst: compressed)"},
    {"--context tokens|model", "context length (a model: its own)"},
    {"--max-tokens-policy actual|context|N",
        "max_tokens: real, context - prompt, N"},
    {"--time-scale factor",
        "multiply arrival times by factor (1); 0.5: 2x load"},
    {"file", "trace: JSON Lines or Azure/Vidur CSV (default: stdin)"},
};

int
trace_convert(int argc, char *argv[])
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"context", required_argument, NULL, OPT_CONTEXT},
	    {"max-tokens-policy", required_argument, NULL, OPT_CAP},
	    {"output", required_argument, NULL, 'o'},
	    {"time-scale", required_argument, NULL, OPT_TIME_SCALE},
	    {NULL, 0, NULL, 0},
	};
	struct medha_reqspec rs = {0};
	struct medha_trace_in *t = NULL;
	struct medha_writer *w;
	const char *out = NULL;      /* -o: stdout */
	const char *in = "-";        /* stdin */
	double scale = 1;            /* --time-scale: arrivals unchanged */
	struct cap_policy cap = {0}; /* --max-tokens-policy: actual */
	int64_t context = 0;         /* --context: none */
	FILE *inf = stdin, *outf;
	int ch, rc, wrc = 0, status = 1;

	while ((ch = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h': HELP("convert", convert_help);
		case 'o': out = optarg; break;
		case OPT_CONTEXT: context = cap_context(optarg); break;
		case OPT_CAP: cap_parse(&cap, optarg); break;
		case OPT_TIME_SCALE:
			scale = flag_f64("--time-scale", optarg, 0, 1e6, 1);
			break;
		default: usage();
		}
	}
	cap_check(&cap, context);
	cap.context = context;
	argc -= optind;
	argv += optind;
	if (argc > 1)
		usage();
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
		if ((wrc = cap_apply(&cap, &rs)) != 0 ||
		    (wrc = medha_reqspec_write(w, &rs)) != 0)
			break;
	}
	if (rc < 0)
		medha_log(MEDHA_LOG_ERROR, "%s: %s", in, medha_trace_error(t));
	else if (wrc != 0 && wrc != MEDHA_EIO && wrc != MEDHA_ERANGE)
		/* out_close reports EIO; ERANGE (cap_apply's too) is said
		   before */
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

	medha_progname = "medha-trace";
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		help_top();
	for (i = 0; i < NCMDS; i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			break;
	if (i == NCMDS) {
		medha_log(MEDHA_LOG_ERROR, "%s: unknown subcommand", argv[1]);
		usage();
	}
	argv[1] = (char *)cmds[i].argv0;
	return stdout_close(cmds[i].fn(argc - 1, argv + 1));
}
