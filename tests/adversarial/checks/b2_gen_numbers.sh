# strata gen's numeric options: a bad value is a usage error (exit 2) whose
# message names the option and what it must be, an overflowing one says it is
# out of range (not "--rows and --out are required"), and nothing is written.
# Usage: bash b2_gen_numbers.sh STRATA TMPDIR
set -u
strata=$1 tmp=$2
fail=0
# expect EXIT ERE ARGS...: runs strata gen ARGS, checks exit code and message.
expect() {
  local want=$1 pat=$2; shift 2
  "$strata" gen "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -Eq -- "$pat" "$tmp/out"; then
    echo "FAIL gen $* (exit $rc, wanted $want and /$pat/):"; sed 's/^/  | /' "$tmp/out"
    fail=1
  fi
}
out=(--out "$tmp/g")
expect 2 "--zipf must be a number > 0, got '0'" --rows 10 --zipf 0 "${out[@]}"
expect 2 "--zipf must be a number > 0, got '-1'" --rows 10 --zipf -1 "${out[@]}"
expect 2 "--zipf must be a number > 0, got 'inf' \(out of range\)" --rows 10 --zipf inf "${out[@]}"
expect 2 "--rows must be a whole number between 1 and [0-9]+, got '99999999999999999999999' \(out of range\)" \
  --rows 99999999999999999999999 "${out[@]}"
expect 2 "--rows .*got '1e30' \(out of range\)" --rows 1e30 "${out[@]}"
expect 2 "--rows must be a whole number .*got '2.5'" --rows 2.5 "${out[@]}"
expect 2 "--eval-rows .*got '1e40' \(out of range\)" --rows 10 --eval-rows 1e40 "${out[@]}"
expect 2 "--seed must be a whole number between 0 and 18446744073709551615, got '18446744073709551616' \(out of range\)" \
  --rows 10 --seed 18446744073709551616 "${out[@]}"
expect 2 "--vocab .*got '1e20' \(out of range\)" --rows 10 --vocab 1e20 "${out[@]}"
expect 2 "--files must be a whole number between 1 and 100000, got '0'" --rows 10 --files 0 "${out[@]}"
expect 2 "--threads .*got '1e10' \(out of range\)" --rows 10 --threads 1e10 "${out[@]}"
expect 2 "--days must be a whole number between 0 and 365, got '2.5'" --rows 10 --days 2.5 "${out[@]}"
expect 2 "--drift must be a number, got 'nan'" --rows 10 --days 2 --drift nan "${out[@]}"
# The largest seed is taken exactly, and a good run still works.
expect 0 "wrote 10 train rows" --rows 10 --seed 18446744073709551615 --out "$tmp/ok"
if [ -e "$tmp/g" ]; then echo "FAIL a refused gen created $tmp/g"; fail=1; fi
exit $fail
