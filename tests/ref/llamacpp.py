#!/usr/bin/env python3
"""llamacpp.py: llama.cpp as the reference for medha's tests and benchmarks.

It drives the llama.cpp C API that the prebuilt xllamacpp wheel carries in
its extension module (xllamacpp/xllamacpp.abi3.so) through ctypes; the
package itself is never imported (find_spec locates it). Nothing here is
part of the product: it gives the numbers medha is checked against.

    python llamacpp.py tokenize MODEL FILE       ids of FILE's bytes, one line
    python llamacpp.py tokenize --jsonl MODEL CORPUS
                                                 one line of ids per JSON string
    python llamacpp.py detokenize MODEL IDS...   the ids' bytes (pieces joined)
    python llamacpp.py pieces MODEL              every token's bytes in hex, one
                                                 line per id ("-" if none)
    python llamacpp.py chat MODEL TEXT           llama_chat_apply_template of one
                                                 user message, the model's template
    python llamacpp.py chat --jsonl MODEL CORPUS the same for each JSON string, in
                                                 hex, one line each
    python llamacpp.py logits [-o FILE] MODEL IDS...
                                                 float32 LE logits of the last
                                                 position (vocab-sized), stdout
                                                 unless -o
    python llamacpp.py greedy MODEL N IDS...     N greedy (argmax) ids after IDS
    python llamacpp.py runs MODEL IDSFILE N OUT [MODEL IDSFILE N OUT]...
                                                 for each four: OUT.f32, the
                                                 logits (as logits), and with
                                                 N > 0 OUT.ids, N greedy ids
                                                 (as greedy); one process, each
                                                 model loaded once
    python llamacpp.py bench [-t T] [-r R] MODEL pp512 and tg128 tokens/s
    python llamacpp.py batch FILE                each line of FILE: a file name,
                                                 then a command above (words as
                                                 the shell splits them), whose
                                                 output goes to the file; one
                                                 process, each model loaded once

Tokenization is llama.cpp's command-line default: add_special (BOS only if
the vocabulary asks for it) and parse_special (text such as <|im_start|>
becomes the special token). Options shared by logits/greedy/runs/bench:
-t THREADS (default 2), --kv f16|f32 (KV cache type, default f16 as in
llama.cpp), --fa auto|on|off (flash attention, default auto). The thread
count does not change the numbers (each dot product is one thread's); the
tests ask for one, since ggml's threads spin at every operation and on a
busy 2-core machine two of them run four times slower than one. Set
LLAMACPP_LOG=1 to see llama.cpp's own log on stderr.

The C API passes llama_model_params and llama_context_params by value, so
their layout must be the one of this build. It was taken from llama.h of
the same era (with load_mode/lazy_mode/load_mtp and n_outputs_max_per_seq)
and checked against the defaults llama_*_default_params() return and the
values a context reports back (n_ctx, n_batch, n_threads); check_layout()
repeats that check at every load and refuses to go on if it fails.
"""

import ctypes as C
import importlib.util
import json
import os
import shlex
import struct
import sys
import time

try:
    import numpy as np  # faster logits; the lists below work without it
except ImportError:
    np = None

# ---------------------------------------------------------------- the library

llama_token = C.c_int32


class ModelParams(C.Structure):
    _fields_ = [
        ("devices", C.c_void_p),
        ("tensor_buft_overrides", C.c_void_p),
        ("n_gpu_layers", C.c_int32),
        ("split_mode", C.c_int32),
        ("load_mode", C.c_int32),   # enum llama_load_mode, -1 auto
        ("lazy_mode", C.c_int32),
        ("main_gpu", C.c_int32),
        ("tensor_split", C.c_void_p),
        ("progress_callback", C.c_void_p),
        ("progress_callback_user_data", C.c_void_p),
        ("kv_overrides", C.c_void_p),
        ("vocab_only", C.c_bool),
        ("check_tensors", C.c_bool),
        ("use_extra_bufts", C.c_bool),
        ("no_host", C.c_bool),
        ("no_alloc", C.c_bool),
        ("load_mtp", C.c_bool),
        # room for fields a newer build might append: harmless, since the
        # struct is returned through a hidden pointer and passed in memory
        ("_reserve", C.c_uint8 * 64),
    ]


