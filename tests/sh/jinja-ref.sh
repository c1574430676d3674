#!/bin/sh
# jinja-ref.sh: libcore's chat-template renderer (libcore/template/)
# against Python's jinja2, set up as transformers' apply_chat_template
# sets it up, on every template of tests/ref/chat_templates.json and
# every conversation of tests/ref/jinja_check.py, with and without the
# generation prompt: the outputs must be identical byte for byte, and
# where jinja2 fails (raise_exception, as Mistral's and Gemma's role
# checks do) ours must fail too, with the same message.
# Needs jinja2 in the cache's venv (MEDHA_CACHE, default cache/); skips
# without it. The C side is tests/jinja_test --ref, taken from
# MEDHA_TESTS (set by tests/run.sh) or built here.
. "$(dirname "$0")/lib.sh"
need_py jinja2

cd "$top"
t=${MEDHA_TESTS:+$MEDHA_TESTS/jinja_test}
if [ -z "$t" ] || [ ! -x "$t" ]; then
	t=$tmp/jinja_test
	${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -iquote libcore -o "$t" \
	    tests/jinja_test.c libcore/template/*.c libcore/util.c \
	    -lcmocka -ljansson -lm
fi

# a fixed date, so that strftime_now() agrees on both sides
MEDHA_JINJA_NOW=2024-09-05
export MEDHA_JINJA_NOW
"$py" tests/ref/jinja_check.py tests/ref/chat_templates.json > "$tmp/want.json"
"$t" --ref "$tmp/want.json"

# the worker's --chat on SmolLM2: the GGUF's own template, rendered by
# jinja2 (its default system prompt when none is given; --system
# otherwise) and tokenized, gives the ids medha-worker --chat gives
if [ -s "$model" ] && [ -x "$bin/medha-worker" ]; then
	n=0
	for sys in "" "Be brief." "You answer in French."; do
		for prompt in "hello" "What is 2+2?" "  spaces and
newlines  "; do
			"$py" - "$model" "$prompt" "$sys" >"$tmp/rendered" <<'PY'
import sys
sys.path.insert(0, "tests/ref")
import gguf
from jinja_check import environment
r = gguf.GGUFReader(sys.argv[1])
f = r.fields["tokenizer.chat_template"]
tmpl = bytes(f.parts[f.data[0]]).decode()
msgs = ([{"role": "system", "content": sys.argv[3]}] if sys.argv[3] else [])
msgs.append({"role": "user", "content": sys.argv[2]})
out = environment().from_string(tmpl).render(
    messages=msgs, add_generation_prompt=True, bos_token="", eos_token="")
sys.stdout.write(out)
PY
			if [ -n "$sys" ]; then
				"$bin/medha-worker" -m "$model" --chat --system "$sys" \
				    -p "$prompt" --tokenize >"$tmp/chat.ids"
			else
				"$bin/medha-worker" -m "$model" --chat -p "$prompt" \
				    --tokenize >"$tmp/chat.ids"
			fi
			"$bin/medha-worker" -m "$model" -f "$tmp/rendered" \
			    --tokenize >"$tmp/ref.ids"
			if ! cmp -s "$tmp/chat.ids" "$tmp/ref.ids"; then
				echo "medha-worker --chat ${sys:+--system '$sys' }-p '$prompt': not jinja2's rendering"
				cat "$tmp/rendered"
				exit 1
			fi
			n=$((n + 1))
		done
	done
	echo "medha-worker --chat on $(basename "$model"): $n conversations, the ids of jinja2's rendering of its template"
else
	echo "skip: no $model or $bin/medha-worker (the --chat check)"
fi
