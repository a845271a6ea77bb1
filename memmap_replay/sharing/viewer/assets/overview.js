// memmap-replay viewer: drawing the overview (card, counts, end mix, curves, histograms, statistics) from
// the server's JSON; shared by the live page (viewer.js) and the static report (report.js).
"use strict";
(function (MR) {
  function card(overview) {
    const root = MR.clear(document.getElementById("card"));
    const c = overview.card || {};
    const title = c.name || overview.folder;
    document.title = `${title} - memmap-replay view`;
    document.getElementById("store-title").textContent = title;
    root.append(MR.el("h1", { id: "card-name", text: title }));
    if (c.description) root.append(MR.el("p", { id: "card-description", class: "description", text: c.description }));
    const facts = [["license", c.license], ["environment", c.env], ["algorithm", c.algorithm],
                   ["author", Array.isArray(c.author) ? c.author.join(", ") : c.author], ["code", c.code_url],
                   ["folder", overview.folder]].filter(([, value]) => value);
    root.append(MR.el("dl", { class: "facts" }, ...facts.flatMap(([key, value]) => [MR.el("dt", { text: key }), MR.el("dd", { text: value })])));
    if (overview.card_error) root.append(MR.el("p", { class: "problem", text: "card: " + overview.card_error }));
    if (!overview.card && !overview.card_error) root.append(MR.el("p", { class: "muted", text: "no dataset card (memmap-replay card FOLDER --set name=... writes one)" }));
  }

  function counts(overview) {
    const root = MR.clear(document.getElementById("counts"));
    const cap = overview.capacity;
    const items = [["episodes", overview.episodes, "count-episodes"], ["steps", overview.steps, "count-steps"],
                   ["terminated", overview.ends.terminated, "count-terminated"], ["truncated", overview.ends.truncated, "count-truncated"],
                   ["end not recorded", overview.ends["not recorded"], "count-unrecorded"],
                   ["capacity", `${cap.max_episodes} episodes × ${cap.max_timesteps} steps${cap.circular ? " (ring)" : ""}`, "count-capacity"]];
    root.append(...items.map(([label, value, id]) => MR.el("div", { class: "count" }, MR.el("b", { id, text: MR.number(value) }), MR.el("span", { text: label }))));
    const fields = overview.fields.map((f) => `${f.name} ${f.dtype}${JSON.stringify(f.shape).replace("[]", "")}`);
    const meta = overview.meta_fields.map((f) => `${f.name} ${f.dtype}${JSON.stringify(f.shape).replace("[]", "")}`);
    root.append(MR.el("p", { class: "schema" }, MR.el("b", { text: "step fields: " }), fields.join(", "),
                      meta.length ? MR.el("span", {}, MR.el("b", { text: " · meta fields: " }), meta.join(", ")) : null));
  }

  function curves(overview) {
    const root = MR.clear(document.getElementById("overview-plots"));
    const names = overview.return_field ? ["return", "length"] : ["length"];
    for (const name of names) {
      const series = overview.series[name];
      const binned = series.binned > 1 ? ` (mean per ${series.binned} episodes, band: min to max)` : "";
      const line = MR.plots.line({ series: [{ values: series.mean, label: name }], x: series.x, label: `${name} over episodes`,
                                   band: series.binned > 1 ? { min: series.min, max: series.max } : null });
      line.svg.id = `curve-${name}`;
      const hist = MR.plots.histogram({ ...overview.histograms[name], label: `${name} histogram` });
      hist.svg.id = `histogram-${name}`;
      root.append(MR.el("figure", { class: "curve" }, MR.el("figcaption", { text: `episode ${name} by episode id${binned}` }), line.svg),
                  MR.el("figure", { class: "histogram" }, MR.el("figcaption", { text: `${name}: histogram` }), hist.svg));
    }
  }

  function statsTable(data) {
    const table = document.getElementById("stats-table");
    const head = MR.el("thead", {}, MR.el("tr", {}, ...["field", "shape", "count", "mean", "std", "min", "max"].map((h) => MR.el("th", { text: h }))));
    const body = MR.el("tbody", {}, ...data.fields.map((f) => MR.el("tr", {},
      MR.el("td", { text: f.name }), MR.el("td", { text: JSON.stringify(f.shape) }), MR.el("td", { class: "num", text: MR.number(f.count) }),
      ...["mean", "std", "min", "max"].map((key) => MR.el("td", { class: "num", text: MR.number(f[key]) })))));
    if (!data.fields.length) body.append(MR.el("tr", {}, MR.el("td", { colspan: 7, class: "muted", text: "no tracked numeric field" })));
    MR.clear(table).append(head, body);
  }

  MR.overview = {
    render(data) { card(data); counts(data); curves(data); },
    statsTable,
  };
})(window.MR);
