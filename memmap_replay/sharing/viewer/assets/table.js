// memmap-replay viewer: the episodes table. Paging, sorting and filtering are the server's
// (/api/episodes), so a store of 100,000 episodes sends one page of rows at a time.
"use strict";
(function (MR) {
  const state = { offset: 0, limit: 25, sort: "id", descending: false, filters: [] };
  let loading = null;

  function query() {
    const params = new URLSearchParams({ offset: state.offset, limit: state.limit, sort: state.sort,
                                         order: state.descending ? "desc" : "asc" });
    for (const rule of state.filters) params.append("filter", rule);
    return "/api/episodes?" + params.toString();
  }

  function readControls() {
    const text = document.getElementById("filter").value;
    const rules = text.split(/,|\band\b/).map((part) => part.trim()).filter((part) => part.length);
    const end = document.getElementById("end-filter").value;
    if (end) rules.push("end = " + end);
    state.filters = rules;
    state.limit = Number(document.getElementById("page-size").value);
  }

  function header(columns) {
    const row = MR.el("tr");
    for (const name of columns) {
      const arrow = state.sort === name ? (state.descending ? " ▼" : " ▲") : "";
      const button = MR.el("button", {
        type: "button", class: "sort", "data-column": name, text: name + arrow,
        title: `sort by ${name}`,
        onclick: () => {
          state.descending = state.sort === name ? !state.descending : false;
          state.sort = name;
          state.offset = 0;
          MR.table.load();
        },
      });
      row.append(MR.el("th", { "aria-sort": state.sort === name ? (state.descending ? "descending" : "ascending") : "none" }, button));
    }
    return row;
  }

  function cell(name, value) {
    if (name === "id") return MR.el("td", {}, MR.el("a", { href: `#/episode/${value}`, class: "episode-link", text: String(value) }));
    if (name === "end") return MR.el("td", { class: "end end-" + (value || "none"), text: value || "not recorded" });
    return MR.el("td", { class: "num", text: MR.number(value) });
  }

  function render(page) {
    const table = document.getElementById("episodes-table");
    MR.clear(table.tHead).append(header(page.columns));
    const body = MR.clear(table.tBodies[0]);
    for (const values of page.rows) {
      body.append(MR.el("tr", { "data-id": values[0] }, ...values.map((value, i) => cell(page.columns[i], value))));
    }
    if (!page.rows.length) body.append(MR.el("tr", {}, MR.el("td", { colspan: page.columns.length, class: "muted", text: "no episode matches" })));
    const pager = MR.clear(document.getElementById("pager"));
    const first = page.matched ? page.offset + 1 : 0, last = page.offset + page.rows.length;
    const shown = MR.el("span", { id: "table-count", "data-matched": page.matched, "data-total": page.total,
                                  text: `episodes ${first}–${last} of ${page.matched}` +
                                        (page.matched !== page.total ? ` matching (${page.total} in the store)` : "") });
    const move = (offset) => () => { state.offset = offset; MR.table.load(); };
    const lastPage = Math.max(0, Math.floor((page.matched - 1) / page.limit) * page.limit);
    pager.append(
      MR.el("button", { type: "button", id: "first-page", disabled: page.offset === 0, onclick: move(0), text: "« first" }),
      MR.el("button", { type: "button", id: "prev-page", disabled: page.offset === 0, onclick: move(Math.max(0, page.offset - page.limit)), text: "‹ previous" }),
      shown,
      MR.el("button", { type: "button", id: "next-page", disabled: last >= page.matched, onclick: move(page.offset + page.limit), text: "next ›" }),
      MR.el("button", { type: "button", id: "last-page", disabled: last >= page.matched, onclick: move(lastPage), text: "last »" }));
  }

  MR.table = {
    state,
    init() {
      document.getElementById("table-controls").addEventListener("submit", (event) => {
        event.preventDefault();
        readControls();
        state.offset = 0;
        MR.table.load();
      });
      document.getElementById("end-filter").addEventListener("change", () => { readControls(); state.offset = 0; MR.table.load(); });
      document.getElementById("page-size").addEventListener("change", () => { readControls(); state.offset = 0; MR.table.load(); });
    },
    async load() {
      const url = query();
      loading = url;
      try {
        const page = await MR.getJSON(url);
        if (loading !== url) return;  // a newer request went out meanwhile
        MR.showError("");
        render(page);
        document.getElementById("episodes-table").dataset.loaded = url;
      } catch (error) {
        MR.showError(error.message);
      }
    },
  };
})(window.MR);
