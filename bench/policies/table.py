#!/usr/bin/env python3
"""table.py — turns the runs of bench/policies/run.sh into markdown tables.

    python3 bench/policies/table.py OUT_DIR [MORE_OUT_DIRS...]
    python3 bench/policies/table.py --summary OUT_DIR [MORE_OUT_DIRS...]

Reads OUT_DIR/index.tsv (one line per run: data, label, straggler, seed, rc,
wall_s, name, sync), each run's NAME.out (stdout: the "eval auc ... logloss"
line) and NAME.jsonl (--metrics; the record with "final": true gives
ex_per_s and the sync_* metrics), and OUT_DIR/switch.tsv when the switch
experiment ran. Prints one table per data set, the switch table and the
numbers behind each claim of the papers. Further OUT_DIRs (repetitions of
some runs, e.g. OUT=... POLICIES="allreduce gba-1024-2" run.sh) are pooled:
a cell then shows the mean, the sd and the number of runs. The switch table
comes from the first OUT_DIR. Standard library only.
"""
import json
import math
import os
import re
import statistics
import sys

EVAL_RE = re.compile(r"^\s+eval\s+auc\s+([0-9.]+)\s+logloss\s+([0-9.]+)")


def final_record(path):
    """The last record with "final": true of a metrics file, or None."""
    rec = None
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("final"):
                    rec = r
    except OSError:
        return None
    return rec


