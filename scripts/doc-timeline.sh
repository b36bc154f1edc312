#!/usr/bin/env bash
# Makes docs/trace-timeline.png, the picture of the report's timeline in
# docs/observability.md, from a real run: tests/e2e/jobs/gen_phases.lua
# (two phases, allreduce then async, two train workers, worker 1 slowed)
# on 200k generated rows with an SSD tier and interval checkpoints, traced;
# `strata report --trace` draws the timeline; headless Chromium takes the
# screenshot of the timeline's SVG alone (cut out of the report with its
# style, so the picture is the report's own drawing).
# Usage: scripts/doc-timeline.sh [PATH/TO/strata]   (default build/cli/strata)
set -eu
cd "$(dirname "$0")/.."
strata=${1:-build/cli/strata}
chromium=$(command -v chromium || command -v chromium-browser) ||
  { echo "doc-timeline.sh: chromium is not installed (scripts/install-deps.sh)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$strata" gen --rows 200000 --eval-rows 20000 --vocab 100000 --seed 3 --out "$tmp/d" >/dev/null
mkdir -p "$tmp/ssd"
"$strata" run tests/e2e/jobs/gen_phases.lua --quiet --no-pin --set 'data.generate=nil' \
  --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\"" \
  --set "storage={mem=\"24MiB\", ssd={path=\"$tmp/ssd\", file_size=\"1MiB\"}}" \
  --set "checkpoint={dir=\"$tmp/ck\", every=20}" --trace "$tmp/t.json"
"$strata" report --trace "$tmp/t.json" -o "$tmp/r.html"
python3 - "$tmp/r.html" "$tmp/tl.html" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
css = re.search(r"<style>(.*?)</style>", s, re.S).group(1)
svg = re.search(r'<svg class="timeline".*?</svg>', s, re.S).group(0)
open(sys.argv[2], "w").write('<!doctype html><html><head><meta charset="utf-8"><style>' + css +
    "body{margin:6px;max-width:none}svg.timeline{margin:0}</style></head><body>" + svg +
    "</body></html>")
PY
# The window's height fits the SVG: 900 units wide drawn 1088 px wide.
h=$(grep -o 'svg class="timeline" viewBox="0 0 900 [0-9]*' "$tmp/tl.html" | awk '{print $NF}')
timeout 120 "$chromium" --headless=new --no-sandbox --disable-gpu --no-first-run \
  --hide-scrollbars --user-data-dir="$tmp/chrome" --screenshot="$tmp/tl.png" \
  --window-size=1100,$(( h * 1088 / 900 + 14 )) "file://$tmp/tl.html" >/dev/null 2>&1
cp "$tmp/tl.png" docs/trace-timeline.png
echo "docs/trace-timeline.png: $(stat -c %s docs/trace-timeline.png) bytes"
