#!/bin/sh
# jinja-ref.sh: libcore's chat-template renderer (libcore/model/jinja.c)
# against Python's jinja2, set up as transformers' apply_chat_template
# sets it up, on every template of tests/ref/chat_templates.json and
# every conversation of tests/ref/jinja_check.py, with and without the
# generation prompt: the outputs must be identical byte for byte, and
# where jinja2 fails (raise_exception, as Mistral's and Gemma's role
# checks do) ours must fail too, with the same message.
# Needs jinja2 in the cache's venv (MEDHA_CACHE, default cache/); prints
# "skip: ..." without it. The C side is tests/jinja_test --ref, taken
# from MEDHA_TESTS (set by tests/run.sh) or built here.
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
cache=${MEDHA_CACHE:-$top/cache}
py=$cache/venv/bin/python

[ -x "$py" ] || { echo "skip: no $py (run contrib/fetch-refs.sh)"; exit 0; }
"$py" -c 'import jinja2' 2>/dev/null ||
	{ echo "skip: jinja2 missing in $py"; exit 0; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$top"
t=${MEDHA_TESTS:+$MEDHA_TESTS/jinja_test}
if [ -z "$t" ] || [ ! -x "$t" ]; then
	t=$tmp/jinja_test
	${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -iquote libcore -o "$t" \
	    tests/jinja_test.c libcore/model/jinja.c libcore/util.c \
	    -lcmocka -ljansson -lm
fi

# a fixed date, so that strftime_now() agrees on both sides
MEDHA_JINJA_NOW=2024-09-05
export MEDHA_JINJA_NOW
"$py" tests/ref/jinja_check.py tests/ref/chat_templates.json > "$tmp/want.json"
"$t" --ref "$tmp/want.json"
