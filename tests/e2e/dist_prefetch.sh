#!/usr/bin/env bash
# Step reads issued ahead across processes (dist.prefetch; docs/distributed.md,
# "Prefetched step reads"), end to end on 2 processes x 1 worker:
#  - async with dist.prefetch = 0 reads every minibatch's rows right before it:
#    no read ahead, and the worker waits for every one (net_step_waits =
#    net_step_reads, exactly);
#  - async with the default prefetch issues reads ahead (net_step_reads_ahead
#    > 0 on every rank) and trains to an eval AUC as good as without (both
#    above 0.7, within 0.02 of each other); the blocking waits are printed,
#    not asserted (how many answers are already there is a matter of timing);
#  - hop_bs never reads ahead (its bound counts steps, not rows read early),
#    and a job asking it to (dist.prefetch = 2) is refused with a message
#    naming the field.
# Usage: dist_prefetch.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
evalauc() { grep -o 'eval *auc [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
# metric FILE NAME: NAME's value in the last metrics line of FILE.
metric() { tail -n 1 "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
job=(--set stages.read.batch_size=1024 --set stages.train.minibatch=128
  --set stages.train.workers=1)

# run NAME SYNC [args...]: a 2-process run with metrics in $tmp/m-NAME.json*.
run() {
  local name=$1 sync=$2; shift 2
  rm -f "$tmp/m-$name.json"*
  timeout 300 "$strata" launch -n 2 "${base[@]}" "${job[@]}" --set "sync=$sync" \
    --metrics "$tmp/m-$name.json" "$@" >"$tmp/out-$name" 2>&1
}

declare -A auc reads ahead waits
for pf in 0 default; do
  extra=()
  [ $pf = default ] || extra=(--set "dist.prefetch=$pf")
  if run "$pf" 'st.sync.async{}' "${extra[@]}"; then
    auc[$pf]=$(evalauc "$tmp/out-$pf")
    for r in "" .rank1; do
      f="$tmp/m-$pf.json$r"
      reads[$pf$r]=$(metric "$f" net_step_reads)
      ahead[$pf$r]=$(metric "$f" net_step_reads_ahead)
      waits[$pf$r]=$(metric "$f" net_step_waits)
    done
  else
    bad "async, dist.prefetch $pf: the run failed"
  fi
done

chk_none() { # rank suffix: no read ahead, every read waited for
  local k=0$1
  [ -n "${reads[$k]:-}" ] && [ "${reads[$k]}" -gt 0 ] && [ "${ahead[$k]}" = 0 ] &&
    [ "${waits[$k]}" = "${reads[$k]}" ]
}
chk_ahead() {
  local k=default$1
  [ -n "${reads[$k]:-}" ] && [ "${reads[$k]}" -gt 0 ] && [ "${ahead[$k]}" -gt 0 ] &&
    [ "${ahead[$k]}" -le "${reads[$k]}" ] && [ "${waits[$k]}" -le "${reads[$k]}" ]
}
if chk_none "" && chk_none .rank1; then
  ok "async, prefetch 0: every step read waited for (rank 0: ${waits[0]} of ${reads[0]}, rank 1: ${waits[0.rank1]} of ${reads[0.rank1]})"
else
  bad "async, prefetch 0: reads ${reads[0]:-?}/${reads[0.rank1]:-?} ahead ${ahead[0]:-?}/${ahead[0.rank1]:-?} waits ${waits[0]:-?}/${waits[0.rank1]:-?}"
fi
if chk_ahead "" && chk_ahead .rank1; then
  ok "async, default prefetch: reads issued ahead (rank 0: ${ahead[default]} of ${reads[default]}, rank 1: ${ahead[default.rank1]} of ${reads[default.rank1]}); blocking waits ${waits[default]} and ${waits[default.rank1]} (${waits[0]} and ${waits[0.rank1]} without)"
else
  bad "async, default prefetch: reads ${reads[default]:-?}/${reads[default.rank1]:-?} ahead ${ahead[default]:-?}/${ahead[default.rank1]:-?} waits ${waits[default]:-?}/${waits[default.rank1]:-?}"
fi
if [ -n "${auc[0]:-}" ] && [ -n "${auc[default]:-}" ] &&
   awk -v a="${auc[0]}" -v b="${auc[default]}" \
     'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0.7 && b > 0.7 && d < 0.02) }'; then
  ok "async learns as well with prefetch (eval auc ${auc[default]}) as without (${auc[0]})"
else
  bad "async eval auc: prefetch 0 '${auc[0]:-}', default '${auc[default]:-}'"
fi

# hop_bs: never ahead; refused when asked.
if run hop 'st.sync.hop_bs{b=1}' && r=$(metric "$tmp/m-hop.json.rank1" net_step_reads) &&
   [ -n "$r" ] && [ "$r" -gt 0 ] && [ "$(metric "$tmp/m-hop.json.rank1" net_step_reads_ahead)" = 0 ]; then
  ok "hop_bs reads every minibatch's rows right before it ($r reads, none ahead)"
else
  bad "hop_bs: the run failed or read ahead"
fi
"$strata" run "${base[@]}" "${job[@]}" --set 'sync=st.sync.hop_bs{b=1}' \
  --set 'dist.prefetch=2' >"$tmp/out-hopref" 2>&1; st=$?
if [ $st = 2 ] && grep -q "dist.prefetch = 2 cannot be used with sync policy hop_bs" "$tmp/out-hopref"; then
  ok "hop_bs with dist.prefetch = 2 is refused (exit 2, naming the field)"
else
  bad "hop_bs with prefetch: exit $st"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
