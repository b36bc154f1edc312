#!/usr/bin/env bash
# Idle connections to the coordinator (issue 15): anyone on the machine can
# connect to rank 0's port. Four connections that never say anything, and
# one from "another job" (the wrong token, then silence where its address
# should be), are opened before rank 1 starts. The job must still form and
# finish, and the wrong token must be refused at once. Rank 0 used to read
# one connection at a time with a 10 s wait each: with
# STRATA_NET_TIMEOUT=20 the job never formed.
. "$(dirname "$0")/c_lib.bash" "$@"
command -v python3 >/dev/null || skip "no python3 to open the connections with"
gen_data 4000
need_ucx

port=$(free_port)
env=(STRATA_WORLD_SIZE=2 STRATA_COORDINATOR=127.0.0.1:$port STRATA_TOKEN=c-coord-idle
  STRATA_NET_TIMEOUT=20)
env "${env[@]}" STRATA_RANK=0 "$strata" run "${base[@]}" >"$tmp/out0" 2>&1 &
r0=$!
pids+=("$r0")

# The intruder: 4 idle connections, then a hello (magic "STBH", version 2,
# rank 1, size 2, token length 5, address length 100) with a wrong token
# and no address; it reports how soon the refusal came, then stays idle.
python3 - "$port" >"$tmp/intruder" 2>&1 <<'PY' &
import socket, struct, sys, time
port = int(sys.argv[1])
def conn():
    for _ in range(300):
        try:
            return socket.create_connection(("127.0.0.1", port))
        except OSError:
            time.sleep(0.1)
    sys.exit("rank 0 does not listen")
idle = [conn() for _ in range(4)]
bad = conn()
bad.sendall(struct.pack("<6I", 0x48425453, 2, 1, 2, 5, 100) + b"wrong")
t0 = time.time()
bad.settimeout(15)
reply = b""
try:
    while True:
        b = bad.recv(256)
        if not b:
            break
        reply += b
except socket.timeout:
    pass
print("refused after %.1f s: %s" % (time.time() - t0, reply[12:].decode(errors="replace")), flush=True)
time.sleep(120)
PY
intruder=$!
pids+=("$intruder")
t=0
until grep -q "refused after\|rank 0 does not" "$tmp/intruder" 2>/dev/null; do
  sleep 0.2; t=$((t + 1)); [ $t -gt 150 ] && { show "$tmp/intruder" "$tmp/out0"; fail "the intruder got no answer within 30 s"; }
done
grep -Eq "refused after [0-2]\.[0-9] s: wrong job token" "$tmp/intruder" ||
  { show "$tmp/intruder" "$tmp/out0"; fail "the wrong token was not refused within 3 s"; }

env "${env[@]}" STRATA_RANK=1 "$strata" run "${base[@]}" >"$tmp/out1" 2>&1 &
r1=$!
pids+=("$r1")
wait_for "$r0" 40; s0=$ws
wait_for "$r1" 20; s1=$ws
[ "$s0" = 0 ] && [ "$s1" = 0 ] ||
  { show "$tmp/out0" "$tmp/out1"; fail "with idle connections open: rank 0 exit $s0, rank 1 exit $s1"; }
grep -q "refused a connection from 127.0.0.1:[0-9]*: wrong job token" "$tmp/out0" ||
  { show "$tmp/out0"; fail "rank 0 did not log the refusal"; }
echo "ok   the job formed and finished with 4 idle connections open; $(cat "$tmp/intruder")"
