/*
 * medha-worker.h: what the parts of medha-worker share: the command
 * line as parsed (main.c) and the one-shot mode that runs it (oneshot.c).
 */
#ifndef MEDHA_WORKER_CMD_H
#define MEDHA_WORKER_CMD_H

#include "../common.h"
#include "engine/backend.h"
#include "engine/runner.h"
#include "model/sample.h"
#include "serve/worker/worker.h"

#include <stdint.h>

/* The command line: what each flag set (its default in parse_args). */
struct args {
	const char *model;       /* -m: a GGUF file, or for sim and cuda a
	                            shape name (llama3-8b) */
	const char *addr;        /* -s: the scheduler (NULL: one-shot) */
	const char *prompt;      /* -p */
	const char *pfile;       /* -f: the prompt's file ("-": stdin) */
	const char *logits_path; /* --logits */
	const char *step_logits; /* --step-logits */
	const char *logprobs;    /* --logprobs */
	const char *sys_msg;     /* --system */
	const char *backend;     /* --backend */
	const char *gpu;         /* --gpu (NULL: a100, or cuda's device) */
	const char *kv;          /* --kv (NULL: the backend's default) */
	int64_t kv_blocks;       /* --kv-blocks (0: the backend's choice) */
	int64_t max_seqs;        /* --max-seqs (0: the backend's choice) */
	double speed;            /* --speed */
	int64_t n_gen;           /* -n */
	int64_t chunk;           /* -c */
	int chat, ignore_eos, tokenize, as_ids, verbose, seed_set;
	const char *cuda_flag;   /* the last flag given of cuda's own */
	struct medha_runner_opts ro;    /* -t, --kv, --llama-compat */
	struct medha_sampler_params sp; /* --seed, --temp, --top-k, --top-p */
	struct medha_worker_config wo;  /* --tp --spp --kvp --rank --peer ... */
	/* what the backend is opened with beyond the above: cuda's
	   --mem-util, --device, --coll, --seed (random weights), --kv */
	struct medha_backend_params bp;
};

/* One-shot mode (-p or -f): the prompt run and generated from; returns
   the exit status (exits 1 itself on most failures) */
int oneshot_main(struct args *a);

#endif
