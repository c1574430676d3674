#!/bin/sh
# deploy.sh: the deployment recipes of examples/deploy/, checked by what
# runs without systemd, Slurm or Kubernetes:
#  1. systemd: systemd-analyze verify passes each unit (its ExecStart
#     pointed at $bin), the example environment files set every
#     variable a unit's command line uses, and every flag those command
#     lines give is in the program's -h;
#  2. Slurm: medha-replica.sbatch parses (bash -n); its dry run on four
#     made-up nodes starts the scheduler on the first and ranks 0 to 7
#     two to a node (block), each with its node's peer address; three
#     nodes are refused (exit 2); every flag is in the program's -h;
#  3. Kubernetes: medha.yaml parses (Python's yaml) into a Secret, a
#     LeaderWorkerSet, a Deployment and a Service, whose shapes hold
#     together: the group size is 1 + the leader's --workers = tp x spp
#     x kvp of the workers, the router names each group's leader, the
#     Service selects the router's pods and its ports are theirs, each
#     secret mounted exists with the key "secret", and every flag is in
#     the program's -h.
# A part whose tool is missing (systemd-analyze, yaml) says so and is
# skipped.
. "$(dirname "$0")/lib.sh"
d=$top/examples/deploy

# flags PROG WORD...: every -x or --xyz among WORDs is in PROG -h
flags() {
	prog=$1
	shift
	"$bin/$prog" -h >"$tmp/help" 2>&1 || :
	for w in "$@"; do
		case $w in
		--*=* | -[0-9]*) w=${w%%=*} ;;
		esac
		case $w in
		-*)
			grep -q -- "$w\b" "$tmp/help" || {
				echo "$prog: $w is not in $prog -h"
				exit 1
			}
			;;
		esac
	done
}

# ---- 1. systemd ----
if command -v systemd-analyze >/dev/null; then
	mkdir "$tmp/units"
	for u in "$d"/systemd/*.service; do
		sed "s|/usr/local/bin/|$bin/|" "$u" >"$tmp/units/${u##*/}"
	done
	for u in medha-sched@a medha-worker@a-0 medha-router; do
		(cd "$tmp/units" && systemd-analyze verify --man=no "./$u.service") \
		    >"$tmp/verify" 2>&1 || {
			echo "systemd-analyze verify $u.service:"
			cat "$tmp/verify"
			exit 1
		}
	done
	# unit ENV: each ${VAR} and $VAR of the unit's ExecStart is set in ENV
	# (the *_OPTS may be left out); prints the command line, expanded
	unit_env() {
		python3 - "$d/systemd/$1" "$d/systemd/$2" <<'PY'
import re, shlex, sys
unit = open(sys.argv[1]).read()
env = {}
for l in open(sys.argv[2]):
    l = l.strip()
    if l and not l.startswith("#"):
        k, v = l.split("=", 1)
        env[k] = v
cmd = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
out = []
for w in cmd.split():
    m = re.fullmatch(r"\$\{?(\w+)\}?", w)
    if m:
        k = m.group(1)
        if k not in env and not k.endswith("_OPTS"):
            sys.exit("%s uses %s, which %s does not set" %
                     (sys.argv[1], k, sys.argv[2]))
        out += env.get(k, "").split()
    else:
        out.append(w)
print(" ".join(out[1:]))
PY
	}
	for x in medha-sched@:sched-a medha-worker@:worker-a-0 medha-router:router; do
		p=${x%%:*}
		cmd=$(unit_env "$p.service" "${x#*:}.env")
		# shellcheck disable=SC2086 # a flag a word
		flags "${p%@}" $cmd
	done
	grep -q '^Restart=on-failure' "$d"/systemd/medha-sched@.service
	grep -q '^LoadCredential=secret:' "$d"/systemd/medha-worker@.service
	echo "systemd: 3 units verified"
else
	echo "skip: no systemd-analyze: the units are not verified"
fi

# ---- 2. Slurm ----
s=$d/slurm/medha-replica.sbatch
bash -n "$s"
MEDHA_BIN= SLURM_JOB_NODELIST="n1 n2 n3 n4" MEDHA_DRY_RUN=1 MEDHA_MODEL=/m.gguf \
    MEDHA_SECRET_FILE=/s bash "$s" >"$tmp/dry" 2>&1 || {
	cat "$tmp/dry"
	exit 1
}
grep -q '^srun .*--nodelist=n1 .*medha-sched -l tcp://n1:7001 --workers 8 ' \
    "$tmp/dry" || {
	echo "slurm: no scheduler on n1:"
	cat "$tmp/dry"
	exit 1
}
for r in 0 1 2 3 4 5 6 7; do
	n=n$((r / 2 + 1))
	[ "$(grep -c "^task $r on $n: medha-worker -s tcp://n1:7001 .*--tp 2 --spp 2 --kvp 2 --rank $r --peer tcp://$n:0 " "$tmp/dry")" = 1 ] || {
		echo "slurm: rank $r is not on $n once:"
		cat "$tmp/dry"
		exit 1
	}
