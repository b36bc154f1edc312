#!/usr/bin/env bash
# The tables in docs/ that follow the code must match it: the policy table
# of docs/policies.md equals what the binary prints now (a policy added to
# ops/sync/policies.def shows up there, or this fails), and the table of
# docs/environment.md names every STRATA_* variable the source reads or
# sets, and no other. Usage: docs.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

want=$("$strata" help policies) || { echo "FAIL strata help policies exited non-zero"; exit 1; }
have=$(sed -n '/<!-- policies:begin/,/<!-- policies:end/p' "$root/docs/policies.md" | sed '1d;$d')
if [ -z "$have" ]; then
	bad "docs/policies.md has no generated policy table"
elif [ "$want" != "$have" ]; then
	bad "docs/policies.md's policy table differs from \`strata help policies\`:"
	diff <(echo "$have") <(echo "$want") | sed 's/^/     | /'
else
	ok "docs/policies.md policy table = strata help policies"
fi

# Environment variables: the quoted names in the C source against the
# names in the table rows of docs/environment.md.
code=$(cd "$root" && grep -rhoE '"STRATA_[A-Z0-9_]+' runtime ops cli lang --include='*.c' --include='*.h' |
	tr -d '"' | sort -u)
table=$(grep '^|' "$root/docs/environment.md" | grep -oE '`STRATA_[A-Z0-9_]+`' | tr -d '`' | sort -u)
if [ -z "$code" ] || [ -z "$table" ]; then
	bad "no STRATA_* names found (source: $(echo "$code" | grep -c .), docs/environment.md: $(echo "$table" | grep -c .))"
else
	missing=$(comm -23 <(echo "$code") <(echo "$table"))
	stale=$(comm -13 <(echo "$code") <(echo "$table"))
	if [ -n "$missing" ] || [ -n "$stale" ]; then
		bad "docs/environment.md's table and the source disagree"
		[ -n "$missing" ] && echo "$missing" | sed 's/^/     | read by the source, not in the table: /'
		[ -n "$stale" ] && echo "$stale" | sed 's/^/     | in the table, not in the source: /'
	else
		ok "docs/environment.md names the $(echo "$code" | wc -l) STRATA_* variables of the source"
	fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
