#!/usr/bin/env python3
"""Prints the scoreboard's table from the UVMPOOL_SCORE lines the benchmarks printed (one JSON object
per line, see tests/gpu/scoreboard_common.py), sorted by row, as Markdown.

  python3 scripts/scoreboard_table.py SCORES.jsonl [--header TEXT]

A row whose met is false is marked "no"; one without a ratio shows "-" and why in its text.
"""
import json, sys


def ratio_text(s):
    r = s.get("ratio")
    if r is None:
        return "-"
    text = f"{r:.3g}" if r < 100 else f"{r:.0f}"
    return f"**{text}** ({s.get('ratio_is', '')})"


def cell(text):
    return str(text).replace("|", "/").replace("\n", " ")


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    scores = []
    with open(argv[0]) as f:
        for line in f:
            line = line.strip()
            if line:
                scores.append(json.loads(line))
    if "--header" in argv:
        print(argv[argv.index("--header") + 1])
        print()
    scores.sort(key=lambda s: s["row"])
    print("| # | what | uvmpool | baseline (same run) | ratio | target | met | ceiling |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in scores:
        met = {True: "yes", False: "**no**", None: ""}[s.get("met")]
        print("| " + " | ".join(cell(x) for x in (s["row"], s["what"], s["uvmpool"], s["baseline"], ratio_text(s),
                                                  s["target"], met, s["ceiling"])) + " |")
    missed = [s["row"] for s in scores if s.get("met") is False]
    print()
    print(f"{len(scores)} rows; targets met: {sum(1 for s in scores if s.get('met') is True)}, "
          f"missed: {len(missed)}{' (' + ', '.join(missed) + ')' if missed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