done
# shellcheck disable=SC2046
flags medha-sched $(grep '^srun .*medha-sched' "$tmp/dry" | sed 's/.*medha-sched //')
# shellcheck disable=SC2046
flags medha-worker $(grep '^task 0 ' "$tmp/dry" | sed 's/.*medha-worker //')
st=0
MEDHA_BIN= SLURM_JOB_NODELIST="n1 n2 n3" MEDHA_DRY_RUN=1 MEDHA_MODEL=/m.gguf \
    MEDHA_SECRET_FILE=/s bash "$s" >"$tmp/dry" 2>&1 || st=$?
[ $st = 2 ] && grep -q 'want spp x kvp = 4' "$tmp/dry" || {
	echo "slurm: three nodes: status $st, want 2"
	cat "$tmp/dry"
	exit 1
}
echo "slurm: the dry run places 8 ranks on 4 nodes"

# ---- 3. Kubernetes ----
kpy=
if has_py yaml; then
	kpy=$py
elif python3 -c 'import yaml' 2>/dev/null; then
	kpy=python3
fi
if [ -n "$kpy" ]; then
	for p in medha-sched medha-worker medha-router; do
		"$bin/$p" -h >"$tmp/$p.help" 2>&1 || :
	done
	"$kpy" - "$d/k8s/medha.yaml" "$tmp" <<'PY'
import re, shlex, sys, yaml
docs = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x]
by = {}
for x in docs:
    for k in ("apiVersion", "kind", "metadata"):
        assert k in x, "a document without %s" % k
    by[x["kind"]] = x
assert sorted(by) == ["Deployment", "LeaderWorkerSet", "Secret",
                      "Service"], sorted(by)
assert by["LeaderWorkerSet"]["apiVersion"] == "leaderworkerset.x-k8s.io/v1"

def help_has(prog, args):
    text = open("%s/%s.help" % (sys.argv[2], prog)).read()
    for a in args:
        if a.startswith("-") and not re.search(re.escape(a) + r"\b", text):
            raise AssertionError("%s: %s is not in its -h" % (prog, a))

def container(spec):
    (c,) = spec["containers"]
    return c

def args_of(c):
    """the program and its words, through sh -c where it is used"""
    if c["command"][:2] == ["sh", "-c"]:
        w = shlex.split(c["args"][0])
        assert w[0] == "exec"
        return w[1], w[2:]
    return c["command"][0], c["args"]

def secrets(spec, secret):
    mounts = {m["name"]: m["mountPath"] for m in container(spec)["volumeMounts"]}
    for v in spec["volumes"]:
        if "secret" in v:
            assert v["secret"]["secretName"] == secret["metadata"]["name"]
            assert v["secret"]["defaultMode"] & 0o077 == 0, "secret readable by others"
            assert mounts[v["name"]] == "/etc/medha"
    assert "secret" in secret["stringData"]

lws = by["LeaderWorkerSet"]["spec"]
t = lws["leaderWorkerTemplate"]
lprog, largs = args_of(container(t["leaderTemplate"]["spec"]))
wprog, wargs = args_of(container(t["workerTemplate"]["spec"]))
assert (lprog, wprog) == ("medha-sched", "medha-worker"), (lprog, wprog)
n = int(largs[largs.index("--workers") + 1])
tp, spp, kvp = (int(wargs[wargs.index(f) + 1]) for f in ("--tp", "--spp", "--kvp"))
assert n == tp * spp * kvp, (n, tp, spp, kvp)
assert t["size"] == 1 + n, "group of %d for %d workers" % (t["size"], n)
assert "LWS_LEADER_ADDRESS" in " ".join(wargs) and "LWS_WORKER_INDEX - 1" in " ".join(wargs)
help_has("medha-sched", largs)
help_has("medha-worker", wargs)
for tmpl in (t["leaderTemplate"], t["workerTemplate"]):
    secrets(tmpl["spec"], by["Secret"])
    assert "--secret-file" in " ".join(args_of(container(tmpl["spec"]))[1])

dep = by["Deployment"]["spec"]
rc = container(dep["template"]["spec"])
rprog, rargs = args_of(rc)
assert rprog == "medha-router"
help_has("medha-router", rargs)
secrets(dep["template"]["spec"], by["Secret"])
name = by["LeaderWorkerSet"]["metadata"]["name"]
reps = [rargs[i + 1] for i, a in enumerate(rargs) if a == "-r"]
want = ["tcp://%s-%d.%s:%s" % (name, g, name, largs[1].rsplit(":", 1)[1])
        for g in range(lws["replicas"])]
assert reps == want, (reps, want)
labels = dep["template"]["metadata"]["labels"]
assert dep["selector"]["matchLabels"].items() <= labels.items()
svc = by["Service"]["spec"]
assert svc["selector"].items() <= labels.items(), "the Service selects no router"
ports = {p["name"] for p in rc["ports"]}
for p in svc["ports"]:
    assert p["targetPort"] in ports, p
print("kubernetes: %d groups of 1 + %d (tp %d x spp %d x kvp %d), a router "
      "and its Service" % (lws["replicas"], n, tp, spp, kvp))
PY
else
	echo "skip: no Python yaml: the manifest is not checked"
fi
echo "deploy: ok"
