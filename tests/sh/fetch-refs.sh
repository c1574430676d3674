#!/bin/sh
# fetch-refs.sh: what make demo fetches is the model alone (the demo needs
# nothing else), not the test references' Python environment (254 MB,
# a second llama.cpp); make test fetches the rest. Offline: the model
# is there already, and a python3 that fails stands for the network.
. "$(dirname "$0")/lib.sh"
[ -s "$smollm2" ] || skip "no model in $cache (contrib/fetch-refs.sh)"
mkdir -p "$tmp/cache/models" "$tmp/path"
ln -s "$smollm2" "$tmp/cache/models/"
printf '#!/bin/sh\necho "python3 run: $*" >&2\nexit 1\n' >"$tmp/path/python3"
chmod +x "$tmp/path/python3"
PATH="$tmp/path:$PATH" MEDHA_CACHE="$tmp/cache" \
    sh "$top/contrib/fetch-refs.sh" model >"$tmp/out" 2>&1 ||
    { cat "$tmp/out"; exit 1; }
[ ! -e "$tmp/cache/venv" ] || { echo "a venv made for the demo"; exit 1; }
grep -q "^model: $tmp/cache/models/" "$tmp/out"
# make demo asks for the model alone; make test for everything
make -C "$top" -n demo BIN=bin 2>/dev/null | grep -q 'fetch-refs.sh model$'
make -C "$top" -n test 2>/dev/null | grep -q 'fetch-refs.sh >/dev/null'
echo "fetch-refs: ok"
