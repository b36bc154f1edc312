#!/usr/bin/env bash
# `strata report` end to end (issue 22): a small two-phase job with an SSD
# tier and a checkpoint runs with --metrics and --trace; the report built
# from them is one self-contained HTML file (no http:// or https:// src or
# href, no <script src>, no <link>) with a chart for every series the run
# recorded; bad inputs fail naming the file (and line). Then headless
# Chromium renders it: the DOM holds the SVG charts, the console shows no
# errors, and the screenshot's plot areas are not blank (the PNG is decoded
# with python3's zlib and coloured pixels are counted); the timeline of the
# threads is in the page, the DOM and, by its colours, the screenshot.
# Without chromium only the browser part is skipped (exit 77, saying why),
# after the HTML checks ran and passed.
# Usage: report.sh PATH/TO/strata
# Prints "N passed, N failed" and exits non-zero if anything failed.
set -u
strata=$1
root=${ST_SOURCE_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -f "$tmp/out" ] && sed 's/^/     | /' "$tmp/out" | tail -n 20; }

"$strata" gen --rows 40000 --eval-rows 4000 --vocab 20000 --seed 4 --out "$tmp/d" >/dev/null 2>&1 ||
  { echo "FAIL gen"; exit 1; }
mkdir -p "$tmp/ssd"
if "$strata" run tests/e2e/jobs/gen_phases.lua --quiet --no-pin --set 'data.generate=nil' \
     --set "data.train.path=\"$tmp/d/train-*.tsv\"" --set "data.eval.path=\"$tmp/d/eval.tsv\"" \
     --set output.progress=0.1 --set "storage={mem=\"16MiB\", ssd={path=\"$tmp/ssd\"}}" \
     --set "checkpoint={dir=\"$tmp/ck\", every=5}" \
     --metrics "$tmp/m.jsonl" --trace "$tmp/t.json" >"$tmp/out" 2>&1; then
  ok "a two-phase job with an SSD tier writes metrics and a trace"
else
  bad "the job failed"; echo "$pass passed, $fail failed"; exit 1
fi

# The report from all three inputs.
html=$tmp/report.html
if "$strata" report --metrics "$tmp/m.jsonl" --trace "$tmp/t.json" --checkpoint "$tmp/ck" \
     --title 'report <test>' -o "$html" >"$tmp/out" 2>&1 && [ -s "$html" ]; then
  ok "strata report writes $html"
else
  bad "strata report failed"
fi

# Self-contained: nothing on the page is fetched from anywhere.
if grep -Eiq '(src|href)[[:space:]]*=[[:space:]]*["'"'"']?[[:space:]]*(https?:)?//' "$html" ||
   grep -Eiq 'https?://|<script[^>]*src|<link|@import|url\(' "$html"; then
  grep -Eion '(src|href)=.{0,40}|https?://.{0,40}|<link.{0,40}|@import|url\(' "$html" | head >"$tmp/out"
  bad "the report refers to something outside itself"
else
  ok "the report is self-contained (no http(s) src/href, no link, no import)"
fi

# A chart for each series the run recorded; the title is escaped.
n_svg=$(grep -c '<svg class="chart"' "$html")
n_path=$(grep -c '<path class="series"' "$html")
missing=""
for t in "AUC over examples" "Logloss over examples" "Examples per second over time" \
         "Examples per second of each stage" "Busy share of each stage" \
         "Queue occupancy at each progress record" "Queue occupancy after each take (trace)" \
         "Hit rates per tier" "Rows per tier" "Bytes per tier" "Staleness of applied updates" \
         "Dropped gradients"; do
  grep -q "<title>$t</title>" "$html" || missing="$missing '$t'"
done
if [ -z "$missing" ] && [ "$n_svg" -ge 12 ] && [ "$n_path" -ge 30 ] &&
   grep -q 'report &lt;test&gt;' "$html" && grep -q 'end of warmup (allreduce)' "$html" &&
   grep -q '&larr; bottleneck' "$html" && grep -q 'kind: checkpoint' "$html"; then
  ok "every recorded series is charted ($n_svg charts, $n_path lines), markers, stage sums, manifest"
else
  echo "charts $n_svg, lines $n_path, missing:$missing" >"$tmp/out"
  bad "the report lacks charts or parts"
