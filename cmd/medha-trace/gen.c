/*
 * gen.c: "medha-trace gen", the synthetic workload of the Medha paper.
 * Poisson arrivals; each request is long with a given probability. Short
 * requests follow ShareGPT4's shape (log-normal prompt and output, capped
 * to 8K tokens in all), long ones Medha-SWE's (log-normal prompt of a few
 * hundred thousand tokens, clipped to [128K, 1M]). TTFT SLOs scale with a
 * reference prefill time of the prompt, so a 1M-token prompt may take
 * minutes and a chat prompt under a second. The generator is its own
 * seeded xoshiro256** so that a seed gives the same trace everywhere.
 *
 * With --base FILE the short requests are a real trace instead (Azure,
 * Vidur or medha format), and long requests are mixed in at Poisson times
 * over its span, so that they make up the given fraction of the whole.
 */
#include "gen.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* ---- random numbers ---- */

static uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna). */
uint64_t
rng_next(uint64_t s[4])
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/* Uniform in the open interval (0, 1). */
double
rng_uniform(uint64_t s[4])
{
	return ((double)(rng_next(s) >> 11) + 0.5) * 0x1.0p-53;
}

int64_t
clamp(double v, int64_t lo, int64_t hi)
{
	if (!(v >= (double)lo)) /* NaN too */
		return lo;
	if (v >= (double)hi)
		return hi;
	return llround(v) < lo ? lo : llround(v);
}

static double
ref_prefill(double p)
{
	return (REF_LINEAR * p + REF_ATTN * p * p) / REF_FLOPS;
}

/* SLOs for a request that has none: see medha-trace(1). */
void
set_slos(const struct gen *g, struct medha_reqspec *rs)
{
	double ref = g->ttft_mult * ref_prefill((double)rs->prompt_tokens);

	if (rs->ttft_slo <= 0)
		rs->ttft_slo = ref > g->ttft_floor ? ref : g->ttft_floor;
	if (rs->ttft_slo > MEDHA_TIME_MAX) /* a 1G prompt at --ttft-mult 1e6 */
		rs->ttft_slo = MEDHA_TIME_MAX;
	if (rs->tpot_slo <= 0)
		rs->tpot_slo = g->tpot_slo;
}

/* A long request's lengths from two standard normal deviates. */
void
long_shape(const struct gen *g, double z1, double z2, struct medha_reqspec *rs)
{
	rs->prompt_tokens =
	    clamp(LONG_PROMPT_MEDIAN * exp(LONG_PROMPT_SIGMA * z1), g->long_min,
	        g->long_max);
	rs->max_tokens = clamp(LONG_OUTPUT_MEDIAN * exp(LONG_OUTPUT_SIGMA * z2),
	    1, MEDHA_TOKENS_MAX);
}

int
by_arrival(const void *a, const void *b)
{
	const struct medha_reqspec *x = a, *y = b;

	return (x->arrival > y->arrival) - (x->arrival < y->arrival);
}

/*
 * One request after the one arriving at *t. Every request draws four
 * uniforms (gap, class, and a Box-Muller pair for prompt and output) so
 * the stream stays aligned whatever the flags. Returns 0 when a duration
 * is set and the arrival passes it.
 */
int
gen_next(struct gen *g, double *t, struct medha_reqspec *rs)
{
	double u1, u2, r, z1, z2;
	int is_long;

	*t += -log(rng_uniform(g->s)) / g->qps;
	is_long = rng_uniform(g->s) < g->long_frac;
	u1 = rng_uniform(g->s);
	u2 = rng_uniform(g->s);
	if (g->count == 0 && *t >= g->duration)
		return 0;
	r = sqrt(-2 * log(u1));
	z1 = r * cos(2 * M_PI * u2);
	z2 = r * sin(2 * M_PI * u2);
	if (is_long) {
		long_shape(g, z1, z2, rs);
	} else {
		rs->max_tokens = clamp(SHORT_OUTPUT_MEDIAN *
		        exp(log(SHORT_OUTPUT_P90 / SHORT_OUTPUT_MEDIAN) / Z90 *
		            z2),
		    1, g->short_max / 2);
		rs->prompt_tokens = clamp(SHORT_PROMPT_MEDIAN *
		        exp(log(SHORT_PROMPT_P90 / SHORT_PROMPT_MEDIAN) / Z90 *
		            z1),
		    1, g->short_max - rs->max_tokens);
	}
	rs->arrival = *t;
	rs->ttft_slo = rs->tpot_slo = 0;
	set_slos(g, rs);
	return 1;
}

