#!/usr/bin/env bash
# A job file (or a module it requires) must be a regular file of at most
# 16 MiB. `strata check /dev/zero` read until it had taken ~2 GB, a FIFO
# blocked in open forever, and a directory said "Input/output error".
# Usage: bash a_job_file_kinds.sh STRATA TMPDIR; exit 0 pass, 1 fail.
set -u
strata=$1
tmp=$2
fail=0
# expect NAME PATTERN -- command...   (exit 2 and the pattern, within 20 s)
expect() {
  local name=$1 pat=$2; shift 3
  timeout -k 2 20 "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -ne 2 ] || ! grep -Eq -- "$pat" "$tmp/out"; then
    echo "FAIL $name (exit $rc)"; sed 's/^/     | /' "$tmp/out"; fail=1
  else
    echo "ok   $name"
  fi
}
expect "/dev/zero" "^/dev/zero: cannot read the job file: it is not a regular file" -- "$strata" check /dev/zero
mkdir "$tmp/dir.lua"
expect "directory" "dir.lua: cannot read the job file: it is a directory, not a file" -- "$strata" check "$tmp/dir.lua"
mkfifo "$tmp/fifo.lua"
expect "FIFO" "fifo.lua: cannot read the job file: it is not a regular file" -- "$strata" check "$tmp/fifo.lua"
truncate -s 17M "$tmp/big.lua"
expect "17 MiB job file" "big.lua: cannot read the job file: it is 17.0 MiB; a job file or module may be at most 16 MiB" -- "$strata" check "$tmp/big.lua"
truncate -s 1G "$tmp/huge.lua"
expect "module of 1 GiB" "job.lua:2: module 'huge': cannot read .*/huge.lua: it is 1024.0 MiB" -- bash -c 'printf "local st = require \"strata\"\nlocal m = require \"huge\"\n" >"$1/job.lua" && exec "$2" check "$1/job.lua"' _ "$tmp" "$strata"
exit $fail