def eval_lines(path):
    """Every (auc, logloss) eval line of a run's stdout, in order."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                m = EVAL_RE.match(line)
                if m:
                    out.append((float(m.group(1)), float(m.group(2))))
    except OSError:
        pass
    return out


def load(outdir):
    runs = []
    if not os.path.exists(os.path.join(outdir, "index.tsv")):
        return runs
    with open(os.path.join(outdir, "index.tsv")) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            row = dict(zip(header, line.rstrip("\n").split("\t")))
            name = row["name"]
            row["ok"] = row["rc"] == "0"
            ev = eval_lines(os.path.join(outdir, name + ".out"))
            row["auc"], row["logloss"] = ev[-1] if ev else (None, None)
            rec = final_record(os.path.join(outdir, name + ".jsonl"))
            met = (rec or {}).get("metrics", {})
            row["ex_per_s"] = (rec or {}).get("ex_per_s")
            for k in ("sync_staleness_mean", "sync_staleness_max", "sync_dropped",
                      "sync_bytes", "sync_updates"):
                row[k] = met.get(k)
            if not row["ok"]:
                try:
                    with open(os.path.join(outdir, name + ".out")) as f:
                        msg = [l.strip() for l in f if l.strip()
                               and not l.startswith("strata: info")]
                    row["why"] = msg[0] if msg else f"rc {row['rc']}"
                except OSError:
                    row["why"] = f"rc {row['rc']}"
                # the job file's path says nothing here
                row["why"] = re.sub(r"^\S*policy_dnn\.lua(:\d+)?: ", "", row["why"])
            runs.append(row)
    return runs


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def sd(xs):
    xs = [x for x in xs if x is not None]
    return statistics.stdev(xs) if len(xs) > 1 else None


def fmt(x, spec, none="—"):
    return none if x is None else format(x, spec)


def group(runs, data):
    """{(label, straggler): [runs]} in first-seen order, for one data set."""
    g = {}
    for r in runs:
        if r["data"] == data:
            g.setdefault((r["label"], r["straggler"]), []).append(r)
    return g


def summary(rs):
    ok = [r for r in rs if r["ok"]]
    s = {"n": len(ok), "na": all(r["rc"] == "NA" for r in rs),
         "failed": [r for r in rs if r["rc"] not in ("0", "NA")],
         "why": next((r.get("why") for r in rs if r.get("why")), None)}
    for k in ("auc", "logloss", "ex_per_s", "sync_staleness_mean", "sync_staleness_max",
              "sync_dropped", "sync_bytes", "sync_updates"):
        s[k] = mean([r[k] for r in ok])
    s["auc_sd"] = sd([r["auc"] for r in ok])
    s["auc_list"] = {r["seed"]: r["auc"] for r in ok}
    xs = [r["ex_per_s"] for r in ok if r["ex_per_s"]]
    s["ex_min"], s["ex_max"] = (min(xs), max(xs)) if xs else (None, None)
    s["wall"] = mean([float(r["wall_s"]) for r in ok if r["wall_s"]])
    return s


def table(runs, data):
    g = group(runs, data)
    if not g:
        return None, {}
    multi = any(len(rs) > 1 for rs in g.values())
    lines = []
    auc_h = "eval AUC (mean ± sd, runs)" if multi else "eval AUC"
    lines.append(f"| policy | straggler | {auc_h} | logloss | ex/s{' (min–max)' if multi else ''} | ex/s vs no straggler | wall s "
                 "| staleness mean / max | dropped | MB sent |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    sums = {}
    for (label, strag), rs in g.items():
        s = summary(rs)
        sums[(label, strag)] = s
        st = ("worker 1 × 3" if data == "syn2" else "worker 3 × 3") if strag == "1" else "none"
        if s["na"]:
            lines.append(f"| {label} | {st} | not available: {s['why'][:90]} | | | | | | | |")
            continue
        if not s["n"]:
            lines.append(f"| {label} | {st} | failed (rc {s['failed'][0]['rc']}): {(s['why'] or '')[:90]} | | | | | | | |")
            continue
        auc = fmt(s["auc"], ".4f")
        if multi and s["auc_sd"] is not None:
            auc += f" ± {s['auc_sd']:.4f}"
        if multi:
            auc += f" ({s['n']})"
        mb = None if s["sync_bytes"] is None else s["sync_bytes"] / 1e6
        ratio = "—"
        base = sums.get((label, "0"))
        if strag == "1" and base and base["n"] and base["ex_per_s"] and s["ex_per_s"]:
            ratio = f"{s['ex_per_s'] / base['ex_per_s']:.2f}"
        exs = fmt(s['ex_per_s'], ',.0f')
        if s["n"] > 1 and s["ex_min"] is not None:
            exs += f" ({s['ex_min'] / 1e3:,.0f}k–{s['ex_max'] / 1e3:,.0f}k)"
        lines.append(
            f"| {label} | {st} | {auc} | {fmt(s['logloss'], '.4f')} | {exs} "
            f"| {ratio} | {fmt(s['wall'], '.1f')} | {fmt(s['sync_staleness_mean'], '.2f')} / "
            f"{fmt(s['sync_staleness_max'], '.0f')} | {fmt(s['sync_dropped'], '.0f')} "
            f"| {fmt(mb, ',.1f')} |")
    return "\n".join(lines), sums


def get(sums, label, strag, key):
    s = sums.get((label, strag))
    if not s or s["na"] or not s["n"]:
        return None
    return s.get(key)


def claims(sums, data, only_straggler=False):
    """The papers' expectations, as numbers (None where a run is missing)."""
    out = []
    def d(a, b):
        return None if a is None or b is None else a - b
    def r(a, b):
        return None if a is None or b is None or not b else a / b
    ar0 = get(sums, "allreduce", "0", "auc")
    ar1 = get(sums, "allreduce", "1", "auc")
    # 1. GBA under a straggler >= 2x faster than allreduce, AUC within 0.001
    sp = r(get(sums, "gba-1024-2", "1", "ex_per_s"), get(sums, "allreduce", "1", "ex_per_s"))
    sp0 = r(get(sums, "gba-1024-2", "0", "ex_per_s"), get(sums, "allreduce", "0", "ex_per_s"))
    da = d(get(sums, "gba-1024-2", "1", "auc"), ar1)
    out.append(f"- GBA vs allreduce, straggler: speed ratio {fmt(sp, '.2f')} "
               f"(without straggler {fmt(sp0, '.2f')}); AUC gba − allreduce "
               f"{fmt(da, '+.4f')} (without straggler "
               f"{fmt(d(get(sums, 'gba-1024-2', '0', 'auc'), ar0), '+.4f')}). "
               "Paper: ≥ 2× (2.4× in GBA §1/§5.2), |ΔAUC| ≤ 0.001.")
    if only_straggler:
        for lab in ("async", "hybrid-2"):
            out.append(f"- {lab} vs allreduce, straggler: speed ratio "
                       f"{fmt(r(get(sums, lab, '1', 'ex_per_s'), get(sums, 'allreduce', '1', 'ex_per_s')), '.2f')}, "
                       f"AUC {fmt(d(get(sums, lab, '1', 'auc'), ar1), '+.4f')}.")
        return "\n".join(out)
    # 2. async loses more AUC than GBA
    for strag in ("0", "1"):
        ref = ar0 if strag == "0" else ar1
        la = d(ref, get(sums, "async", strag, "auc"))
        lg = d(ref, get(sums, "gba-1024-2", strag, "auc"))
        out.append(f"- AUC lost vs allreduce ({'straggler' if strag == '1' else 'no straggler'}): "
                   f"async {fmt(la, '+.4f')}, gba {fmt(lg, '+.4f')}. "
                   "Paper: async loses more (GBA §5.2, PERSIA Table 2).")
    # 3. k-step traffic 1/k, AUC within 0.001 up to k = 100
    b1 = get(sums, "kstep-1", "0", "sync_bytes")
    parts = []
    for k in (1, 10, 100):
        b = get(sums, f"kstep-{k}", "0", "sync_bytes")
        parts.append(f"k={k}: {fmt(None if b is None else b / 1e6, ',.1f')} MB "
                     f"(×{fmt(r(b, b1), '.4f')} of k=1), AUC {fmt(get(sums, f'kstep-{k}', '0', 'auc'), '.4f')}"
                     f" (Δ vs k=1 {fmt(d(get(sums, f'kstep-{k}', '0', 'auc'), get(sums, 'kstep-1', '0', 'auc')), '+.4f')},"
                     f" vs allreduce {fmt(d(get(sums, f'kstep-{k}', '0', 'auc'), ar0), '+.4f')})")
    out.append("- k-step, no straggler: " + "; ".join(parts) +
               ". Paper: traffic ∝ 1/k, AUC unchanged for k ≤ 100 (k-step §4, §5.3).")
    b100 = get(sums, "kstep-100", "0", "sync_bytes")
    b10 = get(sums, "kstep-10", "0", "sync_bytes")
    if b1 and b100 and b10:
        # bytes(k) = S + D / k: rows every step (S) + dense merges (D / k)
        D = (b1 - b100) / (1 - 1 / 100)
        S = b1 - D
        out.append(f"  Split bytes(k) = rows + dense/k from k = 1 and 100: rows {S / 1e6:,.1f} MB, "
                   f"dense at k = 1 {D / 1e6:,.1f} MB; predicted k = 10 {(S + D / 10) / 1e6:,.1f} MB, "
                   f"measured {b10 / 1e6:,.1f} MB; dense share at k = 1 {D / b1:.0%}.")
    # 4. ShadowSync vs fixed rate at the same throughput
    fr = [k for k in sums if k[0].startswith("shadow-fr") and k[1] == "0"]
    sh = []
    for lab in ("shadow-easgd", "shadow-ma", "shadow-bmuf"):
        sh.append(f"{lab} AUC {fmt(get(sums, lab, '0', 'auc'), '.4f')} at "
                  f"{fmt(get(sums, lab, '0', 'ex_per_s'), ',.0f')} ex/s, "
                  f"{fmt(None if get(sums, lab, '0', 'sync_bytes') is None else get(sums, lab, '0', 'sync_bytes') / 1e6, ',.1f')} MB")
    for k in fr:
        lab = k[0]
        sh.append(f"{lab} AUC {fmt(get(sums, lab, '0', 'auc'), '.4f')} at "
                  f"{fmt(get(sums, lab, '0', 'ex_per_s'), ',.0f')} ex/s, "
                  f"{fmt(None if get(sums, lab, '0', 'sync_bytes') is None else get(sums, lab, '0', 'sync_bytes') / 1e6, ',.1f')} MB")
    out.append("- ShadowSync (no straggler): " + "; ".join(sh) +
               ("" if fr else "; no fixed-rate variant ran") +
               ". Paper: shadow ≥ fixed rate at equal throughput (ShadowSync §4.1–4.2).")
    # paired (same seed) AUC differences where there are several seeds
    pairs = [("gba-1024-2", "allreduce"), ("async", "allreduce"), ("async", "gba-1024-2"),
             ("hybrid-2", "allreduce"), ("kstep-10", "kstep-1"), ("kstep-100", "kstep-1"),
             ("shadow-easgd", "shadow-fr-easgd-1"), ("shadow-easgd", "shadow-fr-easgd-5"),
             ("shadow-ma", "shadow-fr-ma-5")]
    pl = []
    for a, b in pairs:
        sa, sb = sums.get((a, "0")), sums.get((b, "0"))
        if not sa or not sb or sa["na"] or sb["na"]:
            continue
        common = sorted(set(sa["auc_list"]) & set(sb["auc_list"]))
        if len(common) < 2:
            continue
        ds = [sa["auc_list"][k] - sb["auc_list"][k] for k in common]
        pl.append(f"{a} − {b} {mean(ds):+.4f} ± {sd(ds):.4f}")
    if pl:
        out.append("- Paired by seed (no straggler), AUC difference mean ± sd: " + "; ".join(pl) + ".")
    # 5. hybrid matches allreduce within 0.001
    out.append(f"- hybrid − allreduce AUC: {fmt(d(get(sums, 'hybrid-2', '0', 'auc'), ar0), '+.4f')} "
               f"(straggler {fmt(d(get(sums, 'hybrid-2', '1', 'auc'), ar1), '+.4f')}). "
               "Paper: gap < 0.001 (PERSIA §6.2, Table 2).")
    return "\n".join(out)


