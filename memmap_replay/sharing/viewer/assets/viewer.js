// memmap-replay viewer: the live page: fetching the overview, routing between it and an episode
// (#/episode/ID), and following a live writer (polling /api/state).
"use strict";
(function (MR) {
  const POLL_MS = 1500;
  let known = null;  // the store's state last drawn: {store, first, next}

  async function stats() {
    try {
      MR.overview.statsTable(await MR.getJSON("/api/stats"));
    } catch (error) {
      const table = document.getElementById("stats-table");
      MR.clear(table).append(MR.el("tbody", {}, MR.el("tr", {}, MR.el("td", { class: "problem", text: error.message }))));
    }
  }

  async function overview() {
    try {
      const data = await MR.getJSON("/api/overview");
      MR.overview.render(data);
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
      const onOverview = !document.getElementById("overview-view").hidden;
      if (known && now.store !== known.store) {  // the folder was overwritten by a new store: show it
        if (onOverview) await Promise.all([overview(), MR.table.load(), stats()]);
        else await route();
      } else if (known && (now.first !== known.first || now.next !== known.next || now.edits !== known.edits)
                 && onOverview) {
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
