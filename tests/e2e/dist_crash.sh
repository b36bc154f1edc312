#!/usr/bin/env bash
# The bounded crash test of multi-process checkpoints (issue 17;
# docs/distributed.md, "Checkpoints of multi-process jobs"): SIGKILL of a
# random rank, rank 0 included, at a random moment — mid-training, or timed
# to land while a checkpoint is being written (right after its
# ckpt-<step>.tmp directory appears) — in at least 20 rounds of a tiny
# allreduce job checkpointing every 1 or 2 steps; 2 processes, 3 in a few
# rounds, the SSD tier on in some. Each round asserts:
#  - every surviving rank exits within $bound seconds (the time is printed),
#    with status != 0 and a message naming the lost rank — unless the kill
#    landed after the job's final checkpoint was published (then it may
#    exit 0, and the final checkpoint must be there);
#  - no .tmp is listed as a checkpoint, and every ckpt-<step> directory is
#    complete (`strata inspect`: "complete: yes");
#  - --resume starts from the newest complete checkpoint (or from scratch
#    when there is none) and ends with the uninterrupted run's model:
#    STRATA_DIGEST, every row's floats and optimizer state and the dense
#    parameters, bit for bit under allreduce.
# Which rank and when come from a seeded RANDOM: the seed is printed, and
# STRATA_CRASH_SEED=<seed> replays a run's choices (the moments themselves
# depend on the machine's speed). STRATA_CRASH_ROUNDS (default 24) rounds at
# least, more (40 at most) until 20 kills landed in a running job (a kill
# after the job's end counts as a round, not as a kill). Moments are relative to events (training started, a
# .tmp appeared) and to the uninterrupted run's own duration, so a slow
# build (ASan, TSan) only shifts where the kills land.
# Usage: dist_crash.sh PATH/TO/strata HAVE_UCX(0|1)
. "$(dirname "$0")/dist_lib.sh"
digest() { grep -o 'digest [0-9a-f]*' "$1"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
bound=20                     # seconds a survivor may take to exit (docs/distributed.md)
rounds=${STRATA_CRASH_ROUNDS:-24}
seed=${STRATA_CRASH_SEED:-$(($(date +%s) % 32768))}
RANDOM=$seed
echo "dist_crash: seed $seed (STRATA_CRASH_SEED=$seed replays the choices), $rounds rounds, bound $bound s"
ar=(--set 'sync=st.sync.allreduce{}' --set stages.train.minibatch=256
  --set stages.train.workers=1 --set stages.read.batch_size=256)

# start_job N SSD(0|1) TAG ARGS...: N ranks by hand (the test needs their
# pids), out$r their output; with SSD each rank gets its own
# storage.ssd.path ($tmp/ssd-TAG-r, reused by the resume of the round).
start_job() {
  local n=$1 ssd=$2 tag=$3 r p; shift 3
  p=$(port)
  pids=()
  for ((r = 0; r < n; r++)); do
    local st=()
    if [ "$ssd" = 1 ]; then
      mkdir -p "$tmp/ssd-$tag-$r"
      st=(--set "storage={mem=\"1MiB\",ssd={path=\"$tmp/ssd-$tag-$r\",file_size=\"256KiB\"}}")
    fi
    STRATA_DIGEST=1 STRATA_RANK=$r STRATA_WORLD_SIZE=$n STRATA_COORDINATOR=127.0.0.1:$p \
      STRATA_TOKEN="crash-$tag" "$strata" run "${base[@]}" "${ar[@]}" "${st[@]}" "$@" \
      >"$tmp/out$r" 2>&1 &
    pids+=($!)
  done
}
# wait_job N SECS: waits for the N ranks (at most SECS seconds in all, then
# kills them); st[r] is each one's exit status or "hang".
wait_job() {
  local n=$1 secs=$2 r t0; t0=$(now_ms)
  st=()
  for ((r = 0; r < n; r++)); do
    while kill -0 "${pids[$r]}" 2>/dev/null && [ $(($(now_ms) - t0)) -lt $((secs * 1000)) ]; do
      sleep 0.05
    done
    if kill -0 "${pids[$r]}" 2>/dev/null; then
      kill -9 "${pids[$r]}"; wait "${pids[$r]}" 2>/dev/null; st[$r]=hang
    else
      wait "${pids[$r]}"; st[$r]=$?
    fi
  done
  pids=()
}
# started N: waits (at most 120 s) until every rank said it trains.
started() {
  local r t0; t0=$(now_ms)
  for ((r = 0; r < $1; r++)); do
    until grep -q "trains batches" "$tmp/out$r" 2>/dev/null; do
      kill -0 "${pids[$r]}" 2>/dev/null || return 0   # ended (or failed): checked later
      [ $(($(now_ms) - t0)) -gt 120000 ] && return 1
      sleep 0.01
    done
  done
}
# complete CKDIR: the ckpt-<step> folders (newest last), each one complete.
newest= ncomplete=0
check_dir() {
  local c ok=1
  newest= ncomplete=0
  for c in $(ls "$1" 2>/dev/null | grep '^ckpt-[0-9]*$'); do
    if "$strata" inspect "$1/$c" >"$tmp/out_inspect" 2>&1 && grep -q "complete: yes" "$tmp/out_inspect"; then
      newest=$c ncomplete=$((ncomplete + 1))
    else
      ok=0; echo "     incomplete checkpoint listed: $1/$c"; sed 's/^/     | /' "$tmp/out_inspect" | tail -n 5
    fi
  done
  # the folder's listing (what --resume considers) names no .tmp
  if "$strata" inspect "$1" 2>/dev/null | grep -q '\.tmp'; then ok=0; echo "     a .tmp is listed as a checkpoint"; fi
  [ $ok = 1 ]
}

# The uninterrupted runs (2 and 3 processes, the same job, every=2): their
# digests, and how long training takes (from every rank training to the
# end), the range the random delays are drawn from.
declare -A ref
train_ms=()
for n in 2 3; do
  rm -rf "$tmp/ref$n"
  start_job "$n" 0 "ref$n" --set "checkpoint={dir=\"$tmp/ref$n\",every=2,keep=2}"
  started "$n"; t0=$(now_ms)
  wait_job "$n" 120
  train_ms[$n]=$(($(now_ms) - t0))
  ref[$n]=$(digest "$tmp/out0")
  if [ "${st[*]}" != "$(printf '0 %.0s' $(seq "$n") | sed 's/ $//')" ] || [ -z "${ref[$n]}" ]; then
    bad "uninterrupted $n-process run (exit ${st[*]})"; exit 1
  fi
  final[$n]=$(ls "$tmp/ref$n" | grep '^ckpt-[0-9]*$' | tail -n 1)
  echo "     uninterrupted $n-process run: ${ref[$n]}, trains ${train_ms[$n]} ms, final ${final[$n]}"
done

worst=0 kills=0 in_ckpt=0 late=0 fresh=0 ssd_rounds=0
declare -A byrank
landed=0
for ((i = 1; i <= 40 && (i <= rounds || landed < 20); i++)); do
  n=2; [ $((i % 8)) = 5 ] && n=3          # rounds 5, 13, 21: 3 processes
  ssd=0; [ $((i % 4)) = 3 ] && ssd=1      # rounds 3, 7, 11, ...: the SSD tier on
  every=$((RANDOM % 2 + 1))
  victim=$((RANDOM % n))
  mode=$((RANDOM % 2))                    # 0: mid-training, 1: during a checkpoint write
  delay=$((RANDOM * 32768 + RANDOM))
  delay=$((delay % (train_ms[n] + 1)))    # ms after training started
  nth=$((RANDOM % (40 / every) + 1))      # the nth checkpoint's .tmp
  ck="checkpoint={dir=\"$tmp/c$i\",every=$every,keep=2}"
  rm -rf "$tmp/c$i" "$tmp"/out[0-9]* "$tmp"/out_crash*
  start_job "$n" "$ssd" "r$i" --set "$ck"
  started "$n" || { bad "round $i: the ranks did not start training within 120 s"; wait_job "$n" 1; continue; }
  what=
  if [ $mode = 0 ]; then
    sleep "$((delay / 1000)).$(printf %03d $((delay % 1000)))"
    what="${delay} ms into training"
  else
    # the nth distinct ckpt-*.tmp seen (or the job's end)
    seen= k=0
    while kill -0 "${pids[$victim]}" 2>/dev/null; do
      for f in "$tmp/c$i"/ckpt-*.tmp; do
        [ -e "$f" ] || continue
        case " $seen " in *" $f "*) ;; *) seen="$seen $f"; k=$((k + 1)) ;; esac
      done
      [ $k -ge $nth ] && break
    done
    what="at checkpoint write #$nth"
  fi
  during=0; compgen -G "$tmp/c$i/ckpt-*.tmp" >/dev/null && during=1
  kill -9 "${pids[$victim]}" 2>/dev/null
  t0=$(now_ms)
  wait "${pids[$victim]}" 2>/dev/null; vs=$?
  # the survivors: each one's exit time from the kill
  msg=() said=
  max=0 ok_surv=1 finished=0
  for ((r = 0; r < n; r++)); do
    [ $r = "$victim" ] && continue
    while kill -0 "${pids[$r]}" 2>/dev/null && [ $(($(now_ms) - t0)) -lt $((bound * 1000 + 5000)) ]; do
      sleep 0.02
    done
    if kill -0 "${pids[$r]}" 2>/dev/null; then
      kill -9 "${pids[$r]}"; wait "${pids[$r]}" 2>/dev/null; ok_surv=0; msg+=("rank $r hangs")
      continue
    fi
    wait "${pids[$r]}"; s=$?
    el=$(($(now_ms) - t0)); [ $el -gt $max ] && max=$el
    [ $el -gt $((bound * 1000)) ] && { ok_surv=0; msg+=("rank $r took $el ms"); }
    if [ $s = 0 ]; then
      finished=1     # only fine if the job had ended: checked below
    elif ! grep -Eq "rank $victim (died|did not answer)" "$tmp/out$r"; then
      ok_surv=0; msg+=("rank $r (exit $s) does not name rank $victim")
    else
      said=$(grep -Em1 "rank $victim (died|did not answer)" "$tmp/out$r" | sed 's/^strata: [a-z]*: //')
    fi
  done
  pids=()
  [ $vs = 0 ] && finished=1
  if [ $finished = 1 ] && [ ! -d "$tmp/c$i/${final[$n]}" ]; then
    ok_surv=0; msg+=("a rank exited 0 but the final checkpoint ${final[$n]} is not there")
  fi
  [ $max -gt $worst ] && worst=$max
  ok_dir=1; check_dir "$tmp/c$i" || ok_dir=0
  # A victim that ended on its own before the kill: the round tested
  # nothing, and its output (kept below) says why.
  if [ $vs != 137 ] && [ $vs != 0 ]; then
    ok_surv=0; msg+=("rank $victim ended on its own (status $vs) before the kill")
  fi
  # The crash run's output stays (out_crash<rank>) for bad() to show.
  for ((r = 0; r < n; r++)); do mv "$tmp/out$r" "$tmp/out_crash$r" 2>/dev/null; done
  # --resume to the end, on the same world (and SSD paths).
  rm -f "$tmp"/out[0-9]*
  start_job "$n" "$ssd" "r$i" --set "$ck" --resume
  wait_job "$n" 120
  if [ -n "$newest" ]; then
    grep -q "resuming from .*/$newest\b" "$tmp/out0" || { ok_dir=0; msg+=("did not resume from $newest"); }
  else
    fresh=$((fresh + 1))
    ! grep -q "resuming from" "$tmp/out0" || { ok_dir=0; msg+=("resumed with no complete checkpoint"); }
  fi
  d=$(digest "$tmp/out0")
  # what a killed rank 0 left behind is gone once the resume checkpointed
  if ls "$tmp/c$i" 2>/dev/null | grep -q '\.tmp$' && [ "$newest" != "${final[$n]}" ]; then
    ok_dir=0; msg+=("a .tmp is left after the resume: $(ls "$tmp/c$i" | tr '\n' ' ')")
  fi
  kills=$((kills + 1)) ssd_rounds=$((ssd_rounds + ssd))
  [ $vs = 0 ] && late=$((late + 1))
  [ $vs = 137 ] && landed=$((landed + 1))
  in_ckpt=$((in_ckpt + during))
  byrank[$victim]=$((${byrank[$victim]:-0} + 1))
  desc="round $i: $n processes$([ $ssd = 1 ] && echo ", SSD tier"), every $every, rank $victim killed $what$([ $during = 1 ] && echo ' (a .tmp present)')$([ $vs = 0 ] && echo ' (after it ended)')"
  if [ $ok_surv = 1 ] && [ $ok_dir = 1 ] && [ "${st[*]}" = "$(printf '0 %.0s' $(seq "$n") | sed 's/ $//')" ] &&
     [ "$d" = "${ref[$n]}" ]; then
    ok "$desc: survivors out in $max ms${said:+ (\"$said\")}, resumed from ${newest:-nothing}, the uninterrupted model"
  else
    bad "$desc: ${msg[*]:-}; resume exit ${st[*]}, '$d' vs '${ref[$n]}'"
  fi
done

echo "     $kills rounds, $landed kills of a running rank (victims: rank 0: ${byrank[0]:-0}, rank 1: ${byrank[1]:-0}, rank 2: ${byrank[2]:-0}), $in_ckpt during a checkpoint write, $late after the end, $fresh resumed from nothing, $ssd_rounds with the SSD tier; slowest survivor exit $worst ms (bound $bound s)"
[ "${byrank[0]:-0}" -ge 1 ] || bad "rank 0 was never killed (seed $seed)"
[ $landed -ge 20 ] || bad "only $landed of $kills kills landed in a running job (seed $seed)"
echo "dist_crash: $pass passed, $fail failed (seed $seed)"
[ $fail -eq 0 ]