fi

# The timeline of the threads: a row per track, the SSD writer's among
# them, rectangles of stage work, waits and background work, and no more
# rectangles than its bound (600 columns x 48 rows).
n_rect=$(grep -c '<rect class="tl-' "$html")
if grep -q '<svg class="timeline"' "$html" && grep -q '>st-train-0</text>' "$html" &&
   grep -q '>st-ssd-writer-0</text>' "$html" && grep -q '<rect class="tl-stage"' "$html" &&
   grep -Eq '<rect class="tl-(idle|blocked)"' "$html" && grep -q '<rect class="tl-background"' "$html" &&
   [ "$n_rect" -ge 20 ] && [ "$n_rect" -le 28800 ]; then
  ok "the timeline has a row per thread and $n_rect rectangles of each kind"
else
  echo "timeline rectangles: $n_rect" >"$tmp/out"
  bad "the timeline is missing or incomplete"
fi

# Only the trace: the metrics charts say they were not recorded.
if "$strata" report --trace "$tmp/t.json" -o "$tmp/t.html" >"$tmp/out" 2>&1 &&
   grep -q '<b>AUC over examples</b>: not recorded in this run' "$tmp/t.html" &&
   grep -q '<title>Queue occupancy after each take (trace)</title>' "$tmp/t.html"; then
  ok "a trace alone: metrics plots say 'not recorded in this run'"
else
  bad "report from a trace alone"
fi

# Bad inputs: the file, and the line, are named; usage errors exit 2.
printf '{"t":1,"examples":5}\n{"t":2,"examples" 6}\n' >"$tmp/bad.jsonl"
"$strata" report --metrics "$tmp/bad.jsonl" -o "$tmp/x.html" >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "$tmp/bad.jsonl:2: expected ':' after a key" "$tmp/out" &&
   [ ! -e "$tmp/x.html" ]; then
  ok "a malformed metrics line is named by file:line (exit 1, no output)"
else
  bad "malformed metrics line (exit $rc)"
fi
"$strata" report --metrics "$tmp/none.jsonl" -o "$tmp/x.html" >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "$tmp/none.jsonl" "$tmp/out"; then
  ok "a missing metrics file is named (exit 1)"
else
  bad "missing metrics file (exit $rc)"
fi
"$strata" report --trace "$tmp/bad.jsonl" -o "$tmp/x.html" >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "bad.jsonl holds no trace events" "$tmp/out"; then
  ok "a file that is no trace is refused (exit 1)"
else
  bad "not a trace (exit $rc)"
fi
"$strata" report -o "$tmp/x.html" >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "nothing to report" "$tmp/out"; then
  ok "no input is a usage error (exit 2)"
else
  bad "no input (exit $rc)"
fi

if [ $fail -gt 0 ]; then
  echo "$pass passed, $fail failed"
  exit 1
fi

# ---- the browser part -------------------------------------------------------
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "skip: chromium is not installed (scripts/install-deps.sh installs it): the page was"
  echo "      not rendered; the HTML checks above passed"
  echo "$pass passed, $fail failed"
  exit 77
fi
chrome() {
  timeout 120 "$chromium" --headless=new --no-sandbox --disable-gpu --no-first-run \
    --user-data-dir="$tmp/chrome" --enable-logging=stderr --v=0 "$@"
}

# The DOM as the browser built it: the charts are SVG elements with paths.
chrome --dump-dom "file://$html" >"$tmp/dom.html" 2>"$tmp/dom.err"
n_dom=$(grep -o '<svg class="chart"' "$tmp/dom.html" | wc -l)
p_dom=$(grep -o '<path class="series"' "$tmp/dom.html" | wc -l)
r_dom=$(grep -o '<rect class="tl-' "$tmp/dom.html" | wc -l)
if [ "$n_dom" -eq "$n_svg" ] && [ "$p_dom" -eq "$n_path" ] && [ "$r_dom" -eq "$n_rect" ]; then
  ok "chromium's DOM holds the $n_dom SVG charts, $p_dom lines and $r_dom timeline rectangles"
else
  echo "dom: $n_dom svg, $p_dom paths, $r_dom rects (page: $n_svg, $n_path, $n_rect)" >"$tmp/out"
  bad "chromium's DOM lacks the charts"
