#!/usr/bin/env bash
# `strata run --metrics-port` end to end (issue 22, live metrics): a run
# serves GET /metrics in the Prometheus text format while it trains; every
# sample line parses, strata_examples_total is there and grows between two
# scrapes; the endpoint listens on 127.0.0.1 only (not on another loopback
# address, and ss says so); another path is a 404; a port in use stops the
# run before it trains, naming the port; --metrics-bind chooses the address.
# No timing assertion: the run is made long (many epochs) and stopped with
# SIGTERM once the scrapes are done (a background job ignores SIGINT).
# With UCX, `strata launch -n 2 ... --metrics-port N` serves rank r on N + r.
# Usage: metrics_port.sh PATH/TO/strata HAVE_MICROHTTPD(0|1) HAVE_UCX(0|1)
# Exits 77 (skip) when the build lacks libmicrohttpd, after checking that
# --metrics-port then says so.
set -u
strata=$1
mhd=${2:-1}
ucx=${3:-0}
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 20; }
free_port() { /usr/bin/python3 "$root/tests/e2e/free_port.py" "${1:-1}"; }   # free_port.py: why

"$strata" gen --rows 40000 --eval-rows 4000 --vocab 20000 --seed 4 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "FAIL gen"; exit 1; }
base=(--quiet --no-pin --set 'data.generate=nil' --set "data.train.path=\"$tmp/d/train-*.tsv\""
  --set "data.eval.path=\"$tmp/d/eval.tsv\"")

if [ "$mhd" != 1 ]; then
  if "$strata" run tests/e2e/jobs/gen_small.lua "${base[@]}" --metrics-port "$(free_port)" \
       >"$tmp/out" 2>&1; then
    bad "--metrics-port without libmicrohttpd fails"
  elif grep -q "built without libmicrohttpd" "$tmp/out"; then
    echo "skip: this build has no libmicrohttpd (--metrics-port says so); install libmicrohttpd-dev"
    exit 77
  else
    bad "--metrics-port without libmicrohttpd says why"
  fi
  exit 1
fi

# parse.py FILE: every line a comment or `name{labels} value` with a number;
# prints strata_examples_total's value.
cat >"$tmp/parse.py" <<'EOF'
import re, sys
name = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
lval = r'"(?:[^"\\\n]|\\[\\"n])*"'
label = r'[a-zA-Z_][a-zA-Z0-9_]*=' + lval
sample = re.compile(r'^(%s)(\{%s(?:,%s)*\})? (\S+)$' % (name, label, label))
ex = None
for line in open(sys.argv[1]).read().splitlines():
    if line.startswith('#'):
        if not re.match(r'^# (HELP|TYPE) ' + name + ' ', line): sys.exit("bad comment: " + line)
        continue
    m = sample.match(line)
    if not m: sys.exit("not a sample line: " + line)
    v = float(m.group(3))   # NaN, +Inf too; raises on anything else
    if m.group(1) == 'strata_examples_total': ex = v
if ex is None: sys.exit("no strata_examples_total")
print(int(ex))
EOF

port=$(free_port)
"$strata" run tests/e2e/jobs/gen_dnn.lua "${base[@]}" --set epochs=1000 \
  --metrics-port "$port" >"$tmp/run.out" 2>&1 &
pid=$!
# Up, and the first batch trained (before it there is no examples count).
up=0
for _ in $(seq 300); do
  if curl -sf "http://127.0.0.1:$port/metrics" -o "$tmp/s1"; then
    up=1
    ex1=$(python3 "$tmp/parse.py" "$tmp/s1" 2>"$tmp/out") && break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ "$up" = 1 ] && ok "the endpoint answers while the run trains" ||
  { cp "$tmp/run.out" "$tmp/out"; bad "the endpoint answers while the run trains"; }
[ -n "${ex1:-}" ] && ok "a scrape parses ($ex1 examples)" || bad "a scrape parses"
ex2=0
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$port/metrics" -o "$tmp/s2" || break
  ex2=$(python3 "$tmp/parse.py" "$tmp/s2" 2>"$tmp/out") || break
  [ "$ex2" -gt "${ex1:-0}" ] && break
  sleep 0.1
done
[ "${ex2:-0}" -gt "${ex1:-0}" ] && ok "strata_examples_total grows ($ex1 -> $ex2)" ||
  bad "strata_examples_total grows ($ex1 -> $ex2)"