/* ---- the subcommand ---- */

enum {
	OPT_BASE = 256,
	OPT_LONG_MAX,
	OPT_LONG_MIN,
	OPT_SHORT_MAX,
	OPT_TPOT_SLO,
	OPT_TTFT_FLOOR,
	OPT_TTFT_MULT,
	OPT_PROMPTS,
	OPT_MAX_TOKENS,
	OPT_SYS,
	OPT_SYS_TOKENS,
	OPT_SYS_FRAC,
	OPT_TURNS,
	OPT_THINK,
	OPT_CTX_MAX,
	OPT_DOC,
	OPT_QUESTIONS,
	OPT_CAP,
	OPT_CONTEXT,
};

/*
 * --prompts: the non-empty lines of path, for text prompts. Returns the
 * count (at least 1) and *lines (malloc'd, each line malloc'd), or
 * exits 1 after saying why.
 */
static size_t
read_prompts(const char *path, char ***lines)
{
	FILE *f = fopen(path, "r");
	size_t n = 0, cap = 0, len = 0;
	char *line = NULL, **v = NULL;
	ssize_t got;

	if (f == NULL)
		die(1, "--prompts %s: %s", path, strerror(errno));
	while ((got = getline(&line, &len, f)) >= 0) {
		while (
		    got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
			line[--got] = '\0';
		if (got == 0 || strlen(line) != (size_t)got)
			continue; /* blank, or a NUL inside */
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			if ((v = medha_reallocarray(v, cap, sizeof(*v))) ==
			    NULL)
				die(1, "out of memory");
		}
		if ((v[n++] = strdup(line)) == NULL)
			die(1, "out of memory");
	}
	free(line);
	if (ferror(f) || n == 0)
		die(1, "--prompts %s: %s", path,
		    ferror(f) ? "read error" : "no prompts in it");
	fclose(f);
	*lines = v;
	return n;
}

#define COUNT_MAX 1000000000LL /* bound of -n */

/* -h: every option of longopts below, as medha-trace(1) says */
static const struct medha_help gen_help[] = {
    {"-h, --help", "print this help and exit"},
    {"-l, --long-fraction fraction",
        "probability a request is long, in [0, 1] (0.05)"},
    {"-n, --count count",
        "write exactly count requests (1 to 1e9); not with -t"},
    {"-o, --output file", "write to file, not stdout (.zst: compressed)"},
    {"-q, --qps qps", "mean arrivals per second, in (0, 1e6] (1)"},
    {"-s, --seed seed", "seed of the generator, 0 to 2^63-1 (1)"},
    {"-t, --duration seconds",
        "stop at the first arrival at seconds or later (3600)"},
    {"--base file", "short requests from this trace, long ones mixed in"},
    {"--context tokens|model", "context length (a model: its own)"},
    {"--context-max tokens",
        "a conversation ends before a turn passes this (32768)"},
    {"--doc-tokens n", "questions about one document of n tokens, over -t"},
    {"--long-max tokens", "longest long prompt (1048576: 1M)"},
    {"--long-min tokens", "shortest long prompt, at most --long-max (131072)"},
    {"--max-tokens n", "truncate every generated length at n (no cap)"},
    {"--max-tokens-policy actual|context|N",
        "max_tokens: real, context - prompt, N"},
    {"--prompts file", "text prompts, file's lines in turn; not with --base"},
    {"--questions n", "with --doc-tokens: how many (32)"},
    {"--short-max tokens",
        "most tokens of a short request, prompt + output (8192)"},
    {"--system-fraction f", "of requests with a system prompt (1)"},
    {"--system-prompts n", "n distinct shared system prompts (0: none)"},
    {"--system-tokens n", "tokens of each system prompt (1000)"},
    {"--think seconds", "mean time from a turn to the next (60)"},
    {"--tpot-slo seconds", "TPOT SLO of every request, > 0 (0.1 s)"},
    {"--ttft-floor seconds", "least TTFT SLO, >= 0 (0.5 s)"},
    {"--ttft-mult factor",
        "TTFT SLO: factor x the reference prefill time (1.5)"},
    {"--turns n", "each request starts a conversation of n turns (1)"},
};

