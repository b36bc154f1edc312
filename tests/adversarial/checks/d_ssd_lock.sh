#!/usr/bin/env bash
# Two jobs on one storage.ssd.path (issue 15). The second used to open the
# same store directory "fresh", deleting the first job's row files under it,
# and its clean-up removed them again. Now the first job's SSD tier holds a
# lock on <path>/strata-store/t0: the second job must stop at once with exit
# 1, naming the path and the first job's pid, and the first must finish as
# if alone (exit 0, an eval result, its store directory removed at the end).
# The first job is held with SIGSTOP while the second runs, so the overlap
# does not depend on timing.
# Usage: bash d_ssd_lock.sh STRATA TMPDIR (from the source root).
set -u
strata=$1
tmp=$2
gd="$tmp/gd"
mkdir -p "$tmp/ssd"
args=(tests/e2e/jobs/gen_dnn.lua --quiet
      --set "data.generate.dir=\"$gd\"" --set "data.train.path=\"$gd/train-*.tsv\""
      --set "data.eval.path=\"$gd/eval.tsv\"" --set data.generate.rows=40000
      --set data.generate.eval_rows=4000 --set stages.read.batch_size=512
      --set "storage={mem=\"3MiB\",ssd={path=\"$tmp/ssd\",file_size=\"256KiB\"}}")

"$strata" run "${args[@]}" >"$tmp/one.out" 2>&1 &
one=$!
trap 'kill -CONT $one 2>/dev/null; kill $one 2>/dev/null' EXIT
t0="$tmp/ssd/strata-store/t0"
lock="$t0/LOCK"
# Wait until the first job's store is open: its lock file carries the pid
# (or, without the lock, its first row file is written). Bounded poll; the
# runner's timeout is the backstop.
for _ in $(seq 1200); do
  [ -s "$lock" ] && break
  compgen -G "$t0/*.sst" >/dev/null && break
  kill -0 "$one" 2>/dev/null || break
  sleep 0.05
done
kill -STOP "$one" 2>/dev/null
if ! kill -0 "$one" 2>/dev/null; then
  echo "FAIL: the first job ended before its SSD store was seen open"
  cat "$tmp/one.out"
  exit 1
fi
fail=0
held=$(tr -d '\n' <"$lock" 2>/dev/null)
if [ "$held" != "$one" ]; then
  echo "FAIL: $lock names pid '$held', the first job is $one"; fail=1
fi
files_before=$(find "$t0" -mindepth 1 -printf "%f\n" | sort)

"$strata" run "${args[@]}" >"$tmp/two.out" 2>&1 </dev/null
rc=$?
cat "$tmp/two.out"
if [ "$rc" -ne 1 ]; then echo "FAIL: second job exited $rc, wanted 1"; fail=1; fi
grep -Eq "ssd/strata-store/t0: the SSD store directory is in use by another store \(process $one holds .*/LOCK\)" "$tmp/two.out" ||
  { echo "FAIL: no message naming the store directory and pid $one"; fail=1; }
grep -Fq "storage.ssd.path $tmp/ssd is in use by another strata job" "$tmp/two.out" ||
  { echo "FAIL: no message naming storage.ssd.path"; fail=1; }
if [ "$(find "$t0" -mindepth 1 -printf "%f\n" 2>/dev/null | sort)" != "$files_before" ]; then
  echo "FAIL: the second job changed the first job's store files"; fail=1
fi

kill -CONT "$one"
wait "$one"
rc1=$?
trap - EXIT
if [ "$rc1" -ne 0 ] || ! grep -Eq "eval +auc" "$tmp/one.out"; then
  echo "FAIL: the first job did not finish cleanly (exit $rc1)"; sed 's/^/  one| /' "$tmp/one.out"; fail=1
fi
if grep -Eiq "corrupt|error" "$tmp/one.out"; then
  echo "FAIL: the first job reported errors"; sed 's/^/  one| /' "$tmp/one.out"; fail=1
fi
if [ -e "$tmp/ssd/strata-store" ]; then
  echo "FAIL: the first job's store directory was left behind"; ls -R "$tmp/ssd"; fail=1
fi
[ "$fail" -eq 0 ] && echo "ok: second job refused (exit 1), first job finished alone"
exit "$fail"