if grep -q '^# TYPE strata_examples_total counter$' "$tmp/s2" &&
   grep -q '^# HELP strata_examples_total ' "$tmp/s2" &&
   grep -Eq '^strata_stage_busy_seconds_total\{stage="train"\} [0-9.e+-]+$' "$tmp/s2" &&
   grep -q '^# TYPE strata_stage_busy_seconds_total counter$' "$tmp/s2" &&
   grep -q '^# TYPE strata_stage_threads gauge$' "$tmp/s2" &&
   { ! grep -q '^strata_auc ' "$tmp/s2" || grep -q '^# TYPE strata_auc gauge$' "$tmp/s2"; }; then
  ok "HELP and TYPE lines; per-stage busy seconds; gauges"
else
  cp "$tmp/s2" "$tmp/out"; bad "HELP and TYPE lines; per-stage busy seconds; gauges"
fi
# 127.0.0.1 only: another loopback address of this machine is refused.
# (ss, from iproute2, when there is one.)
if ! curl -s -o /dev/null "http://127.0.0.2:$port/metrics" &&
   { ! command -v ss >/dev/null ||
     { ss -Htln "sport = :$port" >"$tmp/out" 2>&1 &&
       [ "$(awk '{print $4}' "$tmp/out")" = "127.0.0.1:$port" ]; }; }; then
  ok "bound to 127.0.0.1 only"
else
  bad "bound to 127.0.0.1 only"
fi
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/other")
[ "$code" = 404 ] && ok "another path is a 404" || bad "another path is a 404 (got $code)"
# A port in use (this run's): a second run stops before training.
if "$strata" run tests/e2e/jobs/gen_small.lua "${base[@]}" --metrics-port "$port" \
     >"$tmp/out" 2>&1; then
  bad "a port in use stops the run"
elif grep -q "port $port: the port is in use" "$tmp/out" && ! grep -q "trained" "$tmp/out"; then
  ok "a port in use stops the run before it trains, naming the port"
else
  bad "a port in use stops the run before it trains, naming the port"
fi
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
[ "$rc" = 143 ] && ok "the run stops on SIGTERM (143)" || { cp "$tmp/run.out" "$tmp/out"; bad "SIGTERM: exit $rc"; }
curl -s -o /dev/null "http://127.0.0.1:$port/metrics" && bad "the endpoint is gone after the run" ||
  ok "the endpoint is gone after the run"

# --metrics-bind: another address, served there and not on 127.0.0.1.
port=$(free_port)
if "$strata" run tests/e2e/jobs/gen_small.lua "${base[@]}" --metrics-port "$port" \
     --metrics-bind 127.0.0.2 >"$tmp/out" 2>&1 &&
   grep -q "metrics served at http://127.0.0.2:$port/metrics" "$tmp/out"; then
  ok "--metrics-bind chooses the address"
else
  bad "--metrics-bind chooses the address"
fi
if ! "$strata" run tests/e2e/jobs/gen_small.lua "${base[@]}" --metrics-port "$port" \
     --metrics-bind localhost-ish >"$tmp/out" 2>&1 && grep -q "not a numeric IPv4 or IPv6" "$tmp/out"; then
  ok "--metrics-bind refuses a name that is not an address"
else
  bad "--metrics-bind refuses a name that is not an address"
fi

# strata launch: rank r on N + r, each with its own examples count.
if [ "$ucx" = 1 ]; then
  port=$(free_port 2)   # N and N + 1
  "$strata" launch -n 2 tests/e2e/jobs/gen_dnn.lua "${base[@]}" --set epochs=1000 \
    --metrics-port "$port" >"$tmp/run.out" 2>&1 &
  pid=$!
  got=
  for _ in $(seq 300); do
    got=
    for p in "$port" $((port + 1)); do
      curl -sf "http://127.0.0.1:$p/metrics" -o "$tmp/r$p" &&
        python3 "$tmp/parse.py" "$tmp/r$p" >/dev/null 2>&1 && got="$got $p"
    done
    [ "$got" = " $port $((port + 1))" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  pid=
  [ "$got" = " $port $((port + 1))" ] && ok "launch -n 2: rank r serves on port N + r" ||
    { cp "$tmp/run.out" "$tmp/out"; bad "launch -n 2: rank r serves on port N + r (got:$got)"; }
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
