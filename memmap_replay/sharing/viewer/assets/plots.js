// memmap-replay viewer: hand-made SVG plots (a line plot with a cursor, a histogram). No library.
"use strict";
(function (MR) {
  MR.plots = {};
  const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                  "#9c755f", "#bab0ac", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf"];
  const M = { left: 52, right: 10, top: 10, bottom: 26 };

  // a range a few ulps wide: v += step did not move v (the page hung); ticks are first + i * step, i bounded
  function ticks(low, high, count) {
    if (!isFinite(low) || !isFinite(high)) return [];
    if (!(high - low > 1e-12 * Math.max(Math.abs(low), Math.abs(high)))) return [(low + high) / 2];
    const step0 = (high - low) / count;
    const power = Math.pow(10, Math.floor(Math.log10(step0)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= step0);
    if (!(step > 0) || !isFinite(step)) return [low, high];
    const first = Math.ceil(low / step) * step, out = [];
    for (let i = 0; i <= 2 * count + 2; i++) {
      const v = first + i * step;
      if (v > high + step * 1e-9) break;
      out.push(Number(v.toPrecision(12)));
    }
    return out;
  }

  function extent(arrays) {
    let low = Infinity, high = -Infinity;
    for (const values of arrays) for (const v of values || []) {
      if (v === null || !isFinite(v)) continue;
      if (v < low) low = v;
      if (v > high) high = v;
    }
    if (low === Infinity) return [0, 1];
    if (!(high - low > 1e-12 * Math.max(Math.abs(low), Math.abs(high)))) {  // one value, or a few ulps apart
      const pad = Math.max(0.5, Math.abs(low) * 1e-6);
      return [low - pad, high + pad];
    }
    return [low, high];
  }

  function frame(width, height, xs, ys, label) {
    const svg = MR.svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", role: "img", "aria-label": label });
    const sx = (x) => M.left + (x - xs[0]) / (xs[1] - xs[0] || 1) * (width - M.left - M.right);
    const sy = (y) => height - M.bottom - (y - ys[0]) / (ys[1] - ys[0] || 1) * (height - M.top - M.bottom);
    const axes = MR.svg("g", { class: "axes" });
    for (const y of ticks(ys[0], ys[1], 4)) {
      axes.append(MR.svg("line", { x1: M.left, x2: width - M.right, y1: sy(y), y2: sy(y), class: "grid" }));
      axes.append(MR.svg("text", { x: M.left - 4, y: sy(y) + 3, "text-anchor": "end", text: MR.number(y) }));
    }
    for (const x of ticks(xs[0], xs[1], 6)) {
      axes.append(MR.svg("text", { x: sx(x), y: height - 8, "text-anchor": "middle", text: MR.number(x) }));
    }
    svg.append(axes);
    return { svg, sx, sy };
  }

  function pathOf(xs, values, sx, sy) {
    let d = "", pen = false;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v === null || !isFinite(v)) { pen = false; continue; }
      d += (pen ? "L" : "M") + sx(xs[i]).toFixed(1) + " " + sy(v).toFixed(1);
      pen = true;
    }
    return d;
  }

  // series: [{values, label}], x: the x of each value (default 0, 1, ...); band: {min, max} (binned curves);
  // onseek(x): a click on the plot (x rounded to a whole step); returns {svg, setCursor(x)}
  MR.plots.line = function (opts) {
    const width = opts.width || 640, height = opts.height || 180;
    const n = Math.max(...opts.series.map((s) => s.values.length), 1);
    const x = opts.x || Array.from({ length: n }, (_, i) => i);
    const xs = [x[0] ?? 0, x[x.length - 1] ?? 1];
    const band = opts.band;
    const ys = extent(opts.series.map((s) => s.values).concat(band ? [band.min, band.max] : []));
    const { svg, sx, sy } = frame(width, height, xs, ys, opts.label || "plot");
    if (band) {
      const upper = pathOf(x, band.max, sx, sy);
      const lower = [];
      for (let i = band.min.length - 1; i >= 0; i--) {
        if (band.min[i] !== null) lower.push(sx(x[i]).toFixed(1) + " " + sy(band.min[i]).toFixed(1));
      }
      if (upper && lower.length) svg.append(MR.svg("path", { d: upper + "L" + lower.join("L") + "Z", class: "band" }));
    }
    opts.series.forEach((s, i) => {
      svg.append(MR.svg("path", { d: pathOf(x, s.values, sx, sy), class: "line", stroke: COLORS[i % COLORS.length],
                                  "data-series": s.label || String(i) }));
    });
    const cursor = MR.svg("line", { class: "cursor", y1: M.top, y2: height - M.bottom, x1: -10, x2: -10 });
    if (opts.cursor) svg.append(cursor);
    if (opts.onseek) {
      svg.classList.add("seekable");
      svg.addEventListener("click", (event) => {
        const point = svg.createSVGPoint();
        point.x = event.clientX; point.y = event.clientY;
        const local = point.matrixTransform(svg.getScreenCTM().inverse());
        const value = xs[0] + (local.x - M.left) / (width - M.left - M.right) * (xs[1] - xs[0]);
        opts.onseek(Math.max(xs[0], Math.min(xs[1], Math.round(value))));
      });
    }
    const legend = opts.series.length > 1 ? MR.el("div", { class: "legend" }, ...opts.series.map((s, i) =>
      MR.el("span", {}, MR.el("i", { class: "swatch", "data-color": COLORS[i % COLORS.length] }), s.label))) : null;
    if (legend) legend.querySelectorAll(".swatch").forEach((node) => { node.style.background = node.dataset.color; });
    return {
      svg, legend,
      setCursor(value) {
        const at = sx(value).toFixed(1);
        cursor.setAttribute("x1", at); cursor.setAttribute("x2", at);
        cursor.setAttribute("data-step", String(value));
      },
    };
  };

  MR.plots.histogram = function (opts) {
    const width = opts.width || 320, height = opts.height || 160;
    const edges = opts.edges, counts = opts.counts;
    if (!edges.length) return { svg: MR.el("p", { class: "muted", text: "no values" }) };
    const xs = [edges[0], edges[edges.length - 1]];
    const ys = [0, Math.max(1, ...counts)];
    const { svg, sx, sy } = frame(width, height, xs, ys, opts.label);
    counts.forEach((count, i) => {
      const left = sx(edges[i]), right = sx(edges[i + 1]);
      svg.append(MR.svg("rect", { x: left + 0.5, y: sy(count), width: Math.max(0.5, right - left - 1),
                                  height: Math.max(0, sy(0) - sy(count)), class: "bar" },
                        MR.svg("title", { text: `${MR.number(edges[i])} to ${MR.number(edges[i + 1])}: ${count}` })));
    });
    return { svg };
  };
})(window.MR);
