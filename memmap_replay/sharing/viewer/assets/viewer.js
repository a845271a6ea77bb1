// memmap-replay viewer: the overview (card, counts, end mix, curves, histograms, statistics), routing
// between it and an episode (#/episode/ID), and following a live writer (polling /api/state).
"use strict";
(function (MR) {
  const POLL_MS = 1500;
  let known = null;  // the store's state last drawn: {first, next}

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

  async function stats() {
    const table = document.getElementById("stats-table");
    try {
      const data = await MR.getJSON("/api/stats");
      const head = MR.el("thead", {}, MR.el("tr", {}, ...["field", "shape", "count", "mean", "std", "min", "max"].map((h) => MR.el("th", { text: h }))));
      const body = MR.el("tbody", {}, ...data.fields.map((f) => MR.el("tr", {},
        MR.el("td", { text: f.name }), MR.el("td", { text: JSON.stringify(f.shape) }), MR.el("td", { class: "num", text: MR.number(f.count) }),
        ...["mean", "std", "min", "max"].map((key) => MR.el("td", { class: "num", text: MR.number(f[key]) })))));
      MR.clear(table).append(head, body);
      if (!data.fields.length) body.append(MR.el("tr", {}, MR.el("td", { colspan: 7, class: "muted", text: "no tracked numeric field" })));
    } catch (error) {
      MR.clear(table).append(MR.el("tbody", {}, MR.el("tr", {}, MR.el("td", { class: "problem", text: error.message }))));
    }
  }

  async function overview() {
    try {
      const data = await MR.getJSON("/api/overview");
      card(data); counts(data); curves(data);
      document.getElementById("overview-view").dataset.episodes = String(data.episodes);
    } catch (error) {
      MR.showError(error.message);
    }
  }

  async function poll() {
    try {
      const now = await MR.getJSON("/api/state");
      const live = document.getElementById("live");
      live.classList.add("on");
      live.title = `following the store: ${now.episodes} episodes, checked ${new Date().toLocaleTimeString()}`;
      if (known && (now.first !== known.first || now.next !== known.next) && !document.getElementById("overview-view").hidden) {
        await Promise.all([overview(), MR.table.load(), stats()]);
      }
      known = now;
    } catch (error) {
      document.getElementById("live").classList.remove("on");
    }
    setTimeout(poll, POLL_MS);
  }

  let started = false;
  async function route() {
    const match = location.hash.match(/^#\/episode\/(-?\d+)$/);
    const overviewView = document.getElementById("overview-view"), episodeView = document.getElementById("episode-view");
    overviewView.hidden = Boolean(match);
    episodeView.hidden = !match;
    if (match) {
      await MR.episode.render(episodeView, match[1]);
      return;
    }
    MR.episode.stop();
    if (!started) {
      started = true;
      known = await MR.getJSON("/api/state").catch(() => null);
      await Promise.all([overview(), MR.table.load()]);
      stats();
    } else {
      await Promise.all([overview(), MR.table.load()]);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    MR.table.init();
    window.addEventListener("hashchange", route);
    route().then(() => { document.body.dataset.ready = "1"; });
    setTimeout(poll, POLL_MS);
  });
})(window.MR);
