/*
 * medha-worker.h: what medha-worker's command line (main.c) and its
 * one-shot mode (oneshot.c) share.
 */
#ifndef MEDHA_WORKER_CMD_H
#define MEDHA_WORKER_CMD_H

#include "../common.h"
#include "engine/runner.h"
#include "serve/worker.h"

/* The command line: what each flag set (its default in parse_args). */
struct args {
	const char *model;       /* -m: a GGUF file, or for sim a name */
	const char *addr;        /* -s: the scheduler (NULL: one-shot) */
	const char *prompt;      /* -p */
	const char *pfile;       /* -f: the prompt's file ("-": stdin) */
	const char *logits_path; /* --logits */
	const char *step_logits; /* --step-logits */
	const char *logprobs;    /* --logprobs */
	const char *sys_msg;     /* --system */
	const char *backend;     /* --backend */
	const char *gpu;         /* --gpu */
	int64_t kv_blocks;       /* --kv-blocks (0: the backend's choice) */
	int64_t max_seqs;        /* --max-seqs (0: the backend's choice) */
	double speed;            /* --speed */
	int64_t n_gen;           /* -n */
	int64_t chunk;           /* -c */
	int chat, ignore_eos, tokenize, as_ids, verbose, seed_set;
	struct medha_runner_opts ro;    /* -t, --kv, --llama-compat */
	struct medha_sampler_params sp; /* --seed, --temp, --top-k, --top-p */
	struct medha_worker_config wo;  /* --tp --spp --kvp --rank --peer ... */
};

/* One-shot mode (-p or -f): the prompt run and its tokens printed. */
int oneshot_main(struct args *a);

#endif
