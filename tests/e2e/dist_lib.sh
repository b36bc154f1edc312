# dist_lib.sh — what the multi-process e2e scripts (dist.sh, dist_shadow.sh)
# share; sourced with "$@" = PATH/TO/strata HAVE_UCX(0|1). Sets strata,
# root, tmp (removed at exit, with every pid in `pids` killed), pass/fail
# with ok/bad, generates the data into $tmp/d and sets `base`, the job
# arguments every run starts from; port prints a free TCP port.
set -u
strata=$1
[ "${2:-1}" = 1 ] || { echo "strata was built without UCX: skipped"; exit 77; }
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; for f in "$tmp"/out*; do [ -f "$f" ] && { echo "     == $f"; sed 's/^/     | /' "$f" | tail -n 12; }; done; }

"$strata" gen --rows 24000 --eval-rows 3000 --vocab 5000 --seed 5 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "FAIL gen"; exit 1; }
base=(tests/e2e/jobs/gen_dnn.lua --quiet --no-pin
  --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"" --set stages.read.threads=1 --set seed=11)
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