class ContextParams(C.Structure):
    _fields_ = [
        ("n_ctx", C.c_uint32),
        ("n_batch", C.c_uint32),
        ("n_ubatch", C.c_uint32),
        ("n_seq_max", C.c_uint32),
        ("n_rs_seq", C.c_uint32),
        ("n_outputs_max", C.c_uint32),
        ("n_outputs_max_per_seq", C.c_uint32),
        ("n_threads", C.c_int32),
        ("n_threads_batch", C.c_int32),
        ("ctx_type", C.c_int32),
        ("rope_scaling_type", C.c_int32),
        ("pooling_type", C.c_int32),
        ("attention_type", C.c_int32),
        ("flash_attn_type", C.c_int32),  # -1 auto, 0 off, 1 on
        ("rope_freq_base", C.c_float),
        ("rope_freq_scale", C.c_float),
        ("yarn_ext_factor", C.c_float),
        ("yarn_attn_factor", C.c_float),
        ("yarn_beta_fast", C.c_float),
        ("yarn_beta_slow", C.c_float),
        ("yarn_orig_ctx", C.c_uint32),
        ("defrag_thold", C.c_float),
        ("cb_eval", C.c_void_p),
        ("cb_eval_user_data", C.c_void_p),
        ("type_k", C.c_int32),  # enum ggml_type: 0 f32, 1 f16
        ("type_v", C.c_int32),
        ("abort_callback", C.c_void_p),
        ("abort_callback_data", C.c_void_p),
        ("_unnamed", C.c_void_p),  # 8 bytes this build has before the bools
        ("embeddings", C.c_bool),
        ("offload_kqv", C.c_bool),
        ("no_perf", C.c_bool),
        ("op_offload", C.c_bool),
        ("swa_full", C.c_bool),
        ("kv_unified", C.c_bool),
        ("samplers", C.c_void_p),
        ("n_samplers", C.c_size_t),
        ("ctx_other", C.c_void_p),
        ("_reserve", C.c_uint8 * 64),
    ]


class Batch(C.Structure):
    _fields_ = [
        ("n_tokens", C.c_int32),
        ("token", C.POINTER(llama_token)),
        ("embd", C.POINTER(C.c_float)),
        ("pos", C.POINTER(C.c_int32)),
        ("n_seq_id", C.POINTER(C.c_int32)),
        ("seq_id", C.POINTER(C.POINTER(C.c_int32))),
        ("logits", C.POINTER(C.c_int8)),
    ]


class ChatMessage(C.Structure):
    _fields_ = [("role", C.c_char_p), ("content", C.c_char_p)]


LOGCB = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)
_lib = None
_logcb = None


def so_path():
    """Path of the xllamacpp extension module, found without importing it."""
    spec = importlib.util.find_spec("xllamacpp")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llamacpp.py: xllamacpp is not installed")
    d = list(spec.submodule_search_locations)[0]
    for name in sorted(os.listdir(d)):
        if name.startswith("xllamacpp") and name.endswith(".so"):
            return os.path.join(d, name)
    raise SystemExit("llamacpp.py: no xllamacpp*.so in " + d)


def _proto(lib, name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)


def lib():
    """The loaded library, prototypes declared, backend initialised."""
    global _lib, _logcb
    if _lib is not None:
        return _lib
    L = C.CDLL(so_path(), mode=C.RTLD_GLOBAL)
    P, I32, U32 = C.c_void_p, C.c_int32, C.c_uint32
    _proto(L, "llama_backend_init", None)
    _proto(L, "llama_log_set", None, LOGCB, P)
    _proto(L, "llama_model_default_params", ModelParams)
    _proto(L, "llama_context_default_params", ContextParams)
    _proto(L, "llama_model_load_from_file", P, C.c_char_p, ModelParams)
    _proto(L, "llama_model_free", None, P)
    _proto(L, "llama_model_get_vocab", P, P)
    _proto(L, "llama_model_chat_template", C.c_char_p, P, C.c_char_p)
    _proto(L, "llama_init_from_model", P, P, ContextParams)
    _proto(L, "llama_free", None, P)
    _proto(L, "llama_n_ctx", U32, P)
    _proto(L, "llama_n_batch", U32, P)
    _proto(L, "llama_n_ubatch", U32, P)
    _proto(L, "llama_n_threads", I32, P)
    _proto(L, "llama_n_threads_batch", I32, P)
    _proto(L, "llama_vocab_n_tokens", I32, P)
    _proto(L, "llama_vocab_bos", I32, P)
    _proto(L, "llama_vocab_eos", I32, P)
    _proto(L, "llama_vocab_get_add_bos", C.c_bool, P)
    _proto(L, "llama_tokenize", I32, P, C.c_char_p, I32,
           C.POINTER(llama_token), I32, C.c_bool, C.c_bool)
    _proto(L, "llama_token_to_piece", I32, P, llama_token, C.c_char_p, I32,
           I32, C.c_bool)
    _proto(L, "llama_detokenize", I32, P, C.POINTER(llama_token), I32,
           C.c_char_p, I32, C.c_bool, C.c_bool)
    _proto(L, "llama_chat_apply_template", I32, C.c_char_p,
           C.POINTER(ChatMessage), C.c_size_t, C.c_bool, C.c_char_p, I32)
    _proto(L, "llama_batch_get_one", Batch, C.POINTER(llama_token), I32)
    _proto(L, "llama_decode", I32, P, Batch)
    _proto(L, "llama_get_logits_ith", C.POINTER(C.c_float), P, I32)
    _proto(L, "llama_get_memory", P, P)
    _proto(L, "llama_memory_clear", None, P, C.c_bool)
    _proto(L, "llama_synchronize", None, P)
    if not os.environ.get("LLAMACPP_LOG"):
        _logcb = LOGCB(lambda level, text, data: None)
        L.llama_log_set(_logcb, None)
    L.llama_backend_init()
    _lib = L
    return L


