/*
 * gen.h: what the parts of "medha-trace gen" share: the generator's
 * state and shapes (gen.c), the --base mixing (gen_base.c) and the
 * workloads with shared prefixes (gen_share.c).
 */
#ifndef MEDHA_TRACE_GEN_H
#define MEDHA_TRACE_GEN_H

#include "medha-trace.h"

#define Z90 1.2815515655446004 /* standard normal 90th percentile */

/* Log-normal shapes: median, and sigma (from the median and P90). */
#define SHORT_PROMPT_MEDIAN 1730.0 /* ShareGPT4: P50 1730, P90 5696 */
#define SHORT_PROMPT_P90 5696.0
#define SHORT_OUTPUT_MEDIAN 415.0 /* P50 415, P90 834 */
#define SHORT_OUTPUT_P90 834.0
#define LONG_PROMPT_MEDIAN 393000.0 /* Medha-SWE: P50 393K, P90 ~840K */
#define LONG_PROMPT_SIGMA 0.6
#define LONG_OUTPUT_MEDIAN 518.0 /* P50 518, P90 ~810 */
#define LONG_OUTPUT_SIGMA 0.35

/*
 * Reference prefill time of p tokens: Llama-3-8B on 16 A100s at 50% of
 * peak. 2 x 8e9 linear FLOPs a token, plus causal attention 2 p^2 d h_q L
 * (d 128, h_q 32, L 32), over 16 x 312e12 x 0.5 FLOP/s.
 */
#define REF_LINEAR 1.6e10
#define REF_ATTN 262144.0
#define REF_FLOPS 2.496e15

struct gen {
	double qps;        /* -q: mean arrival rate, requests/s */
	double duration;   /* -t: stop at the first arrival >= this (s) */
	int64_t count;     /* -n: requests to write; 0: use duration */
	uint64_t seed;     /* -s */
	double long_frac;  /* -l: probability that a request is long */
	int64_t long_min;  /* --long-min: long prompt bounds (tokens) */
	int64_t long_max;  /* --long-max */
	int64_t short_max; /* --short-max: short prompt + output cap */
	double ttft_floor; /* --ttft-floor: least TTFT SLO (s) */
	double ttft_mult;  /* --ttft-mult: TTFT SLO / reference prefill time */
	double tpot_slo;   /* --tpot-slo: s per output token */
	struct cap_policy cap; /* --max-tokens-policy, --context */
	uint64_t s[4];     /* xoshiro256** state */
};

/* Shared prefixes (gen_share.c): medha-trace(1), "Shared prefixes". */
struct gen_share {
	int64_t nsys;       /* --system-prompts: distinct ones (0: none) */
	int64_t sys_tokens; /* --system-tokens: each one's length */
	double sys_frac;    /* --system-fraction: of requests that have one */
	int64_t turns;      /* --turns: of each conversation (1: none) */
	double think;       /* --think: mean s from a turn to the next */
	int64_t ctx_max;    /* --context-max: a conversation ends before */
	int64_t doc_tokens; /* --doc-tokens: the document (0: none) */
	int64_t questions;  /* --questions: about it, over -t */
	uint64_t s[4];      /* its own stream: the base one stays aligned */
};

/* 1 if any of sh's workloads is asked for. */
int share_active(const struct gen_share *sh);
/*
 * The trace with shared prefixes to w: Q questions about a document
 * over -t, or the synthetic stream (-n or -t) with system prompts and
 * each request the first turn of a conversation. Returns 0 or 1
 * (logged).
 */
int gen_shared(struct gen *g, struct gen_share *sh, int64_t max_tokens,
    struct medha_writer *w);

/* --base: -l at most this (99 long requests per base request) */
#define MAX_MIXED_FRAC 0.99

uint64_t rng_next(uint64_t s[4]);
/* Uniform in the open interval (0, 1). */
double rng_uniform(uint64_t s[4]);
int64_t clamp(double v, int64_t lo, int64_t hi);
/* SLOs for a request that has none: see medha-trace(1). */
void set_slos(const struct gen *g, struct medha_reqspec *rs);
/* by arrival, for qsort of struct medha_reqspec */
int by_arrival(const void *a, const void *b);
/* The next request of the synthetic stream after *t; 0 past -t. */
int gen_next(struct gen *g, double *t, struct medha_reqspec *rs);
/* A long request's lengths from two standard normal deviates. */
void
long_shape(const struct gen *g, double z1, double z2, struct medha_reqspec *rs);
/* --base file: the trace with long requests mixed in, to w; 0 or 1. */
int gen_mixed(struct gen *g, const char *path, struct medha_writer *w);

#endif
