#!/usr/bin/env bash
# strata launch --bind (cli/cmd_launch.c), end to end: each rank runs on its
# own slice of the launcher's CPUs (read from the running ranks'
# /proc/PID/status and compared with what the launcher printed), the two
# slices differ, the model is the same as unbound (STRATA_DIGEST), and more
# ranks than CPUs is a usage error. Skipped (77) with fewer than 2 CPUs,
# where two ranks cannot have slices of their own.
# Usage: launch_bind.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
digest() { grep -o 'digest [0-9a-f]*' "$1"; }
[ "$(nproc)" -ge 2 ] || { echo "fewer than 2 CPUs allowed: skipped"; exit 77; }

rm -f "$tmp"/out*
ncpu=$(nproc)
bind_args=("${base[@]}" --set 'sync=st.sync.allreduce{}' --set stages.train.workers=1
  --set stages.read.batch_size=256 --set stages.train.minibatch=256)
STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 "${bind_args[@]}" >"$tmp/outu" 2>&1
STRATA_DIGEST=1 timeout 300 "$strata" launch -n 2 --bind "${bind_args[@]}" >"$tmp/outb" 2>&1 &
lpid=$! seen=""
for _ in $(seq 200); do
  # timeout > launch > ranks; only ranks past their exec ("strata run ..."):
  # between fork and exec a rank still has the launcher's CPUs.
  kids=$(for l in $(pgrep -P $lpid); do pgrep -P "$l"; done |
    while read -r k; do tr '\0' ' ' <"/proc/$k/cmdline" 2>/dev/null | grep -q ' run ' && echo "$k"; done |
    tr '\n' ' ')
  # And only once both have logged that they train: before that, hwloc's
  # topology probe (ops/runner/stages.c) moves the main thread onto each
  # CPU in turn to read its CPUID and then puts it back, so a rank read
  # then can show another rank's CPU (seen under load: '1 1', '0 0').
  if [ "$(echo $kids | wc -w)" = 2 ] && [ "$(grep -c 'of 2: trains batches' "$tmp/outb")" = 2 ]; then
    seen=$(for k in $kids; do grep Cpus_allowed_list /proc/$k/status | cut -f2; done | sort | tr '\n' ' ')
    # For a failure's report: each rank's pid, command and every thread's CPUs.
    detail=$(for k in $kids; do
      echo "pid $k ($(tr '\0' ' ' <"/proc/$k/cmdline" 2>/dev/null | cut -c1-50)):" \
        "$(cat /proc/$k/task/*/status 2>/dev/null | grep Cpus_allowed_list | cut -f2 |
          sort | uniq -c | tr -s ' \n' ' ')"
    done)
    break
  fi
  sleep 0.05
done
wait $lpid; rb=$?
"$strata" launch -n $((ncpu + 1)) --bind "${base[@]}" >"$tmp/outx" 2>&1; rx=$?
# What the launcher said each rank got ("a-b"; the kernel writes "a" for a-a).
want=$(sed -n 's/.*rank [01] on CPUs \([0-9]*\)-\([0-9]*\)$/\1 \2/p' "$tmp/outb" |
  awk '{ print ($1 == $2 ? $1 : $1 "-" $2) }' | sort | tr '\n' ' ')
if [ $rb -eq 0 ] && [ "$(digest "$tmp/outb")" = "$(digest "$tmp/outu")" ] &&
   [ -n "$(digest "$tmp/outu")" ] && grep -q "rank 1 on CPUs" "$tmp/outb" &&
   [ -n "$seen" ] && [ "$seen" = "$want" ] && [ "$(echo $seen | wc -w)" = 2 ] &&
   [ "$(echo $seen | cut -d' ' -f1)" != "$(echo $seen | cut -d' ' -f2)" ] &&
   [ $rx -eq 2 ] && grep -q "needs a CPU per rank" "$tmp/outx"; then
  ok "launch --bind: ranks on CPUs $seen(of $ncpu), same model as unbound; more ranks than CPUs refused"
else
  bad "launch --bind: rc $rb, affinity '$seen' (launcher: '$want'), digests $(digest "$tmp/outb") / $(digest "$tmp/outu"), refusal rc $rx"
  echo "ranks seen: $detail"
  grep 'strata launch: rank' "$tmp/outb"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