def switch_table(outdir):
    path = os.path.join(outdir, "switch.tsv")
    if not os.path.exists(path):
        return None
    rows = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            rows.append(dict(zip(header, line.rstrip("\n").split("\t"))))
    by = {}
    for r in rows:
        by.setdefault((r["data"], r["label"]), []).append(r)
    lines = ["| data | phase 1 → phases 2, 3 | eval AUC after phase 1 | after phase 2 (just after the switch) "
             "| after phase 3 | logloss at the end | runs |",
             "|---|---|---|---|---|---|---|"]
    for (data, label), rs in by.items():
        ok = [r for r in rs if r["rc"] == "0" and r.get("auc1")]
        if not ok:
            lines.append(f"| {data} | {label} | not run (rc {rs[0]['rc']}, see {rs[0]['name']}.out) | | | | |")
            continue
        def col(k):
            xs = [float(r[k]) for r in ok if r.get(k) not in (None, "")]
            if not xs:
                return "—"
            s = f"{mean(xs):.4f}"
            if len(xs) > 1:
                s += f" ± {sd(xs):.4f}"
            return s
        lines.append(f"| {data} | {label.replace('>', ' → ')} | {col('auc1')} | {col('auc2')} | {col('auc3')} "
                     f"| {col('ll_last')} | {len(ok)} |")
    return "\n".join(lines)