def check_layout():
    """Refuse to go on if the default parameters do not look like this
    build's: a wrong layout would silently pass garbage by value."""
    L = lib()
    m = L.llama_model_default_params()
    c = L.llama_context_default_params()
    ok = (m.split_mode in (0, 1, 2) and m.main_gpu == 0
          and m.vocab_only is False and m.use_extra_bufts is True
          and c.n_ctx == 512 and c.n_batch == 2048 and c.n_ubatch == 512
          and c.n_seq_max == 1 and c.n_threads >= 1
          and c.n_threads == c.n_threads_batch
          and c.type_k == 1 and c.type_v == 1
          and c.offload_kqv is True and c.embeddings is False)
    if not ok:
        raise SystemExit("llamacpp.py: llama_*_params layout does not match "
                         "this llama.cpp build; fix the ctypes structs")


# ---------------------------------------------------------------- model

class Model:
    """A loaded GGUF (vocab_only: tokenizer only) and, on demand, a context."""

    def __init__(self, path, vocab_only=False):
        L = lib()
        check_layout()
        mp = L.llama_model_default_params()
        mp.vocab_only = vocab_only
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise SystemExit("llamacpp.py: cannot load " + path)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.ctx = None

    def close(self):
        L = lib()
        if self.ctx:
            L.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            L.llama_model_free(self.model)
            self.model = None

    # ---- tokenizer

    def tokenize(self, text, add_special=True, parse_special=True):
        """ids of text (bytes or str), as llama_tokenize gives them."""
        if isinstance(text, str):
            text = text.encode("utf-8", "surrogateescape")
        L = lib()
        cap = len(text) + 16
        buf = (llama_token * cap)()
        n = L.llama_tokenize(self.vocab, text, len(text), buf, cap,
                             add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama_token * cap)()
            n = L.llama_tokenize(self.vocab, text, len(text), buf, cap,
                                 add_special, parse_special)
        return list(buf[:n])

    def piece(self, tok, special=True):
        """Bytes of one token (llama_token_to_piece, no lstrip)."""
        L = lib()
        buf = C.create_string_buffer(64)
        n = L.llama_token_to_piece(self.vocab, tok, buf, 64, 0, special)
        if n < 0:
            buf = C.create_string_buffer(-n)
            n = L.llama_token_to_piece(self.vocab, tok, buf, -n, 0, special)
        return buf.raw[:n]

    def detokenize(self, ids, special=True):
        """The pieces joined: the exact inverse of tokenize."""
        return b"".join(self.piece(t, special) for t in ids)

    def detokenize_api(self, ids, remove_special=False, unparse_special=True):
        """llama_detokenize itself (it may clean up spaces)."""
        L = lib()
        arr = (llama_token * max(1, len(ids)))(*ids)
        cap = 16 + 64 * len(ids)
        buf = C.create_string_buffer(cap)
        n = L.llama_detokenize(self.vocab, arr, len(ids), buf, cap,
                               remove_special, unparse_special)
        return buf.raw[:n]

    def chat(self, messages, add_ass=True, tmpl=None):
        """llama_chat_apply_template over [(role, content), ...] with the
        model's template (or the named/inline tmpl); contents are C strings
        (str, bytes kept by surrogateescape)."""
        L = lib()
        if tmpl is None:
            tmpl = L.llama_model_chat_template(self.model, None)
        elif isinstance(tmpl, str):
            tmpl = tmpl.encode()
        msgs = (ChatMessage * len(messages))(
            *[ChatMessage(r.encode(), c.encode("utf-8", "surrogateescape"))
              for r, c in messages])
        cap = 1024 + 4 * sum(len(c) + len(r) for r, c in messages)
        buf = C.create_string_buffer(cap)
        n = L.llama_chat_apply_template(tmpl, msgs, len(messages), add_ass,
                                        buf, cap)
        if n < 0:
            raise SystemExit("llamacpp.py: template not supported")
        if n > cap:
            buf = C.create_string_buffer(n)
            n = L.llama_chat_apply_template(tmpl, msgs, len(messages),
                                            add_ass, buf, n)
        return buf.raw[:n]

    # ---- forward pass

    def context(self, n_ctx=4096, n_batch=512, threads=2, kv="f16", fa="auto"):
        L = lib()
        if self.ctx:
            L.llama_free(self.ctx)
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.type_k = cp.type_v = {"f32": 0, "f16": 1}[kv]
        cp.flash_attn_type = {"auto": -1, "off": 0, "on": 1}[fa]
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit("llamacpp.py: cannot create a context")
        got = (L.llama_n_batch(self.ctx), L.llama_n_threads(self.ctx),
               L.llama_n_threads_batch(self.ctx))
        if got != (n_batch, threads, threads) or L.llama_n_ctx(self.ctx) < n_ctx:
            raise SystemExit("llamacpp.py: context reports %r: layout wrong?"
                             % (got,))
        return self.ctx

    def clear(self):
        L = lib()
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)

    def decode(self, ids):
        """Feed ids (in n_batch chunks); the last position's logits."""
        L = lib()
        nb = L.llama_n_batch(self.ctx)
        for i in range(0, len(ids), nb):
            chunk = ids[i:i + nb]
            arr = (llama_token * len(chunk))(*chunk)
            rc = L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                raise SystemExit("llamacpp.py: llama_decode returned %d" % rc)
        p = L.llama_get_logits_ith(self.ctx, -1)
        if np is not None:
            return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).copy()
        return [p[j] for j in range(self.n_vocab)]

    def logits(self, ids):
        self.clear()
        return self.decode(ids)

    def greedy(self, ids, n):
        """n new ids, each the argmax (first on ties) of the logits."""
        return self.generate(ids, n)[1]

    def generate(self, ids, n):
        """The logits after ids (as logits) and n greedy ids after them (as
        greedy), from one pass."""
        self.clear()
        first = lg = self.decode(ids)
        out = []
        for _ in range(n):
            if np is not None:
                t = int(np.argmax(lg))  # the first of equal maxima
            else:
                t = max(range(len(lg)), key=lg.__getitem__)
            out.append(t)
            if len(out) < n:
                lg = self.decode([t])
        return first, out

    def bench(self, pp=512, tg=128, reps=5):
        """llama-bench's two numbers: pp tokens in one batch, then tg tokens
        one at a time from an empty cache; mean tokens/s over reps after a
        warm-up of each."""
        L = lib()
        import random
        rnd = random.Random(0)
        toks = [rnd.randrange(self.n_vocab) for _ in range(max(pp, tg))]
        arr = (llama_token * len(toks))(*toks)

        def run_pp():
            self.clear()
            rc = L.llama_decode(self.ctx, L.llama_batch_get_one(arr, pp))
            L.llama_synchronize(self.ctx)
            return rc

        def run_tg(n):
            self.clear()
            for i in range(n):
                one = (llama_token * 1)(toks[i])
                L.llama_decode(self.ctx, L.llama_batch_get_one(one, 1))
                L.llama_synchronize(self.ctx)

        run_pp()
        pps = []
        for _ in range(reps):
            t = time.perf_counter()
            run_pp()
            pps.append(pp / (time.perf_counter() - t))
        run_tg(1)
        tgs = []
        for _ in range(reps):
            t = time.perf_counter()
            run_tg(tg)
            tgs.append(tg / (time.perf_counter() - t))
        return sum(pps) / reps, sum(tgs) / reps


