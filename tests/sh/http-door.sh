#!/bin/sh
# http-door.sh: who the router's HTTP front door lets in (issue 39), on a
# replica of one sim worker:
#  - a non-loopback --http without an API key exits 2 (unless
#    --insecure), as the nng side does without a secret; --api-key
#    without --http is bad usage; an API key file that is not a regular
#    file, or that others may read, is refused;
#  - with keys (--api-key twice, --api-key-file), a /v1/ request without
#    one, or with another, is answered 401 with OpenAI's error object
#    (code invalid_api_key); with any of the keys it is served; /health
#    and /metrics ask for none;
#  - finding 10: --http on a port that is taken exits 1, "Address in
#    use", never a crash, 30 times over.
. "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || skip "no curl (contrib/install-deps.sh)"
umask 077
p=$(free_port)
q=$(free_port)
hp=$(free_port)
r="$bin/medha-router -l tcp://127.0.0.1:$q -r tcp://127.0.0.1:$p"

expect_status 2 $r --http "0.0.0.0:$hp"
grep -q "without an API key.*--api-key" "$tmp/err" || { cat "$tmp/err"; exit 1; }
expect_status 2 $r --http ":$hp"
grep -q "without an API key" "$tmp/err" || { cat "$tmp/err"; exit 1; }
expect_status 2 $r --api-key "k-$$"
grep -q "needs --http" "$tmp/err" || { cat "$tmp/err"; exit 1; }
mkfifo "$tmp/fifo"
expect_status 1 timeout 5 $r --http "127.0.0.1:$hp" --api-key-file "$tmp/fifo"
grep -q "not a regular file" "$tmp/err" || { cat "$tmp/err"; exit 1; }
printf 'open-key\n' >"$tmp/open"
chmod 644 "$tmp/open"
expect_status 1 $r --http "127.0.0.1:$hp" --api-key-file "$tmp/open"
grep -q "chmod 600" "$tmp/err" || { cat "$tmp/err"; exit 1; }

# the taken port (taken here, so no other program can take it between):
# exit 1 each time (it once crashed in cleanup)
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
time.sleep(120)' >"$tmp/taken" &
wait_for "$tmp/taken" "[0-9]" 10
hp=$(cat "$tmp/taken")
i=0
while [ $i -lt 30 ]; do
	expect_status 1 timeout 10 $r --http "127.0.0.1:$hp"
	grep -q "cannot listen at 127.0.0.1:$hp: Address in use" "$tmp/err" ||
	    { cat "$tmp/err"; exit 1; }
	i=$((i + 1))
done

# the keys: two on the command line, one from a file
"$bin/medha-sched" -l "tcp://127.0.0.1:$p" 2>"$tmp/sched.log" &
"$bin/medha-worker" -s "tcp://127.0.0.1:$p" --backend sim -m llama3-8b \
    --speed 50 2>"$tmp/w.log" &
printf '\n  key-three  \n\n' >"$tmp/keys"
hp=$(free_port)
$r --http "127.0.0.1:$hp" --api-key key-one --api-key key-two \
    --api-key-file "$tmp/keys" 2>"$tmp/router.log" &
wait_for "$tmp/router.log" "http: listening" 30
wait_for "$tmp/sched.log" "ready:" 30
base=http://127.0.0.1:$hp
# req NAME ARGS...: the body into $tmp/NAME, the status into $tmp/NAME.code
req() {
	n=$1
	shift
	curl -sS -o "$tmp/$n" -w '%{http_code}' "$@" >"$tmp/$n.code"
}
body='{"prompt": [1, 2, 3], "max_tokens": 4}'
req none "$base/v1/completions" -d "$body"
req wrong -H "Authorization: Bearer key-four" "$base/v1/completions" -d "$body"
req prefix -H "Authorization: Bearer key-on" "$base/v1/completions" -d "$body"
req basic -H "Authorization: Basic a2V5LW9uZQ==" "$base/v1/models"
req models0 "$base/v1/models"
for n in none wrong prefix basic models0; do
	[ "$(cat "$tmp/$n.code")" = 401 ] || { echo "$n: $(cat "$tmp/$n.code")"; cat "$tmp/$n"; exit 1; }
	python3 -c 'import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["code"] == "invalid_api_key" and e["type"] == "invalid_request_error", e
assert "message" in e and "param" in e, e' "$tmp/$n"
done
grep -q "didn't provide an API key" "$tmp/none"
grep -q "Incorrect API key" "$tmp/wrong"
for k in key-one key-two key-three; do
	req ok -H "Authorization: Bearer $k" "$base/v1/completions" -d "$body"
	[ "$(cat "$tmp/ok.code")" = 200 ] || { echo "$k: $(cat "$tmp/ok.code")"; cat "$tmp/ok"; exit 1; }
	grep -q '"completion_tokens": *4' "$tmp/ok" || { cat "$tmp/ok"; exit 1; }
done
req models -H "Authorization: bearer key-two" "$base/v1/models"
[ "$(cat "$tmp/models.code")" = 200 ]
req health "$base/health"
req metrics "$base/metrics"
[ "$(cat "$tmp/health.code")" = 200 ] && [ "$(cat "$tmp/metrics.code")" = 200 ]
no_sanitizer_report "$tmp"/*.log
echo "http-door: ok"
