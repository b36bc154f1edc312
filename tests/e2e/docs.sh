#!/usr/bin/env bash
# The tables in docs/ that the code generates must equal what the binary
# prints now (a policy added to ops/sync/policies.def shows up in
# docs/policies.md, or this fails). Usage: docs.sh PATH/TO/strata
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
fail=0
want=$("$strata" help policies) || { echo "FAIL strata help policies exited non-zero"; exit 1; }
have=$(sed -n '/<!-- policies:begin/,/<!-- policies:end/p' "$root/docs/policies.md" | sed '1d;$d')
if [ -z "$have" ]; then
	echo "FAIL docs/policies.md has no generated policy table"; fail=1
elif [ "$want" != "$have" ]; then
	echo "FAIL docs/policies.md's policy table differs from \`strata help policies\`:"
	diff <(echo "$have") <(echo "$want") | sed 's/^/     | /'
	fail=1
else
	echo "ok   docs/policies.md policy table = strata help policies"
fi
[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