/* gen's flags beyond the generator's own (struct gen). */
struct gen_opts {
	const char *out;     /* -o (NULL: stdout) */
	const char *base;    /* --base: a real trace for the short ones */
	const char *prompts; /* --prompts: text prompts, one a line */
	int64_t max_tokens;  /* --max-tokens: output cap (0: none) */
	int have_t, have_q;  /* -t, -q given */
};

/* The checks between flags (and no operand); exits 2 on a usage error. */
static void
gen_check(const struct gen *g, const struct gen_opts *o,
    const struct gen_share *sh, int argc)
{
	if (optind != argc)
		usage();
	if (share_active(sh) && (o->base != NULL || o->prompts != NULL))
		die(2, "shared prefixes are made of token counts: no --base, "
		       "--prompts");
	if (sh->doc_tokens > 0 && (g->count != 0 || sh->nsys > 0 ||
	                              sh->turns > 1))
		die(2, "--doc-tokens: questions over -t, no -n, "
		       "--system-prompts, --turns");
	if (o->have_t && g->count != 0) {
		medha_log(MEDHA_LOG_ERROR, "-n and -t exclude each other");
		usage();
	}
	if (o->base != NULL && (o->have_t || o->have_q || g->count != 0)) {
		medha_log(MEDHA_LOG_ERROR,
		    "--base takes its times from the base trace: no -n, -q, "
		    "-t");
		usage();
	}
	if (o->base != NULL && (o->prompts != NULL || o->max_tokens != 0)) {
		medha_log(MEDHA_LOG_ERROR,
		    "--base keeps the base trace's requests: no --prompts, "
		    "--max-tokens");
		usage();
	}
	if (o->base != NULL && g->long_frac > MAX_MIXED_FRAC)
		/* the base's requests are all kept: a fraction near 1 asks
		   for unboundedly many long ones per base request */
		die(2,
		    "--base keeps the base trace's requests: -l at most %g (%g "
		    "long requests per base request); without --base, -l 1 "
		    "gives only long requests",
		    MAX_MIXED_FRAC, MAX_MIXED_FRAC / (1 - MAX_MIXED_FRAC));
	if (g->cap.kind == CAP_CONTEXT && o->prompts != NULL)
		die(2, "--max-tokens-policy context needs prompt lengths: not "
		       "with --prompts");
	if (g->long_min > g->long_max)
		die(2, "--long-min %lld exceeds --long-max %lld",
		    (long long)g->long_min, (long long)g->long_max);
}

/*
 * The synthetic trace to w: -n requests, or those arriving within -t;
 * the nprompts texts of ptext in turn as prompts. Returns 0, or
 * non-zero after a write error (out_close says why) or an arrival past
 * the format's limit (logged).
 */
static int
gen_write(struct gen *g, const struct gen_opts *o, char **ptext,
    size_t nprompts, struct medha_writer *w)
{
	struct medha_reqspec rs = {0};
	double t = 0;
	int rc = 0;

	for (int64_t i = 0; g->count == 0 || i < g->count; i++) {
		if (!gen_next(g, &t, &rs))
			break;
		rs.output_tokens = 0; /* the last one's cap_apply's */
		if (rs.arrival > MEDHA_TIME_MAX) {
			/* -n at a tiny -q: not writable (medha-trace(5)) */
			medha_log(MEDHA_LOG_ERROR,
			    "request %lld arrives at %.9g s, past the limit "
			    "of %.15g s: ask for fewer (-n) or a higher rate "
			    "(-q)",
			    (long long)i, rs.arrival, MEDHA_TIME_MAX);
			return 1;
		}
		snprintf(rs.id, sizeof(rs.id), "%lld", (long long)i);
		if (o->max_tokens > 0 && rs.max_tokens > o->max_tokens)
			rs.max_tokens = o->max_tokens;
		if ((rc = cap_apply(&g->cap, &rs)) != 0)
			return 1;
		if (nprompts > 0) {
			/* a text prompt in turn, its length the model's */
			rs.prompt = ptext[i % (int64_t)nprompts];
			rs.prompt_tokens = 0;
		}
		rc = medha_reqspec_write(w, &rs);
		rs.prompt = NULL;
		if (rc != 0)
			break; /* out_close says why */
	}
	return rc;
}

