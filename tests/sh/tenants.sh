#!/bin/sh
# tenants.sh: tenants of the prefix cache (issue 39, finding 1), on a
# replica of one sim worker behind medha-router's HTTP door with two API
# keys, key-a and key-b, on loopback.
#  - the attack of the issue: a victim (key-a) sends a prompt that holds
#    a 6-digit PIN after an opening the attacker (key-b) knows; the
#    attacker sends the opening, the digits found so far and each
#    candidate digit, and keeps the candidate with the most
#    cached_tokens. Without tenants it read the PIN in 60 requests (the
#    correct candidate one token ahead each time); now the attacker's
#    first probe of the victim's opening counts 0 cached tokens, every
#    candidate of a digit counts the same (its own earlier probes, no
#    more), and the PIN it reads is not the victim's;
#  - key-b's hits are on its own prompts only: a prompt key-a sent is a
#    miss for key-b, a hit once key-b sent it, and still one for key-a;
#  - the same key shares as before; a body's cache_salt divides a key's
#    share (the same salt hits, another or none misses), and key-b
#    giving key-a's salt gets nothing of key-a's;
#  - the router's cache-aware placement follows the tenants: of key-a's
#    prompt sent by key-a, key-b, key-a, one placement only (key-a's
#    second) is "on a cached prefix";
#  - with --shared-prefix-cache the keys share one pool again: key-b's
#    probe of key-a's prompt hits, its placement is on a cached prefix,
#    and the attack reads the PIN;
#  - --shared-prefix-cache without --api-key is bad usage (exit 2), and
#    a cache_salt that is not a non-empty string is answered 400.
. "$(dirname "$0")/lib.sh"
p=$(free_port)
q=$(free_port)
cat >"$tmp/probe.py" <<'PY'
# probe.py BASE victim|attack KEY [SALT]; probe.py BASE ask KEY SALT IDS...
# KEY "-": no Authorization; SALT "-": no cache_salt
import json, sys, urllib.request

OPEN = list(range(1000, 1040))  # the opening the attacker knows
PIN = [3, 1, 4, 1, 5, 9]        # the victim's secret
DIGIT = 500                     # digit d is token DIGIT + d
TAIL = [7000, 7001, 7002, 7003]

def ask(base, key, salt, ids):
    body = {"prompt": ids, "max_tokens": 1}
    if salt not in (None, "-"):
        body["cache_salt"] = salt
    req = urllib.request.Request(base + "/v1/completions",
                                 json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    if key != "-":
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=20) as r:
        u = json.load(r)["usage"]
    return (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)

base, what, key = sys.argv[1:4]
salt = sys.argv[4] if len(sys.argv) > 4 else None
if what == "victim":
    print(ask(base, key, salt, OPEN + [DIGIT + d for d in PIN] + TAIL))
elif what == "ask":
    print(ask(base, key, salt, [int(x) for x in sys.argv[5:]]))
else:
    found = []
    for _ in PIN:
        seen = [ask(base, key, salt,
                    OPEN + [DIGIT + d for d in found] + [DIGIT + c, 9999])
                for c in range(10)]
        found.append(max(range(10), key=lambda c: seen[c]))
        print(" ".join(map(str, seen)))
    print("read", "".join(map(str, found)), "secret", "".join(map(str, PIN)))
PY

"$bin/medha-sched" -l "tcp://127.0.0.1:$p" 2>"$tmp/sched.log" &
"$bin/medha-worker" -s "tcp://127.0.0.1:$p" --backend sim -m llama3-8b \
    --speed 50 2>"$tmp/w.log" &
wait_for "$tmp/sched.log" "ready:" 30

expect_status 2 "$bin/medha-router" -l "tcp://127.0.0.1:$q" \
    -r "tcp://127.0.0.1:$p" --http 127.0.0.1:0 --shared-prefix-cache
grep -q "needs --api-key" "$tmp/err" || { cat "$tmp/err"; exit 1; }