fi

# The screenshot, and the console while taking it.
chrome --screenshot="$tmp/shot.png" --window-size=1280,2400 "file://$html" >/dev/null 2>"$tmp/shot.err"
if grep -Eq 'CONSOLE|Uncaught' "$tmp/shot.err" "$tmp/dom.err"; then
  grep -E 'CONSOLE|Uncaught' "$tmp/shot.err" "$tmp/dom.err" | head >"$tmp/out"
  bad "the browser console reported errors"
else
  ok "no console messages"
fi

# Decode the PNG (zlib only) and count, in the band of the page where the
# charts are, pixels of the series' colours (saturated, unlike the grey
# text and grid) and distinct colours. A blank or unstyled page has none.
cat >"$tmp/png.py" <<'PY'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
if d[:8] != b"\x89PNG\r\n\x1a\n":
    print("not a PNG"); sys.exit(1)
pos, idat = 8, b""
while pos < len(d):
    n, = struct.unpack(">I", d[pos:pos + 4]); t = d[pos + 4:pos + 8]; c = d[pos + 8:pos + 8 + n]
    pos += 12 + n
    if t == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", c[:10])
    elif t == b"IDAT":
        idat += c
if depth != 8 or ctype not in (2, 6):
    print("unexpected PNG format %d/%d" % (depth, ctype)); sys.exit(1)
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(idat)
stride = w * bpp
prev = bytearray(stride)
coloured, colours, nonwhite, i = 0, set(), 0, 0
# The timeline's solid colours (ops/report/timeline.c): stage work
# #3b6fb6 and background work #2f9e44, apart from the line charts' colours.
near = lambda p, q: all(abs(a - b) <= 3 for a, b in zip(p, q))
stage = bg = 0
y0, y1 = int(h * 0.2), h          # below the summary table: the charts
for y in range(h):
    f = raw[i]; line = bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    if f == 1:
        for x in range(bpp, stride): line[x] = (line[x] + line[x - bpp]) & 255
    elif f == 2:
        line = bytearray((a + b) & 255 for a, b in zip(line, prev))
    elif f == 3:
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            line[x] = (line[x] + (a + prev[x]) // 2) & 255
    elif f == 4:
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    prev = line
    if y0 <= y < y1:
        for x in range(0, stride, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            if r < 245 or g < 245 or b < 245:
                nonwhite += 1
            if near((r, g, b), (0x3b, 0x6f, 0xb6)): stage += 1
            elif near((r, g, b), (0x2f, 0x9e, 0x44)): bg += 1
            if max(r, g, b) - min(r, g, b) > 80:
                coloured += 1
                colours.add((r >> 3, g >> 3, b >> 3))
if len(sys.argv) > 2 and sys.argv[2] == "timeline":
    print("%dx%d: %d pixels of stage work, %d of background work (timeline colours)"
          % (w, h, stage, bg))
    sys.exit(0 if stage > 3000 and bg > 20 else 1)
print("%dx%d: %d non-white, %d coloured pixels, %d distinct colours in the chart band"
      % (w, h, nonwhite, coloured, len(colours)))
sys.exit(0 if nonwhite > 50000 and coloured > 3000 and len(colours) >= 8 else 1)
PY
if [ -s "$tmp/shot.png" ] && /usr/bin/python3 "$tmp/png.py" "$tmp/shot.png" >"$tmp/out" 2>&1; then
  ok "the screenshot's charts are drawn: $(cat "$tmp/out")"
else
  bad "the screenshot is blank or unreadable"
fi

# The timeline rendered: the page of the trace alone (short, so the
# timeline is in the first screen), its stage-work and background-work
# colours on the screenshot.
chrome --screenshot="$tmp/tl.png" --window-size=1280,1800 "file://$tmp/t.html" >/dev/null 2>&1
if [ -s "$tmp/tl.png" ] && /usr/bin/python3 "$tmp/png.py" "$tmp/tl.png" timeline >"$tmp/out" 2>&1; then
  ok "the screenshot's timeline is drawn: $(cat "$tmp/out")"
else
  bad "the timeline is not drawn on the screenshot"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