/* A shared-prefix flag (gen_share.c) into *sh: 1, or 0 if ch is none. */
static int
share_flag(struct gen_share *sh, int ch, const char *optarg)
{
	switch (ch) {
	case OPT_SYS:
		sh->nsys = flag_i64("--system-prompts", optarg, 0,
		    COUNT_MAX);
		break;
	case OPT_SYS_TOKENS:
		sh->sys_tokens = flag_i64("--system-tokens", optarg, 1,
		    MEDHA_TOKENS_MAX / 2);
		break;
	case OPT_SYS_FRAC:
		sh->sys_frac =
		    flag_f64("--system-fraction", optarg, 0, 1, 0);
		break;
	case OPT_TURNS:
		sh->turns = flag_i64("--turns", optarg, 1,
		    MEDHA_SEG_MAX / 2 - 1);
		break;
	case OPT_THINK:
		sh->think = flag_f64("--think", optarg, 0, 1e6, 0);
		break;
	case OPT_CTX_MAX:
		sh->ctx_max = flag_i64("--context-max", optarg, 2,
		    MEDHA_TOKENS_MAX / 2);
		break;
	case OPT_DOC:
		sh->doc_tokens = flag_i64("--doc-tokens", optarg, 1,
		    MEDHA_TOKENS_MAX / 2);
		break;
	case OPT_QUESTIONS:
		sh->questions =
		    flag_i64("--questions", optarg, 1, COUNT_MAX);
		break;
	default: return 0;
	}
	return 1;
}

/*
 * The option table and the getopt_long loop stay here, in trace_gen()
 * itself: tests/sh/help.sh reads them from its body.
 */