# router [FLAGS...]: a router with both keys, its HTTP door's base URL
# in $base, its pid in $router, its log in $tmp/router$n.log
n=0
router() {
	n=$((n + 1))
	"$bin/medha-router" -l "tcp://127.0.0.1:$q" -r "tcp://127.0.0.1:$p" \
	    --http 127.0.0.1:0 --api-key key-a --api-key key-b "$@" \
	    2>"$tmp/router$n.log" &
	router=$!
	wait_for "$tmp/router$n.log" "ready: " 30 $router
	port=$(sed -n 's/.*http: listening at .*(port \([0-9]*\)).*/\1/p' \
	    "$tmp/router$n.log")
	base=http://127.0.0.1:$port
}
# placed: stop the router; $placed, the requests it placed on a cached
# prefix
placed() {
	kill -TERM $router
	wait $router || { echo "router: status $?"; cat "$tmp/router$n.log"; exit 1; }
	placed=$(sed -n 's/.*, \([0-9]*\) placed on a cached prefix.*/\1/p' \
	    "$tmp/router$n.log")
}
# cached KEY SALT IDS...: the cached_tokens of one request
cached() {
	timeout 30 python3 "$tmp/probe.py" "$base" ask "$@"
}
# want WHAT GOT EXPECTED
want() {
	[ "$2" = "$3" ] || { echo "$1: $2 cached tokens, want $3"; exit 1; }
}
ids() { seq "$1" "$2" | tr '\n' ' '; }

# ---- tenants (the default with API keys) ----
router
timeout 30 python3 "$tmp/probe.py" "$base" victim key-a >"$tmp/victim"
want "the victim's first request" "$(cat "$tmp/victim")" 0
timeout 120 python3 "$tmp/probe.py" "$base" attack key-b >"$tmp/attack"
echo "attack across tenants:"
cat "$tmp/attack"
python3 - "$tmp/attack" <<'PY'
import sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if l[0].isdigit()]
read = open(sys.argv[1]).read().split()[-3]
assert len(rows) == 6, rows
assert rows[0][0] == 0, "the first probe of the victim's opening hit"
for i, r in enumerate(rows):
    # the attacker's own earlier probes only: the same for every digit
    assert len(set(r[1:] if i == 0 else r)) == 1, ("a digit stands out", i, r)
assert read != "314159", "the PIN was read"
PY
# key-b's hits are on its own prompts only
P=$(ids 2000 2063)
want "key-a's prompt, key-a" "$(cached key-a - $P)" 0
want "key-a's prompt, key-b" "$(cached key-b - $P)" 0
want "key-b's own prompt again" "$(cached key-b - $P)" 63
want "key-a's prompt again, key-a" "$(cached key-a - $P)" 63
want "the victim's prompt again, key-a" \
    "$(timeout 30 python3 "$tmp/probe.py" "$base" victim key-a)" 49
# a body's cache_salt divides a key's share; key-b cannot pick key-a's
S=$(ids 3000 3063)
want "key-a, salt s1" "$(cached key-a s1 $S)" 0
want "key-a, salt s1 again" "$(cached key-a s1 $S)" 63
want "key-a, salt s2" "$(cached key-a s2 $S)" 0
want "key-a, no salt" "$(cached key-a - $S)" 0
want "key-b, key-a's salt s1" "$(cached key-b s1 $S)" 0
# a cache_salt that is not a non-empty string: 400
for s in '""' 7; do
	code=$(curl -sS -o "$tmp/bad" -w '%{http_code}' \
	    -H "Authorization: Bearer key-a" "$base/v1/completions" \
	    -d "{\"prompt\": [1, 2], \"max_tokens\": 1, \"cache_salt\": $s}")
	[ "$code" = 400 ] && grep -q "must be a non-empty string" "$tmp/bad" ||
	    { echo "cache_salt $s: $code"; cat "$tmp/bad"; exit 1; }
done
placed

# the router's placement: key-a, key-b, key-a with one prompt
router
T=$(ids 4000 4063)
cached key-a - $T >/dev/null
cached key-b - $T >/dev/null
cached key-a - $T >/dev/null
placed
want "placements on a cached prefix (tenants)" "$placed" 1

# ---- --shared-prefix-cache: one pool ----
router --shared-prefix-cache
U=$(ids 5000 5063)
want "shared: key-a's prompt, key-a" "$(cached key-a - $U)" 0
want "shared: key-a's prompt, key-b" "$(cached key-b - $U)" 63
placed
want "placements on a cached prefix (shared)" "$placed" 1
router --shared-prefix-cache
timeout 30 python3 "$tmp/probe.py" "$base" victim key-a >/dev/null
timeout 120 python3 "$tmp/probe.py" "$base" attack key-b >"$tmp/attack"
echo "attack with --shared-prefix-cache:"
cat "$tmp/attack"
grep -q "read 314159 secret 314159" "$tmp/attack"
placed
no_sanitizer_report "$tmp"/*.log
echo "tenants: ok"
