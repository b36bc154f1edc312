#!/usr/bin/env bash
# Listening sockets of `strata launch -n 2` (issue 15): a job on one machine
# must listen on the loopback only. The coordinator always did; UCX's TCP
# transport listened on every interface (it was found on the machine's
# external address). The check reads the ranks' listening sockets from
# /proc/net/tcp and tcp6 (matched to the processes by socket inode)
# mid-training and fails on any bound to 0.0.0.0, :: or a non-loopback
# address.
. "$(dirname "$0")/c_lib.bash" "$@"
[ -r /proc/net/tcp ] || skip "no /proc/net/tcp to read the listening sockets from"
gen_data 40000
need_ucx

"$strata" launch -n 2 "${base[@]}" "${slow[@]}" --set 'sync=st.sync.allreduce{}' >"$tmp/out" 2>&1 &
launcher=$!
pids+=("$launcher")
wait_training "$tmp/out" 2 30 || { show "$tmp/out"; fail "the job did not start training within 30 s"; }
r=($(ranks_of "$launcher" 2)) || true
[ "${#r[@]}" -eq 2 ] || { show "$tmp/out"; fail "cannot find the two ranks of launcher $launcher"; }
pids+=("${r[@]}")

# Socket inodes of the ranks, then the LISTEN (state 0A) lines of those.
inodes=$(for p in "${r[@]}"; do ls -l "/proc/$p/fd" 2>/dev/null; done |
  sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p' | sort -u | tr '\n' ' ')
[ -n "$inodes" ] || fail "the ranks have no sockets (cannot read /proc/PID/fd?)"
# Local addresses in /proc/net/tcp* are hex, each 32-bit word in host
# (little-endian) order: 0100007F is 127.0.0.1; in tcp6 ::1 is
# 00000000000000000000000001000000 and ::ffff:127.x ends in 7F.
listen=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v inodes=" $inodes" '
  $4 == "0A" && index(inodes, " " $10 " ") {
    split($2, a, ":"); h = a[1]
    if (length(h) == 8) loop = substr(h, 7, 2) == "7F"
    else loop = h == "00000000000000000000000001000000" ||
                (substr(h, 1, 24) == "0000000000000000FFFF0000" && substr(h, 31, 2) == "7F")
    print (loop ? "loopback " : "EXPOSED ") h " port 0x" a[2]
  }')
echo "$listen"
[ -n "$listen" ] || skip "found no listening socket of the ranks (cannot match them in /proc/net/tcp)"
if grep -q EXPOSED <<<"$listen"; then
  fail "a rank listens on a non-loopback address (hex as in /proc/net/tcp): $(grep EXPOSED <<<"$listen" | head -n 3 | tr '\n' ' ')"
fi
kill "$launcher" 2>/dev/null
wait_for "$launcher" 20
echo "ok   $(wc -l <<<"$listen") listening sockets of the ranks, all on the loopback"
