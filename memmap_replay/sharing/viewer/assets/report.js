// memmap-replay report: a static page (one HTML file, no server) drawn from the JSON embedded in it:
// the overview as the live page draws it, and the chosen episodes with thumbnails of their frames.
"use strict";
(function (MR) {
  function episodes(data) {
    const table = document.getElementById("episodes-table");
    const columns = data.columns;
    MR.clear(table.tHead).append(MR.el("tr", {}, ...columns.map((name) => MR.el("th", { text: name })),
                                       MR.el("th", { text: data.field ? `${data.field}: frames` : "frames" })));
    const body = MR.clear(table.tBodies[0]);
    for (const episode of data.episodes) {
      const cells = episode.row.map((value, i) => columns[i] === "end"
        ? MR.el("td", { class: "end end-" + (value || "none"), text: value || "not recorded" })
        : MR.el("td", { class: i ? "num" : "", text: MR.number(value) }));
      const strip = MR.el("td", {}, MR.el("div", { class: "thumbs" }, ...episode.frames.map((frame) =>
        MR.el("figure", { class: "thumb" }, MR.el("img", { src: frame.src, alt: frame.label, title: frame.label }),
              MR.el("figcaption", { text: frame.label })))));
      body.append(MR.el("tr", { "data-id": episode.row[0] }, ...cells, strip));
    }
    document.getElementById("table-count").textContent =
      `${data.episodes.length} of ${data.overview.episodes} episodes, spread from the oldest to the newest`;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const data = JSON.parse(document.getElementById("report-data").textContent);
    MR.overview.render(data.overview);
    MR.overview.statsTable(data.stats);
    episodes(data);
    document.getElementById("made").textContent = data.made;
    document.body.dataset.ready = "1";
  });
})(window.MR);
