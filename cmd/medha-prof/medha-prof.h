/*
 * medha-prof.h: what the parts of medha-prof share: a backend opened on
 * a model, a pool of its sequences, and the one timing primitive every
 * measurement goes through (prof_time: a batch of sequences at chosen
 * contexts, run over a range of layers, the median over repetitions of
 * where its time went).
 */
#ifndef MEDHA_PROF_H
#define MEDHA_PROF_H

#include "../common.h"
#include "engine/backend.h"
#include "engine/measure.h"

#include <stdint.h>
#include <stdio.h>

#define PROF_SEQS 72 /* sequences a batch may hold */

struct prof {
	const char *backend;  /* the registry's kind (--backend, "cpu") */
	struct medha_backend *be;
	const char *model;    /* the GGUF path */
	const char *name;     /* its short name, for the table's comment */
	int threads;          /* of the backend */
	const char *kv;       /* KV type: "f32", "f16" or "bf16" (--kv;
	                         NULL until checked: the backend's) */
	int device;           /* cuda: the CUDA device (--device) */
	const char *gpu;      /* the predictor's device of the table:
	                         "cpu", or cuda's ("h200") */
	int reps;             /* repetitions of each measurement */
	int attn_layers;      /* layers run to time attention (0: all) */
	int64_t max_tokens;   /* largest linear / lm_head point */
	int64_t max_context;  /* largest context measured */
	int64_t decode_total; /* most KV tokens a decode point reads */
	int quick;            /* a few points only (tests) */
	int thread_clock;     /* --clock thread: the thread's CPU time */
	int progress;         /* progress on stderr */
	int seq[PROF_SEQS];   /* the backend's sequence handles */
	int32_t *ids;         /* token ids of a batch (cap_tokens) */
	float *h;             /* hidden states in and out (cap_tokens x dim) */
	float *logits;        /* (cap_rows x vocab) */
	int64_t cap_tokens, cap_rows;
	struct prof_moe_check *mc; /* --check --moe's batches measured in
	                              the profile's sweeps, or NULL */
};

/* One sequence of a timed batch. */
struct prof_item {
	int64_t tokens; /* new tokens */
	int64_t kv;     /* cached before them */
	int logits;     /* 1: its last token's logits */
};

/*
 * A mixture of experts' --check batches (prof_moe_batches): n batch
 * sizes and the seeds of their draws of ids; once measured (t), in the
 * profile's own sweeps when the profile is made in the same run.
 */
struct prof_moe_check {
	int n;
	int64_t *tok;
	uint64_t *seed;
	struct prof_time *t;
	int measured;
};

/* Where a batch's time went, seconds (medians over the repetitions). */
struct prof_time {
	double total; /* the forward call */
	double attn;  /* attention, over the layers run */
	double head;  /* final norm and logits */
	double moe;   /* the routed FFN, every routed layer run (0: dense) */
	double rest;  /* total - attn - merge - head: the linear layers and
	                 what every batch costs (a routed FFN included) */
	double experts; /* the experts the tokens chose, summed over the
	                   routed layers run */
};

/* One row of the profile (medha-profile(5)). */
struct prof_row {
	const char *op;
	int64_t tokens, kv;
	double us;
};

int prof_open(struct prof *P, char *why, size_t whylen);
void prof_close(struct prof *P);

/*
 * Time n items (n <= PROF_SEQS), sequence i at context items[i].kv,
 * through layers [lo, hi), reps times (0: P->reps). 0 or an error with
 * why.
 */
int prof_time(struct prof *P, const struct prof_item *items, int n, int lo,
    int hi, int reps, struct prof_time *t, char *why, size_t whylen);

/* Progress on stderr when it is a terminal: "what i/n". */
void prof_progress(const struct prof *P, const char *what, int i, int n);

/* Measure the operators and write the medha-profile(5) table to f. */
int prof_table(struct prof *P, FILE *f, char *why, size_t whylen);

/*
 * spp_send and kvp_merge between endpoints in threads of this process
 * (coll.c), appended to rows; *done counts points for the progress line.
 */
int prof_coll(struct prof *P, struct prof_row *rows, int *nrows, int *done,
    int total, char *why, size_t whylen);
int prof_coll_points(const struct prof *P);

/*
 * n random mixed batches, each predicted by p (a table loaded) and
 * measured; prints the error summary on stdout. seed picks the batches.
 */
int prof_check(struct prof *P, const struct medha_pred *p, int n,
    uint64_t seed, char *why, size_t whylen);

/*
 * The chunk-size study: one prompt of `prompt` tokens prefilled in
 * chunks of each size, every batch measured; prints batch times and the
 * prefill overhead against the largest chunk for prompt lengths up to
 * `prompt`, and draws them into png (NULL: no plot). p (may be NULL)
 * adds the predictor's figures beside the measured ones.
 */
int prof_chunks(struct prof *P, int64_t prompt, const char *png,
    const struct medha_pred *p, char *why, size_t whylen);

double prof_median(double *v, int n);

/* The model's routed layers (a mixture of experts; 0: dense). */
int prof_moe_layers(const struct prof *P);

/* draws of random tokens a routed FFN's time averages, per repetition
   (the profile's points, --check's batches) */
#define PROF_MOE_DRAWS 3

/*
 * A mixture of experts: n batches, batch i one sequence of tokens[i]
 * random token ids (drawn from s[i]) run over every layer, timed in
 * PROF_MOE_DRAWS * reps sweeps over all n, each run a draw of its own;
 * t[i] the mean over the draws, the fastest and slowest sixth left out
 * (measure.c). what labels the progress line.
 */
int prof_moe_sweeps(struct prof *P, const int64_t *tokens, int n, uint64_t *s,
    struct prof_time *t, const char *what, char *why, size_t whylen);

/*
 * A mixture of experts: n batch sizes drawn log-uniformly from 1 to 256,
 * each a batch of that many tokens of random ids (seed), its routed FFN
 * timed (prof_moe_sweeps: the mean over draws of the ids) and predicted by
 * p (medha_pred_moe_ffn); prints the error summary on stdout. (check.c)
 */
int prof_check_moe(struct prof *P, const struct medha_pred *p,
    struct prof_moe_check *mc, char *why, size_t whylen);

/*
 * mc's n batch sizes drawn log-uniformly from 1 to 256 (seed), and the
 * seeds of their draws of ids; 0 or MEDHA_ENOMEM. prof_moe_check_free
 * frees what it holds.
 */
int prof_moe_batches(struct prof_moe_check *mc, int n, uint64_t seed);
void prof_moe_check_free(struct prof_moe_check *mc);

#endif
