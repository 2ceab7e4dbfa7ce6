/* The report's charts: each <figure class="chart"> of the page drawn as SVG from its spec
   (the JSON of #fastcoord-charts, written by fastcoord/pipeline/html.py), with a tooltip
   on hover, drag-to-zoom, and a legend whose entries hide and show their series.

   Plain ES2017 with no library and no build step: the page opens offline, from a file,
   and should still open years from now. Every chart whose x is "time" shows one x range,
   the run's: zooming one zooms them all, so that a spike of latency lines up with the
   rebalances and the errors of the same seconds.

   A chart's figure tells tests (and the curious) what was drawn: data-state (drawn, empty,
   error), data-drawn (the data points in view), data-x-range ("from,to" of the view) and
   data-plot ("left,top,width,height" of the plot area, in the SVG's units: its viewBox is
   the figure's width in CSS pixels by 300). */
(function () {
  "use strict";

  const HEIGHT = 300;
  const CHAR_W = 6.3; // an 11px label's mean character width: labels are laid out unmeasured
  const BAND_ROW = 14; // the height of a row of band labels above the plot
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#79706e"];
  // Steps of a time axis, in seconds, that a reader counts in: minutes, quarters of hours.
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
    21600, 43200, 86400];
  const SUFFIXES = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];

  const charts = [];
  const time = { full: null, view: null }; // the x range that all "time" charts share
  let dragging = null; // {chart, x0, x1} while a zoom range is dragged

  function report(message) {
    if (typeof window.fastcoordError === "function") window.fastcoordError(message);
    else console.error(message);
  }

  function esc(text) {
    const map = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
    return String(text).replace(/[&<>"']/g, (c) => map[c]);
  }

  const isNum = (v) => typeof v === "number" && isFinite(v);
  const px = (v) => Math.round(v * 10) / 10; // SVG coordinates to 0.1 px: shorter paths
  const pow10 = (e) => parseFloat("1e" + e); // exact, unlike Math.pow(10, -1)

  /* Numbers */

  function decimals(step) {
    for (let d = 0; d < 10; d++) {
      const scaled = step * Math.pow(10, d);
      if (Math.abs(scaled - Math.round(scaled)) < 1e-6 * Math.max(1, scaled)) return d;
    }
    return 10;
  }

  function trimZeros(text) {
    return text.indexOf(".") < 0 ? text : text.replace(/\.?0+$/, "");
  }

  // A tick's label, as precise as its axis' step needs: 0.25, 40, 1.5k, 2.5M.
  function tickText(v, step) {
    const a = Math.abs(v);
    if (a < 1e-9 * step) return "0";
    for (const [factor, suffix] of SUFFIXES) {
      if (a >= factor) {
        return trimZeros((v / factor).toFixed(Math.min(3, decimals(step / factor)))) + suffix;
      }
    }
    return trimZeros(v.toFixed(decimals(step)));
  }

  // Seconds of a run stay plain numbers (3,600 rather than 3.6k): the axis says seconds.
  function timeTickText(v, step) {
    return v.toLocaleString("en-US", { maximumFractionDigits: decimals(step) });
  }

  // A value in a tooltip: four significant digits, thousands separated.
  function valueText(v) {
    if (!isNum(v)) return "–";
    const a = Math.abs(v);
    if (a >= 1e6) {
      for (const [factor, suffix] of SUFFIXES) {
        if (a >= factor) return trimZeros((v / factor).toFixed(2)) + suffix;
      }
    }
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    if (a >= 1000) return v.toLocaleString("en-US", { maximumFractionDigits: 1 });
    return String(Number(v.toPrecision(4)));
  }

  /* Scales and ticks */

  function scale(log, d0, d1, r0, r1) {
    if (log) {
      const a = Math.log10(d0), k = (r1 - r0) / (Math.log10(d1) - a || 1);
      return {
        map: (v) => (v > 0 ? r0 + (Math.log10(v) - a) * k : NaN),
        invert: (p) => Math.pow(10, a + (p - r0) / k),
      };
    }
    const k = (r1 - r0) / (d1 - d0 || 1);
    return { map: (v) => r0 + (v - d0) * k, invert: (p) => d0 + (p - r0) / k };
  }

  function niceStep(span, count, steps) {
    const raw = span / Math.max(1, count);
    if (steps && raw >= 1) {
      for (const s of steps) if (s >= raw) return s;
    }
    const e = pow10(Math.floor(Math.log10(raw)));
    const m = raw / e;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * e;
  }

  function linearTicks(lo, hi, count, steps) {
    const step = niceStep(hi - lo, count, steps);
    const values = [];
    for (let i = Math.ceil(lo / step - 1e-9); i * step <= hi + step * 1e-9; i++) {
      values.push(parseFloat((i * step).toPrecision(12)));
    }
    return { values, step, minor: [] };
  }

  function logTicks(lo, hi, count) {
    const a = Math.floor(Math.log10(lo) + 1e-9), b = Math.ceil(Math.log10(hi) - 1e-9);
    const every = Math.max(1, Math.ceil((b - a) / Math.max(1, count)));
    const inside = (v) => v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9);
    const values = [], minor = [];
    for (let e = a; e <= b; e++) {
      const v = pow10(e);
      if (inside(v) && (e - a) % every === 0) values.push(v);
      for (let m = 2; m <= 9; m++) {
        const w = parseFloat(m + "e" + e);
        if (!inside(w)) continue;
        if (b - a <= 2 && (m === 2 || m === 5)) values.push(w);
        else if (b - a <= 6) minor.push(w);
      }
    }
    values.sort((x, y) => x - y);
    if (values.length < 2) return linearTicks(lo, hi, count); // zoomed inside a decade
    return { values, step: null, minor };
  }

  /* Data */

  // The first index whose x >= v (xs ascending).
  function lowerBound(xs, v) {
    let lo = 0, hi = xs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] < v) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  // The indices [a, b) of the points in view; `margin` points more on each side, so that a
  // line runs on to the plot's edges.
  function inView(xs, view, margin) {
    const a = lowerBound(xs, view[0]);
    let b = lowerBound(xs, view[1]);
    while (b < xs.length && xs[b] <= view[1]) b++;
    return [Math.max(0, a - margin), Math.min(xs.length, b + margin)];
  }

  function nearest(xs, v) {
    if (!xs.length) return -1;
    const j = lowerBound(xs, v);
    if (j === 0) return 0;
    if (j === xs.length) return j - 1;
    return v - xs[j - 1] <= xs[j] - v ? j - 1 : j;
  }

  function prepare(spec, figure) {
    const kind = spec.x.kind;
    const y = spec.y || {};
    const chart = {
      spec, figure, kind,
      type: spec.type,
      stacked: !!spec.stacked && (spec.type === "area" || spec.type === "bars"),
      ylog: !!y.log,
      plot: figure.querySelector(".chart-plot"),
      reset: figure.querySelector(".chart-reset"),
      legend: figure.querySelector(".chart-legend"),
      hidden: new Set(),
      view: null, full: null, geo: null, stacks: null,
      categories: [],
    };
    const categories = new Map();
    chart.series = (spec.series || []).map((s, i) => {
      const name = s.name == null ? "series " + (i + 1) : String(s.name);
      if (!Array.isArray(s.x) || !Array.isArray(s.y)) {
        throw new Error(`series "${name}": x and y must be lists`);
      }
      if (s.x.length !== s.y.length) {
        throw new Error(`series "${name}": ${s.x.length} x values but ${s.y.length} y values`);
      }
      const points = [];
      for (let j = 0; j < s.x.length; j++) {
        let x = s.x[j];
        if (kind === "category") {
          const key = String(x);
          if (!categories.has(key)) categories.set(key, categories.size);
          x = categories.get(key);
        } else if (!isNum(x) || (kind === "log" && x <= 0)) {
          continue; // no place on this axis
        }
        const v = s.y[j];
        points.push([x, isNum(v) && !(chart.ylog && v <= 0) ? v : NaN]);
      }
      points.sort((p, q) => p[0] - q[0]);
      const xs = Float64Array.from(points, (p) => p[0]);
      const ys = Float64Array.from(points, (p) => p[1]);
      const count = ys.reduce((n, v) => n + (v === v ? 1 : 0), 0);
      return { index: i, name, color: s.color || PALETTE[i % PALETTE.length], xs, ys, count };
    });
    chart.categories = Array.from(categories.keys());
    chart.bands = kind === "category" ? [] : (spec.bands || []).filter(
      (b) => isNum(b.from) && isNum(b.to) && b.to > b.from && (kind !== "log" || b.to > 0)
    ).map((b) => ({ from: b.from, to: b.to, label: b.label == null ? "" : String(b.label),
      kind: b.kind === "fault" ? "fault" : "phase" }));
    chart.hasData = chart.series.some((s) => s.count > 0);
    chart.full = chart.hasData ? extent(chart) : null;
    return chart;
  }

  // The x range of all the data and bands; bars get half a bar's room on each side.
  function extent(chart) {
    if (chart.kind === "category") return [-0.5, chart.categories.length - 0.5];
    const log = chart.kind === "log";
    let lo = Infinity, hi = -Infinity;
    for (const s of chart.series) {
      if (!s.xs.length) continue;
      lo = Math.min(lo, s.xs[0]);
      hi = Math.max(hi, s.xs[s.xs.length - 1]);
    }
    for (const b of chart.bands) {
      lo = Math.min(lo, log ? Math.max(b.from, b.to / 10) : b.from);
      hi = Math.max(hi, b.to);
    }
    if (chart.type === "bars" && chart.kind === "time") {
      hi += minGap(chart.series, false); // a bar is a window, drawn from its start
    } else if (chart.type === "bars") {
      const gap = minGap(chart.series, log);
      if (log) {
        lo /= Math.sqrt(gap);
        hi *= Math.sqrt(gap);
      } else {
        lo -= gap / 2;
        hi += gap / 2;
      }
    }
    if (lo === hi) return log ? [lo / 10, hi * 10] : [lo - 1, hi + 1];
    return [lo, hi];
  }

  // The smallest distance (a ratio on a log axis) between two neighbouring x values.
  function minGap(series, log) {
    const xs = Array.from(new Set(series.flatMap((s) => Array.from(s.xs)))).sort((a, b) => a - b);
    let gap = Infinity;
    for (let j = 1; j < xs.length; j++) {
      gap = Math.min(gap, log ? xs[j] / xs[j - 1] : xs[j] - xs[j - 1]);
    }
    return isFinite(gap) ? gap : log ? 10 : 1;
  }

  // Stacked series: each a base and a top over the union of the x values; a null counts 0.
  function stack(visible) {
    const keys = Array.from(new Set(visible.flatMap((s) => Array.from(s.xs))))
      .sort((a, b) => a - b);
    const at = new Map(keys.map((k, j) => [k, j]));
    const xs = Float64Array.from(keys);
    let base = new Float64Array(keys.length);
    return visible.map((s) => {
      const top = Float64Array.from(base);
      for (let j = 0; j < s.xs.length; j++) {
        if (s.ys[j] === s.ys[j]) top[at.get(s.xs[j])] += s.ys[j];
      }
      const layer = { series: s, xs, base, top };
      base = top;
      return layer;
    });
  }

  function currentView(chart) {
    return chart.kind === "time" ? time.view || time.full : chart.view || chart.full;
  }

  function yDomain(chart, visible, view, count) {
    let lo = Infinity, hi = -Infinity;
    const scan = (xs, ys) => {
      const [a, b] = inView(xs, view, 0);
      for (let j = a; j < b; j++) {
        const v = ys[j];
        if (v === v && !(chart.ylog && v <= 0)) {
          if (v < lo) lo = v;
          if (v > hi) hi = v;
        }
      }
    };
    if (chart.stacks) {
      for (const layer of chart.stacks) {
        scan(layer.xs, layer.top);
        scan(layer.xs, layer.base);
      }
    } else {
      for (const s of visible) scan(s.xs, s.ys);
    }
    const y = chart.spec.y || {};
    if (chart.ylog) {
      if (!isFinite(lo)) [lo, hi] = [1, 10];
      lo = isNum(y.min) && y.min > 0 ? y.min : pow10(Math.floor(Math.log10(lo) + 1e-9));
      hi = isNum(y.max) && y.max > lo ? y.max : pow10(Math.ceil(Math.log10(hi) - 1e-9));
      if (hi <= lo) hi = lo * 10;
      return { lo, hi, ticks: logTicks(lo, hi, count) };
    }
    if (!isFinite(lo)) [lo, hi] = [0, 1];
    // Bars and areas stand on zero; a line starts there when its data is not far from it.
    if (chart.type === "bars" || chart.type === "area" || (lo > 0 && lo < hi * 0.4)) {
      lo = Math.min(lo, 0);
      hi = Math.max(hi, 0);
    }
    if (isNum(y.min)) lo = y.min;
    if (isNum(y.max)) hi = y.max;
    if (hi <= lo) {
      const pad = Math.abs(hi) * 0.1 || 1;
      [lo, hi] = [lo - pad, hi + pad];
    }
    // Out to the next ticks, unless that wastes much of the plot: -1 to 40 is not -10 to 40.
    const step = linearTicks(lo, hi, count).step, span = hi - lo;
    if (!isNum(y.min)) {
      const snapped = Math.floor(lo / step + 1e-9) * step;
      lo = lo - snapped > 0.15 * span ? lo - 0.03 * span : snapped;
    }
    if (!isNum(y.max)) {
      const snapped = Math.ceil(hi / step - 1e-9) * step;
      hi = snapped - hi > 0.15 * span ? hi + 0.03 * span : snapped;
    }
    const ticks = linearTicks(lo, hi, count);
    return { lo, hi, ticks };
  }

  /* Drawing */

  // Points [a, b) of a series as runs of pixels, split at gaps. Where many points fall in
  // one pixel column, only the column's first, lowest, highest and last stay: the line
  // looks the same, spikes included, with a few points per pixel rather than thousands.
  function pixels(xs, ys, a, b, sx, sy) {
    const runs = [];
    let run = null, column = NaN, members = [];
    const flush = () => {
      if (!members.length) return;
      let low = members[0], high = members[0];
      for (const m of members) {
        if (m[1] > low[1]) low = m; // SVG's y grows downwards
        if (m[1] < high[1]) high = m;
      }
      const keep = [members[0], low, high, members[members.length - 1]];
      keep.sort((p, q) => p[2] - q[2]);
      let last = null;
      for (const p of keep) {
        if (p !== last) run.push(p[0], p[1]);
        last = p;
      }
      members = [];
    };
    for (let j = a; j < b; j++) {
      const x = sx(xs[j]), y = sy(ys[j]);
      if (x !== x || y !== y) {
        flush();
        run = null;
        continue;
      }
      if (!run) runs.push((run = []));
      const c = Math.floor(x);
      if (c !== column) {
        flush();
        column = c;
      }
      members.push([px(x), px(y), j]);
    }
    flush();
    return runs;
  }

  function lineD(runs, step) {
    let d = "";
    for (const run of runs) {
      d += "M" + run[0] + "," + run[1];
      for (let k = 2; k < run.length; k += 2) {
        d += step ? "H" + run[k] + "V" + run[k + 1] : "L" + run[k] + "," + run[k + 1];
      }
    }
    return d;
  }

  function countInView(s, view) {
    const [a, b] = inView(s.xs, view, 0);
    let n = 0;
    for (let j = a; j < b; j++) if (s.ys[j] === s.ys[j]) n++;
    return n;
  }

  function seriesPath(chart, s, k, nVisible, g, view) {
    const attrs = `class="series" data-series="${s.index}" stroke="${s.color}"`;
    const bottom = g.top + g.h; // where bars and areas stand: 0, or the bottom of a log axis
    const baseY = (v) =>
      Math.min(bottom, Math.max(g.top, v > 0 || !chart.ylog ? g.sy.map(v) : bottom));
    if (chart.type === "bars") {
      const layer = chart.stacks && chart.stacks[k];
      const xs = layer ? layer.xs : s.xs, tops = layer ? layer.top : s.ys;
      const group = g.slot * 0.8, each = chart.stacks ? group : group / nVisible;
      // A time window's bars stand in it (from its start); other bars centre on their x.
      const offset = (chart.kind === "time" ? g.slot * 0.1 : -group / 2) +
        (chart.stacks ? 0 : k * each);
      const width = Math.max(1, each - (each > 4 ? 1 : 0));
      const [a, b] = inView(xs, view, 1);
      let d = "";
      for (let j = a; j < b; j++) {
        if (tops[j] !== tops[j] || (layer && tops[j] === layer.base[j])) continue;
        const x0 = px(g.sx.map(xs[j]) + offset), y0 = px(baseY(layer ? layer.base[j] : 0));
        const y1 = px(baseY(tops[j]));
        if (x0 === x0) d += `M${x0},${y0}V${y1}h${px(width)}V${y0}Z`;
      }
      return `<path ${attrs} d="${d}" fill="${s.color}" fill-opacity="0.85" stroke-width="0"/>`;
    }
    const sy = (v) => (chart.ylog && v <= 0 ? NaN : g.sy.map(v));
    if (chart.type === "area") {
      let d = "";
      if (chart.stacks) {
        const layer = chart.stacks[k], [a, b] = inView(layer.xs, view, 1);
        const top = pixels(layer.xs, layer.top, a, b, g.sx.map, baseY)[0] || [];
        const base = pixels(layer.xs, layer.base, a, b, g.sx.map, baseY)[0] || [];
        if (top.length) {
          d = lineD([top], false);
          for (let m = base.length - 2; m >= 0; m -= 2) d += "L" + base[m] + "," + base[m + 1];
          d += "Z";
        }
      } else {
        const [a, b] = inView(s.xs, view, 1), bottom = px(baseY(0));
        for (const run of pixels(s.xs, s.ys, a, b, g.sx.map, sy)) {
          d += lineD([run], false) + `L${run[run.length - 2]},${bottom}L${run[0]},${bottom}Z`;
        }
      }
      const opacity = chart.stacks ? 0.6 : 0.25;
      return `<path ${attrs} d="${d}" fill="${s.color}" fill-opacity="${opacity}" ` +
        `stroke-width="1.2"/>`;
    }
    const [a, b] = inView(s.xs, view, 1);
    const d = lineD(pixels(s.xs, s.ys, a, b, g.sx.map, sy), chart.type === "step");
    return `<path ${attrs} d="${d}" fill="none" stroke-width="1.6" stroke-linejoin="round"/>`;
  }

  // Bands shade their x range in the plot; their labels go in rows above it (phases, then
  // faults), each over a thin bar of the band's colour that spans its range. A label wider
  // than its band runs on to the right, and the next label of its row moves along.
  function bandsSvg(chart, g, view, rows) {
    const shades = [], labels = [];
    const rowTop = (fault) => g.top - BAND_ROW * (fault || rows === 1 ? 1 : 2);
    let phase = 0;
    const shown = [];
    for (const b of chart.bands) {
      const fault = b.kind === "fault";
      if (!fault) phase++;
      const from = Math.max(b.from, view[0]), to = Math.min(b.to, view[1]);
      if (to <= from) continue;
      const x0 = g.sx.map(from), x1 = g.sx.map(to);
      const tint = fault ? "rgba(207,34,46,0.75)" : phase % 2 ? "#6f93c6" : "#a9c0df";
      const fill = fault ? `url(#fc-hatch-${chart.spec.id})`
        : phase % 2 ? "rgba(84,130,196,0.12)" : "rgba(84,130,196,0.05)";
      shades.push(`<rect x="${px(x0)}" y="${g.top}" width="${px(x1 - x0)}" height="${g.h}" ` +
        `fill="${fill}"/>`);
      for (const [edge, x] of [[b.from, x0], [b.to, x1]]) {
        if (edge > view[0] && edge < view[1]) {
          shades.push(`<line x1="${px(x)}" x2="${px(x)}" y1="${g.top}" y2="${g.top + g.h}" ` +
            `stroke="${fault ? "rgba(207,34,46,0.6)" : "rgba(84,130,196,0.45)"}"` +
            `${fault ? "" : ' stroke-dasharray="3,3"'}/>`);
        }
      }
      if (b.label) {
        labels.push(`<rect x="${px(x0)}" y="${rowTop(fault) + 11}" ` +
          `width="${px(Math.max(2, x1 - x0))}" height="2.5" fill="${tint}"/>`);
        shown.push({ b, fault, x0, x1 });
      }
    }
    const end = { true: -Infinity, false: -Infinity }; // where each row's last label ends
    shown.sort((p, q) => p.x0 - q.x0);
    for (const { b, fault, x0, x1 } of shown) {
      const start = Math.max(x0 + 2, end[fault] + 10);
      const room = Math.floor((g.left + g.w - start) / CHAR_W);
      if (start > x1 + 80 || room < 3) continue; // too far from its band to be read as its
      const text = b.label.length <= room ? b.label : b.label.slice(0, room - 1) + "…";
      end[fault] = start + text.length * CHAR_W;
      labels.push(`<text class="band-label${fault ? " fault" : ""}" x="${px(start)}" ` +
        `y="${rowTop(fault) + 8}">${esc(text)}</text>`);
    }
    return { shades: shades.join(""), labels: labels.join("") };
  }

  function xTicks(chart, g, view) {
    if (chart.kind === "category") {
      const longest = Math.min(24, Math.max(1, ...chart.categories.map((c) => c.length)));
      const room = longest * CHAR_W + 10; // a label's, with some space
      const every = Math.max(1, Math.ceil((chart.categories.length * room) / g.w));
      const out = [];
      chart.categories.forEach((c, i) => {
        if (i % every) return;
        out.push({ v: i, text: c.length > 24 ? c.slice(0, 23) + "…" : c });
      });
      return { ticks: out, minor: [] };
    }
    for (let count = Math.max(2, Math.floor(g.w / 90)); ; count = Math.floor(count * 0.7)) {
      const t = chart.kind === "log" ? logTicks(view[0], view[1], count)
        : linearTicks(view[0], view[1], count, chart.kind === "time" ? TIME_STEPS : null);
      const format = chart.kind === "time" && t.step !== null ? timeTickText : tickText;
      const ticks = t.values.map((v) => ({ v, text: format(v, t.step === null ? v : t.step) }));
      const widest = Math.max(...ticks.map((t) => t.text.length)) * CHAR_W + 14;
      if (count <= 2 || widest * ticks.length <= g.w) return { ticks, minor: t.minor };
    }
  }

  function draw(chart) {
    const figure = chart.figure, spec = chart.spec;
    const W = Math.max(320, Math.round(chart.plot.clientWidth || 800));
    chart.W = W;
    chart.geo = null;
    if (!chart.hasData) {
      chart.plot.innerHTML = `<svg class="chart-svg" viewBox="0 0 ${W} ${HEIGHT}" role="img">` +
        `<rect x="1" y="1" width="${W - 2}" height="${HEIGHT - 2}" fill="#fafbfc" ` +
        `stroke="#d1d9e0" stroke-dasharray="4,4" rx="6"/>` +
        `<text class="empty" x="${W / 2}" y="${HEIGHT / 2}" ` +
        `text-anchor="middle">no data</text></svg>`;
      chart.legend.innerHTML = "";
      Object.assign(figure.dataset, { state: "empty", drawn: "0", xRange: "" });
      return;
    }
    const view = currentView(chart);
    const visible = chart.series.filter((s) => !chart.hidden.has(s.index));
    chart.stacks = chart.stacked ? stack(visible) : null;
    const y = spec.y || {}, xLabel = (spec.x && spec.x.label) || "", yLabel = y.label || "";
    const rows = (chart.bands.some((b) => b.kind === "phase" && b.label) ? 1 : 0) +
      (chart.bands.some((b) => b.kind === "fault" && b.label) ? 1 : 0);
    const top = 10 + rows * BAND_ROW, bottom = 24 + (xLabel ? 16 : 0);
    const h = HEIGHT - top - bottom;
    const yd = yDomain(chart, visible, view, Math.max(2, Math.round(h / 50)));
    const yTicks = yd.ticks.values.map((v) => ({ v, text: tickText(v, yd.ticks.step || v) }));
    const left = Math.ceil(Math.max(...yTicks.map((t) => t.text.length), 1) * CHAR_W + 12 +
      (yLabel ? 18 : 0));
    const right = 14, w = W - left - right;
    const g = { left, top, w, h, W };
    g.sx = scale(chart.kind === "log", view[0], view[1], left, left + w);
    g.sy = scale(chart.ylog, yd.lo, yd.hi, top + h, top);
    if (chart.type === "bars") {
      const log = chart.kind === "log";
      const gap = chart.kind === "category" ? 1
        : minGap(visible.length ? visible : chart.series, log);
      const unit = g.sx.map(log ? view[0] * gap : view[0] + gap) - left;
      g.slot = Math.max(1, Math.min(w / 3, unit));
    }
    chart.geo = g;

    const id = spec.id, parts = [];
    parts.push(`<svg class="chart-svg" viewBox="0 0 ${W} ${HEIGHT}" role="img" ` +
      `aria-label="${esc(spec.title || id)}"><defs><clipPath id="fc-clip-${id}">` +
      `<rect x="${left}" y="${top}" width="${w}" height="${h}"/></clipPath>` +
      `<pattern id="fc-hatch-${id}" width="7" height="7" patternUnits="userSpaceOnUse" ` +
      `patternTransform="rotate(45)"><rect width="7" height="7" fill="rgba(207,34,46,0.08)"/>` +
      `<line x1="0" y1="0" x2="0" y2="7" stroke="rgba(207,34,46,0.3)" stroke-width="2.5"/>` +
      `</pattern></defs>`);
    const bands = bandsSvg(chart, g, view, rows);
    parts.push(`<g clip-path="url(#fc-clip-${id})">${bands.shades}</g>`);
    const xt = xTicks(chart, g, view);
    let grid = "";
    for (const v of xt.minor) {
      const x = px(g.sx.map(v));
      grid += `<line x1="${x}" x2="${x}" y1="${top}" y2="${top + h}" stroke="#f3f4f6"/>`;
    }
    for (const v of yd.ticks.minor) {
      const yy = px(g.sy.map(v));
      grid += `<line x1="${left}" x2="${left + w}" y1="${yy}" y2="${yy}" stroke="#f1f3f5"/>`;
    }
    for (const t of xt.ticks) {
      if (chart.kind === "category") continue;
      const x = px(g.sx.map(t.v));
      grid += `<line x1="${x}" x2="${x}" y1="${top}" y2="${top + h}" stroke="#eceff2"/>`;
    }
    for (const t of yTicks) {
      const yy = px(g.sy.map(t.v));
      grid += `<line x1="${left}" x2="${left + w}" y1="${yy}" y2="${yy}" stroke="#e3e7eb"/>`;
    }
    parts.push(`<g class="grid">${grid}</g>`, bands.labels);

    let drawn = 0, paths = "";
    visible.forEach((s, k) => {
      drawn += countInView(s, view);
      paths += seriesPath(chart, s, k, visible.length, g, view);
    });
    parts.push(`<g class="plot" clip-path="url(#fc-clip-${id})">${paths}</g>`);

    let axes = `<line x1="${left}" x2="${left + w}" y1="${top + h}" y2="${top + h}" ` +
      `stroke="#8c959f"/>` +
      `<line x1="${left}" x2="${left}" y1="${top}" y2="${top + h}" stroke="#8c959f"/>`;
    for (const t of xt.ticks) {
      const x = g.sx.map(t.v);
      if (!(x >= left - 0.5 && x <= left + w + 0.5)) continue;
      const half = (t.text.length * CHAR_W) / 2;
      const anchor = x - half < 0 ? "start" : x + half > W ? "end" : "middle";
      axes += `<line x1="${px(x)}" x2="${px(x)}" y1="${top + h}" y2="${top + h + 4}" ` +
        `stroke="#8c959f"/>` +
        `<text x="${px(x)}" y="${top + h + 16}" text-anchor="${anchor}">${esc(t.text)}</text>`;
    }
    for (const t of yTicks) {
      axes += `<text x="${left - 6}" y="${px(g.sy.map(t.v))}" dy="0.32em" text-anchor="end">` +
        `${esc(t.text)}</text>`;
    }
    if (xLabel) {
      axes += `<text class="axis-label" x="${px(left + w / 2)}" y="${HEIGHT - 5}" ` +
        `text-anchor="middle">${esc(xLabel)}</text>`;
    }
    if (yLabel) {
      axes += `<text class="axis-label" transform="translate(12,${px(top + h / 2)}) rotate(-90)" ` +
        `text-anchor="middle">${esc(yLabel)}</text>`;
    }
    if (!visible.length) {
      axes += `<text class="empty" x="${px(left + w / 2)}" y="${px(top + h / 2)}" ` +
        `text-anchor="middle">every series hidden (see the legend)</text>`;
    }
    parts.push(`<g class="axes">${axes}</g>`,
      // Over categories the crosshair is the hovered category's column, shaded.
      `<line class="crosshair" x1="0" x2="0" y1="${top}" y2="${top + h}" ` +
      (chart.kind === "category" ? `stroke="rgba(87,96,106,0.1)" stroke-width="${px(g.slot)}"`
        : `stroke="#57606a" stroke-width="1" stroke-dasharray="2,2"`) +
      ` visibility="hidden" pointer-events="none"/>`,
      `<g class="hover-dots" pointer-events="none"></g>`,
      `<rect class="selection" x="0" y="${top}" width="0" height="${h}" ` +
      `fill="rgba(9,105,218,0.12)" stroke="rgba(9,105,218,0.5)" visibility="hidden" ` +
      `pointer-events="none"/>`,
      `<rect class="overlay" x="${left}" y="${top}" width="${w}" height="${h}" ` +
      `fill="transparent" style="cursor:${chart.kind === "category" ? "default" : "crosshair"}"/>` +
      `</svg>`);
    chart.plot.innerHTML = parts.join("");
    chart.tip = null;

    const zoomed = chart.kind === "time" ? !!time.view : !!chart.view;
    chart.reset.hidden = !zoomed;
    Object.assign(figure.dataset, {
      state: "drawn",
      drawn: String(drawn),
      xRange: view[0] + "," + view[1],
      plot: [left, top, w, h].join(","),
    });
  }

  function fail(figure, name, error) {
    const message = (error && error.message) || String(error);
    figure.classList.add("chart-error");
    Object.assign(figure.dataset, { state: "error", drawn: "0" });
    const plot = figure.querySelector(".chart-plot");
    if (plot) {
      plot.innerHTML =
        `<p class="chart-message">This chart could not be drawn: ${esc(message)}</p>`;
    }
    report(`chart ${name}: ${message}`);
  }

  function safeDraw(chart) {
    try {
      draw(chart);
    } catch (error) {
      chart.geo = null; // no hover nor zoom on what is not drawn
      fail(chart.figure, chart.spec.id, error);
    }
  }

  function buildLegend(chart) {
    if (!chart.hasData) return;
    const box = chart.type === "bars" || chart.type === "area" ? " box" : "";
    chart.legend.innerHTML = chart.series.map((s) =>
      `<button type="button" class="legend-item" data-series="${s.index}" aria-pressed="true" ` +
      `title="show or hide"><span class="legend-swatch${box}" ` +
      `style="background:${s.color}"></span>` +
      `${esc(s.name)}</button>`).join("");
    chart.legend.addEventListener("click", (event) => {
      const item = event.target.closest(".legend-item");
      if (!item) return;
      const index = Number(item.dataset.series);
      const hidden = !chart.hidden.has(index);
      if (hidden) chart.hidden.add(index);
      else chart.hidden.delete(index);
      item.classList.toggle("off", hidden);
      item.setAttribute("aria-pressed", String(!hidden));
      safeDraw(chart);
    });
  }

  /* Hover and zoom */

  function pointer(chart, event) {
    const svg = chart.plot.querySelector("svg");
    const r = svg.getBoundingClientRect();
    const k = chart.W / (r.width || chart.W);
    return { x: (event.clientX - r.left) * k, y: (event.clientY - r.top) * k, k };
  }

  function inPlot(g, p) {
    return p.x >= g.left && p.x <= g.left + g.w && p.y >= g.top && p.y <= g.top + g.h;
  }

  function crosshair(chart, x) {
    const line = chart.geo && chart.plot.querySelector(".crosshair");
    if (!line) return;
    const at = x === null ? NaN : chart.geo.sx.map(x);
    const show = at >= chart.geo.left && at <= chart.geo.left + chart.geo.w;
    line.setAttribute("visibility", show ? "visible" : "hidden");
    if (show) {
      line.setAttribute("x1", px(at));
      line.setAttribute("x2", px(at));
    }
  }

  function hideHover() {
    for (const c of charts) {
      crosshair(c, null);
      const dots = c.geo && c.plot.querySelector(".hover-dots");
      if (dots) dots.innerHTML = "";
      if (c.tip) c.tip.hidden = true;
    }
  }

  function xText(chart, x) {
    if (chart.kind === "category") return chart.categories[x];
    if (chart.kind === "time") return "t = " + valueText(x) + " s";
    const label = (chart.spec.x && chart.spec.x.label) || "x";
    return label + ": " + valueText(x);
  }

  function hover(chart, event) {
    const g = chart.geo;
    if (!g || dragging) return;
    const p = pointer(chart, event);
    if (!inPlot(g, p)) return hideHover();
    const visible = chart.series.filter((s) => !chart.hidden.has(s.index) && s.xs.length);
    const windows = chart.type === "bars" && chart.kind === "time";
    const xv = g.sx.invert(windows ? p.x - g.slot / 2 : p.x);
    let best = NaN, distance = Infinity;
    for (const s of visible) {
      const j = nearest(s.xs, xv);
      const d = Math.abs(g.sx.map(s.xs[j]) - g.sx.map(xv));
      if (d < distance) [best, distance] = [s.xs[j], d];
    }
    if (best !== best) return hideHover();
    let rows = "", dots = "";
    visible.forEach((s) => {
      const j = nearest(s.xs, best), v = s.ys[j];
      rows += `<div class="tt-row" data-series="${esc(s.name)}" ` +
        `data-value="${isNum(v) ? v : ""}">` +
        `<span class="legend-swatch" style="background:${s.color}"></span>${esc(s.name)}` +
        `<span class="tt-value">${valueText(v)}</span></div>`;
      let top = v;
      const layer = chart.stacks && chart.stacks.find((l) => l.series === s);
      if (layer) top = layer.top[nearest(layer.xs, best)];
      const cy = g.sy.map(top), cx = g.sx.map(chart.type === "bars" ? best : s.xs[j]);
      if (isNum(v) && cy === cy && chart.type !== "bars") {
        dots += `<circle cx="${px(cx)}" cy="${px(cy)}" r="3.2" fill="${s.color}" ` +
          `stroke="#fff" stroke-width="1.2"/>`;
      }
    });
    for (const b of chart.bands) {
      if (best >= b.from && best <= b.to) {
        rows += `<div class="tt-band ${b.kind}">${b.kind}: ${esc(b.label || "(unnamed)")}</div>`;
      }
    }
    chart.plot.querySelector(".hover-dots").innerHTML = dots;
    for (const c of charts) {
      if (c === chart) crosshair(c, best);
      else if (chart.kind === "time" && c.kind === "time") crosshair(c, best);
      else crosshair(c, null);
    }
    if (!chart.tip) {
      chart.tip = document.createElement("div");
      chart.tip.className = "chart-tooltip";
      chart.plot.appendChild(chart.tip);
    }
    const tip = chart.tip;
    tip.hidden = false;
    tip.dataset.x = String(best);
    tip.innerHTML = `<div class="tt-head">${esc(xText(chart, best))}</div>${rows}`;
    const cssX = g.sx.map(best) / p.k, width = tip.offsetWidth;
    const leftPx = cssX + 14 + width > chart.plot.clientWidth ? cssX - 14 - width : cssX + 14;
    tip.style.left = Math.max(0, leftPx) + "px";
    tip.style.top = Math.max(0, p.y / p.k - 10) + "px";
  }

  function zoom(chart, range) {
    if (chart.kind === "time") {
      time.view = range;
      charts.filter((c) => c.kind === "time").forEach(safeDraw);
    } else {
      chart.view = range;
      safeDraw(chart);
    }
  }

  function listen(chart) {
    const plot = chart.plot;
    plot.addEventListener("mousemove", (event) => hover(chart, event));
    plot.addEventListener("mouseleave", hideHover);
    plot.addEventListener("mousedown", (event) => {
      if (event.button !== 0 || !chart.geo || chart.kind === "category") return;
      const p = pointer(chart, event);
      if (!inPlot(chart.geo, p)) return;
      event.preventDefault();
      hideHover();
      dragging = { chart, x0: p.x, x1: p.x };
    });
    plot.addEventListener("dblclick", () => {
      if (chart.geo && chart.kind !== "category") zoom(chart, null);
    });
    chart.reset.addEventListener("click", () => zoom(chart, null));
  }

  window.addEventListener("mousemove", (event) => {
    if (!dragging) return;
    const { chart } = dragging, g = chart.geo;
    const x = Math.min(g.left + g.w, Math.max(g.left, pointer(chart, event).x));
    dragging.x1 = x;
    const rect = chart.plot.querySelector(".selection");
    rect.setAttribute("x", px(Math.min(dragging.x0, x)));
    rect.setAttribute("width", px(Math.abs(x - dragging.x0)));
    rect.setAttribute("visibility", "visible");
  });

  window.addEventListener("mouseup", () => {
    if (!dragging) return;
    const { chart, x0, x1 } = dragging;
    dragging = null;
    const rect = chart.plot.querySelector(".selection");
    if (rect) rect.setAttribute("visibility", "hidden");
    if (Math.abs(x1 - x0) < 4) return; // a click, not a drag
    const a = chart.geo.sx.invert(Math.min(x0, x1)), b = chart.geo.sx.invert(Math.max(x0, x1));
    if (b > a) zoom(chart, [a, b]);
  });

  let resizing = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      for (const c of charts) if (Math.round(c.plot.clientWidth) !== c.W) safeDraw(c);
    }, 150);
  });

  /* The page's charts */

  function main() {
    const started = Date.now();
    const data = document.getElementById("fastcoord-charts");
    if (!data) return;
    for (const spec of JSON.parse(data.textContent)) {
      const figure = document.getElementById("chart-" + spec.id);
      if (!figure) {
        report(`chart ${spec.id}: no place for it in the page`);
        continue;
      }
      try {
        charts.push(prepare(spec, figure));
      } catch (error) {
        fail(figure, spec.id, error);
      }
    }
    for (const c of charts) {
      if (c.kind !== "time" || !c.full) continue;
      time.full = time.full ? [Math.min(time.full[0], c.full[0]), Math.max(time.full[1], c.full[1])]
        : c.full.slice();
    }
    for (const c of charts) {
      try {
        buildLegend(c);
        listen(c);
      } catch (error) {
        fail(c.figure, c.spec.id, error);
        continue;
      }
      safeDraw(c);
    }
    Object.assign(document.documentElement.dataset, {
      chartsDrawn: String(charts.filter((c) => c.figure.dataset.state !== "error").length),
      chartsMs: String(Date.now() - started), // how long the first drawing took
    });
  }

  main();
})();
