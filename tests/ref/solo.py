"""solo.py: the live tests' check against the single process.

  solo.py trace OUT MAX_TOKENS K...
      sixteen greedy requests arriving at once: eight short prompts and
      eight long ones (a paragraph repeated K times each)
  solo.py check TRACE OUT WORKER MODEL LABEL
      one "ok" record for every request of TRACE in OUT (records with
      --token-ids), each with exactly the tokens WORKER -m MODEL -p gives
      for its prompt alone (with the flags of $MEDHA_SOLO_OPTS too, such
      as "--backend cuda"); prints how many differ and exits 1 if any.
      The tokens alone are kept in alone.json beside TRACE (JSON, by
      worker, model, their times, flags, prompt and max_tokens), so
      that checking several topologies of one model, or several traces
      sharing prompts, runs each prompt alone once
  solo.py ids TRACE WORKER MODEL OUT
      each request of TRACE as a line of OUT: its max_tokens, then its
      prompt's token ids (WORKER -m MODEL -p PROMPT --tokenize), the
      input of tests/tools/topo_dist
"""
import json
import os
import subprocess
import sys

BASE = ["The capital of France is", "Once upon a time",
        "Write a haiku about the sea.", "def fibonacci(n):",
        "List three prime numbers:", "The quick brown fox",
        "In 1969, the first humans", "Water boils at"]
LONG = ("Medha serves long prompts by splitting them into chunks that "
        "share each batch with the decodes of other requests. ")


def trace(out, max_tokens, ks):
    prompts = BASE + [LONG * k + "In short," for k in ks]
    with open(out, "w") as f:
        for i, p in enumerate(prompts):
            f.write(json.dumps({"id": "p%d" % i, "arrival": 0, "prompt": p,
                                "max_tokens": max_tokens,
                                "temperature": 0}) + "\n")


def alone(cache, worker, model, t):
    """The tokens worker -m model -p gives for request t alone."""
    opts = os.environ.get("MEDHA_SOLO_OPTS", "").split()
    # the files' times too: a rebuilt worker or rewritten model misses
    key = json.dumps([worker, os.stat(worker).st_mtime_ns, model,
                      os.stat(model).st_mtime_ns, opts, t["prompt"],
                      t["max_tokens"]])
    if key not in cache:
        solo = subprocess.run([worker, "-m", model, "-p", t["prompt"],
                               "-n", str(t["max_tokens"]), "--tokens",
                               "-t", "2"] + opts,
                              capture_output=True, text=True,
                              check=True).stdout
        cache[key] = [int(x) for x in solo.split()]
    return cache[key]


def check(trace_path, out_path, worker, model, label):
    trace = [json.loads(l) for l in open(trace_path)]
    cache_path = os.path.join(os.path.dirname(trace_path), "alone.json")
    cache = json.load(open(cache_path)) if os.path.exists(cache_path) \
        else {}
    out = [json.loads(l) for l in open(out_path)]
    ids = [r["id"] for r in out]
    assert sorted(ids) == sorted(t["id"] for t in trace), ids
    assert len(set(ids)) == len(ids), "a request with two records"
    bad = 0
    for t in trace:
        r = next(o for o in out if o["id"] == t["id"])
        assert r["status"] == "ok", r
        want = alone(cache, worker, model, t)
        if r["token_ids"] != want:
            bad += 1
            print("%s (%d prompt tokens): %s %s, alone %s" %
                  (t["id"], r["prompt_tokens"], label, r["token_ids"], want))
        assert r["output_tokens"] == len(r["token_ids"])
        assert r["finish_reason"] in ("length", "stop")
        assert r["ttft"] >= 0
        assert r["finish"] >= r["first_token"] >= r["arrival"]
    with open(cache_path, "w") as f:
        json.dump(cache, f)
    print("%s on %s: %d requests, %d differ from medha-worker -p; prompts "
          "of %d..%d tokens" %
          (label, model.split("/")[-1], len(trace), bad,
           min(r["prompt_tokens"] for r in out),
           max(r["prompt_tokens"] for r in out)))
    return bad


def ids(trace_path, worker, model, out):
    with open(out, "w") as f:
        for l in open(trace_path):
            t = json.loads(l)
            tok = subprocess.run([worker, "-m", model, "-p", t["prompt"],
                                  "--tokenize"], capture_output=True,
                                 text=True, check=True).stdout.split()
            f.write("%d %s\n" % (t["max_tokens"], " ".join(tok)))


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "trace":
        trace(sys.argv[2], int(sys.argv[3]), [int(k) for k in sys.argv[4:]])
    elif len(sys.argv) == 6 and sys.argv[1] == "ids":
        ids(*sys.argv[2:])
    elif len(sys.argv) == 7 and sys.argv[1] == "check":
        sys.exit(1 if check(*sys.argv[2:]) else 0)
    else:
        sys.exit(__doc__)