int
trace_gen(int argc, char *argv[])
{
	static const struct option longopts[] = {
	    {"base", required_argument, NULL, OPT_BASE},
	    {"context", required_argument, NULL, OPT_CONTEXT},
	    {"context-max", required_argument, NULL, OPT_CTX_MAX},
	    {"doc-tokens", required_argument, NULL, OPT_DOC},
	    {"count", required_argument, NULL, 'n'},
	    {"duration", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {"long-fraction", required_argument, NULL, 'l'},
	    {"long-max", required_argument, NULL, OPT_LONG_MAX},
	    {"max-tokens", required_argument, NULL, OPT_MAX_TOKENS},
	    {"max-tokens-policy", required_argument, NULL, OPT_CAP},
	    {"long-min", required_argument, NULL, OPT_LONG_MIN},
	    {"output", required_argument, NULL, 'o'},
	    {"prompts", required_argument, NULL, OPT_PROMPTS},
	    {"questions", required_argument, NULL, OPT_QUESTIONS},
	    {"qps", required_argument, NULL, 'q'},
	    {"seed", required_argument, NULL, 's'},
	    {"short-max", required_argument, NULL, OPT_SHORT_MAX},
	    {"system-fraction", required_argument, NULL, OPT_SYS_FRAC},
	    {"system-prompts", required_argument, NULL, OPT_SYS},
	    {"system-tokens", required_argument, NULL, OPT_SYS_TOKENS},
	    {"think", required_argument, NULL, OPT_THINK},
	    {"tpot-slo", required_argument, NULL, OPT_TPOT_SLO},
	    {"ttft-floor", required_argument, NULL, OPT_TTFT_FLOOR},
	    {"ttft-mult", required_argument, NULL, OPT_TTFT_MULT},
	    {"turns", required_argument, NULL, OPT_TURNS},
	    {NULL, 0, NULL, 0},
	};
	struct gen g = {
	    .qps = 1,         /* one request a second */
	    .duration = 3600, /* an hour, unless -n */
	    .count = 0,
	    .seed = 1,
	    .long_frac = 0.05,   /* the paper's 5% long requests */
	    .long_min = 131072,  /* 128K */
	    .long_max = 1048576, /* 1M */
	    .short_max = 8192,   /* ShareGPT4 capped at 8K */
	    .ttft_floor = 0.5,
	    .ttft_mult = 1.5,
	    .tpot_slo = 0.1,
	};
	struct gen_opts o = {
	    .out = NULL,     /* -o: stdout */
	    .base = NULL,    /* no --base: all synthetic */
	    .prompts = NULL, /* no --prompts: token counts only */
	    .max_tokens = 0, /* no --max-tokens: no cap */
	};
	struct gen_share sh = {
	    .sys_tokens = 1000,
	    .sys_frac = 1,
	    .turns = 1,
	    .think = 60,
	    .ctx_max = 32768,
	    .questions = 32,
	};
	struct medha_writer *w;
	char **ptext = NULL;
	size_t nprompts = 0;
	uint64_t x;
	int64_t context = 0; /* --context: none */
	FILE *f;
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "hl:n:o:q:s:t:", longopts,
	            NULL)) != -1) {
		switch (ch) {
		case 'h': HELP("gen", gen_help);
		case 'l': g.long_frac = flag_f64("-l", optarg, 0, 1, 0); break;
		case 'n': g.count = flag_i64("-n", optarg, 1, COUNT_MAX); break;
		case 'o': o.out = optarg; break;
		case 'q':
			g.qps = flag_f64("-q", optarg, 0, 1e6, 1);
			o.have_q = 1;
			break;
		case 's': g.seed = flag_i64("-s", optarg, 0, INT64_MAX); break;
		case 't':
			g.duration =
			    flag_f64("-t", optarg, 0, MEDHA_TIME_MAX, 1);
			o.have_t = 1;
			break;
		case OPT_BASE: o.base = optarg; break;
		case OPT_PROMPTS: o.prompts = optarg; break;
		case OPT_CAP: cap_parse(&g.cap, optarg); break;
		case OPT_CONTEXT: context = cap_context(optarg); break;
		case OPT_MAX_TOKENS:
			o.max_tokens = flag_i64("--max-tokens", optarg, 1,
			    MEDHA_TOKENS_MAX);
			break;
		case OPT_LONG_MAX:
			g.long_max =
			    flag_i64("--long-max", optarg, 1, MEDHA_TOKENS_MAX);
			break;
		case OPT_LONG_MIN:
			g.long_min =
			    flag_i64("--long-min", optarg, 1, MEDHA_TOKENS_MAX);
			break;
		case OPT_SHORT_MAX:
			g.short_max = flag_i64("--short-max", optarg, 2,
			    MEDHA_TOKENS_MAX);
			break;
		case OPT_TPOT_SLO:
			g.tpot_slo = flag_f64("--tpot-slo", optarg, 0, 1e6, 1);
			break;
		case OPT_TTFT_FLOOR:
			g.ttft_floor = flag_f64("--ttft-floor", optarg, 0,
			    MEDHA_TIME_MAX, 0);
			break;
		case OPT_TTFT_MULT:
			g.ttft_mult =
			    flag_f64("--ttft-mult", optarg, 0, 1e6, 1);
			break;
		default:
			if (!share_flag(&sh, ch, optarg))
				usage();
		}
	}
	cap_check(&g.cap, context);
	g.cap.context = context;
	gen_check(&g, &o, &sh, argc);

	if (o.prompts != NULL)
		nprompts = read_prompts(o.prompts, &ptext);
	x = g.seed;
	for (int i = 0; i < 4; i++)
		g.s[i] = splitmix64(&x);
	for (int i = 0; i < 4; i++) /* the shared prefixes' own stream */
		sh.s[i] = splitmix64(&x);
	if ((f = out_open(o.out, &w)) == NULL)
		return 1;
	if (share_active(&sh))
		rc = gen_shared(&g, &sh, o.max_tokens, w);
	else if (o.base != NULL)
		rc = gen_mixed(&g, o.base, w);
	else
		rc = gen_write(&g, &o, ptext, nprompts, w);
	for (size_t k = 0; k < nprompts; k++)
		free(ptext[k]);
	free(ptext);
	return out_close(o.out, f, w) != 0 || rc != 0;
}
