"""Draws losses.csv (step,shardlight,pytorch) from lm_parity.sh as an SVG
line chart: python3 loss_svg.py losses.csv out.svg [title]."""
import csv
import sys


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    title = sys.argv[3] if len(sys.argv) > 3 else "LM training loss"
    steps = [int(r["step"]) for r in rows]
    series = {"shardlight": [float(r["shardlight"]) for r in rows], "PyTorch DTensor": [float(r["pytorch"]) for r in rows]}
    w, h, left, right, top, bottom = 640, 360, 60, 20, 40, 45
    lo = min(min(v) for v in series.values())
    hi = max(max(v) for v in series.values())
    x = lambda s: left + (s - steps[0]) / max(1, steps[-1] - steps[0]) * (w - left - right)
    y = lambda v: top + (hi - v) / max(1e-9, hi - lo) * (h - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">step</text>',
           f'<text x="15" y="{h / 2}" text-anchor="middle" transform="rotate(-90 15 {h / 2})">loss (nats/token)</text>']
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        out.append(f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{w - right}" y2="{y(v):.1f}" stroke="#ddd"/>')
    for s in (steps[0], steps[len(steps) // 2], steps[-1]):
        out.append(f'<text x="{x(s):.1f}" y="{h - bottom + 15}" text-anchor="middle">{s}</text>')
    styles = {"shardlight": ("#1f77b4", "0"), "PyTorch DTensor": ("#d62728", "6,4")}
    for k, (name, values) in enumerate(series.items()):
        color, dash = styles[name]
        pts = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(steps, values))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}" points="{pts}"/>')
        out.append(f'<line x1="{w - 200}" y1="{top + 10 + 18 * k}" x2="{w - 170}" y2="{top + 10 + 18 * k}" '
                   f'stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{w - 165}" y="{top + 14 + 18 * k}">{name}</text>')
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
