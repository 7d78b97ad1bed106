// redline report: zoom the x axis of line charts and toggle their series. The page
// reads fine without this (the charts are drawn when the report is built, values show
// on hover); it only moves what is already there. Allowed by its hash in the CSP.
"use strict";
(() => {
  const NS = "http://www.w3.org/2000/svg";
  const charts = [...document.querySelectorAll("svg.lines")];
  // Original pixel coordinates of what a zoom moves, kept on first use.
  const original = new WeakMap();

  const ticks = (lo, hi) => {
    const raw = Math.max(hi - lo, 1e-12) / 5;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || mag * 10;
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(t);
    return out;
  };
  const label = (v) => String(parseFloat(v.toPrecision(3)));

  // Pixel x under the original domain -> pixel x under [d0, d1].
  const mapper = (svg, d0, d1) => {
    const [x0, x1, l, r] = ["x0", "x1", "left", "right"].map((k) => +svg.dataset[k]);
    return (px) => l + ((((px - l) / (r - l)) * (x1 - x0) + x0 - d0) / (d1 - d0)) * (r - l);
  };

  const zoom = (svg, d0, d1) => {
    const move = mapper(svg, d0, d1);
    for (const el of svg.querySelectorAll("svg.plot *")) {
      const tag = el.tagName;
      const attrs = { polyline: ["points"], circle: ["cx"], line: ["x1", "x2"], rect: ["x", "width"] }[tag];
      if (!attrs) continue;
      if (!original.has(el)) original.set(el, attrs.map((a) => el.getAttribute(a)));
      const was = original.get(el);
      if (tag === "polyline") {
        const pts = was[0].split(" ").map((p) => p.split(",").map(Number));
        el.setAttribute("points", pts.map(([x, y]) => `${move(x).toFixed(1)},${y}`).join(" "));
      } else if (tag === "rect") {
        const x = +was[0], w = +was[1];
        el.setAttribute("x", move(x).toFixed(1));
        el.setAttribute("width", Math.max(1, move(x + w) - move(x)).toFixed(1));
      } else {
        attrs.forEach((a, i) => el.setAttribute(a, move(+was[i]).toFixed(1)));
      }
    }
    svg.querySelectorAll(".xtick").forEach((t) => t.remove());
    const [l, r] = [+svg.dataset.left, +svg.dataset.right];
    const bottom = +svg.viewBox.baseVal.height - 34;
    for (const t of ticks(d0, d1)) {
      const x = (l + ((t - d0) / (d1 - d0)) * (r - l)).toFixed(1);
      const line = document.createElementNS(NS, "line");
      Object.entries({ x1: x, x2: x, y1: bottom, y2: bottom + 4, class: "axis xtick" }).forEach(([k, v]) => line.setAttribute(k, v));
      const text = document.createElementNS(NS, "text");
      Object.entries({ x, y: bottom + 16, class: "tick xtick", "text-anchor": "middle" }).forEach(([k, v]) => text.setAttribute(k, v));
      text.textContent = label(t);
      svg.append(line, text);
    }
    svg.dataset.zoomed = d0 === +svg.dataset.x0 && d1 === +svg.dataset.x1 ? "" : "yes";
  };

  // Charts of one section over the same axis zoom together.
  const siblings = (svg) =>
    charts.filter((c) => c.closest("section") === svg.closest("section") && c.dataset.axis === svg.dataset.axis);

  const toData = (svg, event) => {
    const point = new DOMPoint(event.clientX, event.clientY).matrixTransform(svg.getScreenCTM().inverse());
    const [l, r] = [+svg.dataset.left, +svg.dataset.right];
    const d = svg.dataset.domain ? svg.dataset.domain.split(",").map(Number) : [+svg.dataset.x0, +svg.dataset.x1];
    const share = Math.min(1, Math.max(0, (point.x - l) / (r - l)));
    return { px: point.x, value: d[0] + share * (d[1] - d[0]) };
  };

  for (const svg of charts) {
    let start = null;
    const band = document.createElementNS(NS, "rect");
    band.setAttribute("class", "zoom-band");
    svg.addEventListener("mousedown", (e) => {
      if (e.target.closest(".key-item")) return;
      start = toData(svg, e);
      Object.entries({ x: start.px, y: 14, width: 0, height: +svg.viewBox.baseVal.height - 48 }).forEach(([k, v]) => band.setAttribute(k, v));
      svg.append(band);
      e.preventDefault();
    });
    svg.addEventListener("mousemove", (e) => {
      if (!start) return;
      const now = toData(svg, e);
      band.setAttribute("x", Math.min(start.px, now.px));
      band.setAttribute("width", Math.abs(now.px - start.px));
    });
    svg.addEventListener("mouseup", (e) => {
      if (!start) return;
      const end = toData(svg, e);
      band.remove();
      const [d0, d1] = [Math.min(start.value, end.value), Math.max(start.value, end.value)];
      const dragged = Math.abs(end.px - start.px) >= 4;
      start = null;
      if (dragged && d1 > d0) {
        for (const c of siblings(svg)) {
          c.dataset.domain = `${d0},${d1}`;
          zoom(c, d0, d1);
        }
      }
    });
    svg.addEventListener("mouseleave", () => {
      start = null;
      band.remove();
    });
    svg.addEventListener("dblclick", () => {
      for (const c of siblings(svg)) {
        delete c.dataset.domain;
        zoom(c, +c.dataset.x0, +c.dataset.x1);
      }
    });
    for (const item of svg.querySelectorAll(".key-item")) {
      item.addEventListener("click", () => {
        const hidden = item.classList.toggle("off");
        svg.querySelectorAll(`.series[data-series="${item.dataset.series}"]`).forEach((g) => g.classList.toggle("hidden", hidden));
      });
    }
  }
})();