# ---------------------------------------------------------------- CLI

def usage():
    """The command summary of the docstring, on stderr; exit status 2."""
    sys.stderr.write("usage:\n" + __doc__.split("\n\n")[2] + "\n")
    sys.exit(2)


def f32_bytes(lg):
    """Logits as float32 little-endian bytes."""
    if np is not None:
        return np.asarray(lg, dtype="<f4").tobytes()
    return struct.pack("<%df" % len(lg), *lg)


_models = {}


def load(path, vocab_only=False):
    """The Model of path, loaded once per process (runs, batch)."""
    if (path, vocab_only) not in _models:
        _models[path, vocab_only] = Model(path, vocab_only)
    return _models[path, vocab_only]


def main(argv, out=None):
    if not argv:
        usage()
    cmd, args = argv[0], argv[1:]
    opts = {"-t": "2", "--kv": "f16", "--fa": "auto", "-o": None, "-r": "5",
            "--jsonl": None}
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--jsonl":
            opts[a] = True
        elif a in opts:
            if i + 1 >= len(args):
                usage()
            opts[a] = args[i + 1]
            i += 1
        else:
            rest.append(a)
        i += 1
    if not rest:
        usage()
    out = out or sys.stdout.buffer
    threads = int(opts["-t"])
    if cmd == "tokenize" and len(rest) == 2:
        m = load(rest[0], vocab_only=True)
        if opts["--jsonl"]:
            with open(rest[1], "rb") as f:
                for line in f:
                    s = json.loads(line)
                    ids = m.tokenize(s.encode("utf-8", "surrogateescape"))
                    out.write((" ".join(map(str, ids)) + "\n").encode())
        else:
            with open(rest[1], "rb") as f:
                ids = m.tokenize(f.read())
            out.write((" ".join(map(str, ids)) + "\n").encode())
    elif cmd == "detokenize":
        m = load(rest[0], vocab_only=True)
        out.write(m.detokenize([int(x) for x in rest[1:]]))
    elif cmd == "pieces" and len(rest) == 1:
        m = load(rest[0], vocab_only=True)
        for t in range(m.n_vocab):
            p = m.piece(t)
            out.write((p.hex() if p else "-").encode() + b"\n")
    elif cmd == "chat" and len(rest) == 2:
        m = load(rest[0], vocab_only=True)
        if opts["--jsonl"]:
            with open(rest[1], "rb") as f:
                for line in f:
                    s = json.loads(line).encode("utf-8", "surrogateescape")
                    s = s.split(b"\0")[0].decode("utf-8", "surrogateescape")
                    out.write(m.chat([("user", s)]).hex().encode() + b"\n")
        else:
            out.write(m.chat([("user", rest[1])]))
    elif cmd == "logits" and len(rest) >= 2:
        ids = [int(x) for x in rest[1:]]
        m = load(rest[0])
        m.context(n_ctx=max(512, len(ids) + 16), threads=threads,
                  kv=opts["--kv"], fa=opts["--fa"])
        data = f32_bytes(m.logits(ids))
        if opts["-o"]:
            with open(opts["-o"], "wb") as f:
                f.write(data)
        else:
            out.write(data)
    elif cmd == "greedy" and len(rest) >= 3:
        n = int(rest[1])
        ids = [int(x) for x in rest[2:]]
        m = load(rest[0])
        m.context(n_ctx=max(512, len(ids) + n + 16), threads=threads,
                  kv=opts["--kv"], fa=opts["--fa"])
        out.write((" ".join(map(str, m.greedy(ids, n))) + "\n").encode())
    elif cmd == "runs" and rest and len(rest) % 4 == 0:
        for j in range(0, len(rest), 4):
            mpath, idsfile, n, dst = rest[j:j + 4]
            n = int(n)
            with open(idsfile) as f:
                ids = [int(x) for x in f.read().split()]
            m = load(mpath)
            # the context greedy makes (logits makes the same for n = 0)
            m.context(n_ctx=max(512, len(ids) + n + 16), threads=threads,
                      kv=opts["--kv"], fa=opts["--fa"])
            lg, out_ids = m.generate(ids, n)
            with open(dst + ".f32", "wb") as f:
                f.write(f32_bytes(lg))
            if n > 0:
                with open(dst + ".ids", "w") as f:
                    f.write(" ".join(map(str, out_ids)) + "\n")
    elif cmd == "batch" and len(rest) == 1:
        with open(rest[0]) as f:
            for line in f:
                words = shlex.split(line)
                if len(words) < 2:
                    usage()
                with open(words[0], "wb") as dst:
                    main(words[1:], dst)
    elif cmd == "bench" and len(rest) == 1:
        m = load(rest[0])
        m.context(n_ctx=1024, n_batch=512, threads=threads, kv=opts["--kv"],
                  fa=opts["--fa"])
        pp, tg = m.bench(reps=int(opts["-r"]))
        out.write(("llama.cpp %s threads=%d pp512 %.1f tok/s tg128 %.1f tok/s\n"
                   % (os.path.basename(rest[0]), threads, pp, tg)).encode())
    else:
        usage()
    out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
