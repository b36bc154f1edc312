#!/usr/bin/env bash
# The adversarial pass: what a careless user or a hostile one does to strata,
# replayed on every test run so the fixes of issue 15 stay fixed.
#
#   jobs/NAME.lua   a job file (or data it points at) that must be refused or
#                   must fail in a stated way. Its header says how:
#                     -- adversarial: CMD [ARGS...]   (strata CMD FILE ARGS; default "check")
#                     -- exit: N                      (expected exit code)
#                     -- expect: ERE                  (grep -E over stdout+stderr; several allowed)
#                   ARGS may use $TMP (a fresh directory per case) and $ROOT.
#   checks/NAME.sh  a scripted check (signals, stalled ranks, listeners, bad
#                   data...): run as `bash NAME.sh STRATA TMPDIR` from the
#                   source root; exit 0 pass, 77 skip (say why), else fail.
#
# Every case runs under a timeout: a hang is a failure, never a pass.
# Usage: run.sh PATH/TO/strata. Prints "N passed, N failed, N skipped";
# exits 1 if anything failed.
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
here="$root/tests/adversarial"
cd "$root"
pass=0 fail=0 skip=0
case_timeout=${ST_ADV_TIMEOUT:-120}

ok()   { pass=$((pass + 1)); echo "ok   $1"; }
bad()  { fail=$((fail + 1)); echo "FAIL $1"; [ -f "${2:-/dev/null}" ] && sed 's/^/     | /' "$2" | tail -n 25; }
skp()  { skip=$((skip + 1)); echo "skip $1"; }

for job in "$here"/jobs/*.lua; do
  [ -e "$job" ] || continue
  name="jobs/$(basename "$job")"
  tmp=$(mktemp -d)
  cmdline=$(sed -n 's/^-- adversarial: //p' "$job" | head -n 1)
  want=$(sed -n 's/^-- exit: //p' "$job" | head -n 1)
  [ -n "$cmdline" ] || cmdline=check
  if [ -z "$want" ]; then bad "$name (no '-- exit:' line)"; rm -rf "$tmp"; continue; fi
  cmdline=${cmdline//\$TMP/$tmp}; cmdline=${cmdline//\$ROOT/$root}
  # shellcheck disable=SC2086
  set -- $cmdline
  sub=$1; shift
  timeout -k 5 "$case_timeout" "$strata" "$sub" "${job#"$root"/}" "$@" >"$tmp/out" 2>&1 </dev/null
  rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then bad "$name (timed out after ${case_timeout}s)" "$tmp/out"
  elif [ "$rc" -ne "$want" ]; then bad "$name (exit $rc, wanted $want)" "$tmp/out"
  else
    miss=""
    while IFS= read -r pat; do
      grep -Eq -- "$pat" "$tmp/out" || miss="$pat"
    done < <(sed -n 's/^-- expect: //p' "$job")
    if [ -n "$miss" ]; then bad "$name (no match for /$miss/)" "$tmp/out"; else ok "$name"; fi
  fi
  rm -rf "$tmp"
done

for chk in "$here"/checks/*.sh; do
  [ -e "$chk" ] || continue
  name="checks/$(basename "$chk")"
  tmp=$(mktemp -d)
  timeout -k 5 "$case_timeout" bash "$chk" "$strata" "$tmp" >"$tmp/.log" 2>&1 </dev/null
  rc=$?
  case $rc in
    0) ok "$name" ;;
    77) skp "$name: $(tail -n 1 "$tmp/.log")" ;;
    124|137) bad "$name (timed out after ${case_timeout}s)" "$tmp/.log" ;;
    *) bad "$name (exit $rc)" "$tmp/.log" ;;
  esac
  rm -rf "$tmp"
done

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