def summary_table(runs):
    """One line per policy: both data sets, with and without straggler."""
    syn = {k: summary(v) for k, v in group(runs, "syn").items()}
    cri = {k: summary(v) for k, v in group(runs, "criteo").items()}
    lines = ["| policy | synthetic AUC | ex/s, no straggler → straggler | staleness mean / max "
             "| dropped | MB sent | Criteo dev AUC (mean ± sd over seeds) |",
             "|---|---|---|---|---|---|---|"]
    for (label, strag), s0 in syn.items():
        if strag != "0":
            continue
        s1 = syn.get((label, "1"))
        c0 = cri.get((label, "0"))
        if s0["na"] or not s0["n"]:
            lines.append(f"| {label} | not run: {(s0['why'] or '')[:80]} | | | | | |")
            continue
        sp = f"{s0['ex_per_s'] / 1e3:,.0f}k"
        if s1 and s1["n"] and s1["ex_per_s"]:
            sp += f" → {s1['ex_per_s'] / 1e3:,.0f}k ({s1['ex_per_s'] / s0['ex_per_s']:.2f}×)"
        ca = "—"
        if c0 and c0["n"]:
            ca = f"{c0['auc']:.4f} ± {c0['auc_sd'] or 0:.4f}"
        lines.append(f"| {label} | {s0['auc']:.4f} | {sp} | {fmt(s0['sync_staleness_mean'], '.2f')} / "
                     f"{fmt(s0['sync_staleness_max'], '.0f')} | {fmt(s0['sync_dropped'], '.0f')} "
                     f"| {fmt(None if s0['sync_bytes'] is None else s0['sync_bytes'] / 1e6, ',.0f')} | {ca} |")
    return "\n".join(lines)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--summary":
        runs = []
        for d in sys.argv[2:]:
            runs += load(d)
        print(summary_table(runs))
        return 0
    if len(sys.argv) < 2:
        sys.stderr.write("usage: table.py OUT_DIR [MORE_OUT_DIRS: repetitions]\n")
        return 2
    outdir = sys.argv[1]
    runs = []
    for d in sys.argv[1:]:
        runs += load(d)
    for data, title in (("syn", "Synthetic data, 4 workers × 256"),
                        ("syn2", "Synthetic data, 2 workers × 512 (straggler: worker 1 × 3)"),
                        ("criteo", "Criteo sample (train.csv → dev.csv), 4 workers × 256")):
        t, sums = table(runs, data)
        if t is None:
            continue
        print(f"\n### {title}\n")
        print(t)
        print(f"\n#### Expectations from the papers ({data})\n")
        print(claims(sums, data, only_straggler=(data == "syn2")))
    st = switch_table(outdir)
    if st:
        print("\n### Switch experiment\n")
        print(st)
    return 0


if __name__ == "__main__":
    sys.exit(main())
