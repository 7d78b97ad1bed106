"""Reads what redline, GuideLLM and AIPerf wrote for one run of bench/llm-vs-peers.sh,
next to the simulator's ground truth, and prints the comparison.

  peer_results.py line TOOL RATE OUTDIR same|max   -> one JSON line
  peer_results.py table RESULTS.jsonl              -> the tables and ratios
"""

import json
import sys
from pathlib import Path


def tool_figures(tool, out):
    """What the tool says of itself: successes, failures, median TTFT, mean ITL (ms)."""
    if tool == "redline":
        s = json.loads((out / "summary.json").read_text())
        lat = s["latency_ms"]
        return {
            "ok": s["measured"]["ok"],
            "failed": s["measured"]["error"] + s["measured"]["timeout"],
            "ttft_p50": lat["ttft"]["p50"],
            "itl_mean": lat["itl"]["mean"],
        }
    if tool == "guidellm":
        m = json.loads((out / "guidellm.json").read_text())["benchmarks"][0]["metrics"]
        totals = m["request_totals"]
        return {
            "ok": totals["successful"],
            "failed": totals["errored"] + totals["incomplete"],
            "ttft_p50": m["time_to_first_token_ms"]["successful"]["median"],
            "itl_mean": m["inter_token_latency_ms"]["successful"]["mean"],
        }
    d = json.loads((out / "profile_export_aiperf.json").read_text())
    failed = sum(e.get("count", 0) for e in d.get("error_summary") or [])
    return {
        "ok": int(d["request_count"]["avg"]) - failed,
        "failed": failed,
        "ttft_p50": d["time_to_first_token"]["p50"],
        "itl_mean": d["inter_token_latency"]["avg"],
    }


def line(tool, rate, out, part):
    out = Path(out)
    result = {"part": part, "tool": tool, "rate": float(rate)}
    wall, user, system, rss_kib = (out / "time").read_text().split()[-4:]
    result.update(
        wall_s=float(wall),
        cpu_s=float(user) + float(system),
        rss_mib=int(rss_kib) / 1024,
    )
    truth = json.loads((out / "truth.json").read_text())
    result.update(
        truth_requests=truth["requests"],
        arrival_rate=truth["arrival_rate_per_s"] or 0.0,
        truth_ttft_p50=truth["ttft_ms"]["p50"],
        truth_itl_mean=truth["inter_token_ms"]["mean"],
        prompt_tokens=truth["prompt_tokens"] / max(truth["requests"], 1),
    )
    try:
        result.update(tool_figures(tool, out))
    except (OSError, KeyError, ValueError, IndexError) as e:
        result["error"] = f"no results: {e}"
    print(json.dumps(result))


def held(r):
    return (
        "error" not in r
        and r["arrival_rate"] >= 0.95 * r["rate"]
        and r["ok"] >= 0.99 * r["truth_requests"]
    )


def table(path):
    rows = [json.loads(l) for l in Path(path).read_text().splitlines() if l.strip()]
    same = [r for r in rows if r["part"] == "same"]
    print()
    print("part 1: the same load (ms; Δ = tool − simulator ground truth)")
    head = f"{'tool':<10}{'arrived/s':>10}{'ok':>6}{'fail':>6}{'CPU s':>8}{'CPU %':>7}{'RSS MiB':>9}{'prompt':>8}{'TTFT p50':>10}{'Δ':>8}{'ITL mean':>10}{'Δ':>8}"
    print(head)
    for r in same:
        if "error" in r:
            print(f"{r['tool']:<10}{r['error']}")
            continue
        print(
            f"{r['tool']:<10}{r['arrival_rate']:>10.2f}{r['ok']:>6}{r['failed']:>6}"
            f"{r['cpu_s']:>8.1f}{100 * r['cpu_s'] / r['wall_s']:>7.0f}{r['rss_mib']:>9.0f}"
            f"{r['prompt_tokens']:>8.0f}"
            f"{r['ttft_p50']:>10.2f}{r['ttft_p50'] - r['truth_ttft_p50']:>+8.2f}"
            f"{r['itl_mean']:>10.2f}{r['itl_mean'] - r['truth_itl_mean']:>+8.2f}"
        )
    base = next((r for r in same if r["tool"] == "redline" and "error" not in r), None)
    if base:
        for r in same:
            if r is base or "error" in r:
                continue
            print(
                f"  {r['tool']} / redline: CPU {r['cpu_s'] / base['cpu_s']:.1f}×, "
                f"RSS {r['rss_mib'] / base['rss_mib']:.1f}×, "
                f"|ΔTTFT| {abs(r['ttft_p50'] - r['truth_ttft_p50']):.2f} vs "
                f"{abs(base['ttft_p50'] - base['truth_ttft_p50']):.2f} ms"
            )
    print()
    print("part 2: the highest rate held (server saw ≥ 95 % of it arrive, ≥ 99 % ok)")
    print(f"{'tool':<10}{'offered':>9}{'arrived/s':>11}{'ok':>7}{'CPU %':>7}{'RSS MiB':>9}  held")
    best = {}
    for r in (r for r in rows if r["part"] == "max"):
        if "error" in r:
            print(f"{r['tool']:<10}{r['rate']:>9.0f}  {r['error']}")
            continue
        ok = held(r)
        if ok:
            best[r["tool"]] = max(best.get(r["tool"], 0.0), r["rate"])
        print(
            f"{r['tool']:<10}{r['rate']:>9.0f}{r['arrival_rate']:>11.1f}{r['ok']:>7}"
            f"{100 * r['cpu_s'] / r['wall_s']:>7.0f}{r['rss_mib']:>9.0f}  {'yes' if ok else 'no'}"
        )
    for tool in ("redline", "guidellm", "aiperf"):
        print(f"  {tool}: highest rate held {best.get(tool, 0):.0f} req/s")
    if best.get("redline"):
        for tool in ("guidellm", "aiperf"):
            if best.get(tool):
                print(f"  redline / {tool}: {best['redline'] / best[tool]:.1f}×")


if __name__ == "__main__":
    if sys.argv[1] == "line":
        line(*sys.argv[2:6])
    else:
        table(sys.argv[2])
