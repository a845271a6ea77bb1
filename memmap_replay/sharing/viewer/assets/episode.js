// memmap-replay viewer: one episode. Its image fields as frames on a timeline (slider, play/pause,
// arrow keys, speed, frame stacks as the newest frame or tiled), its small fields plotted per step with
// a cursor that follows the slider (a click on a plot seeks), its end, final observation and meta values.
"use strict";
(function (MR) {
  const BASE_FPS = 10;
  let player = null;  // the episode on screen: {step, frames, ...}

  function frameUrl(data, field, step, stack) {
    // the store's identity in the URL: a folder overwritten by another store never shows its frames from the cache
    return "/api/frame?" + new URLSearchParams({ store: data.store, field, id: data.id, t: step, stack }).toString();
  }

  function facts(data) {
    const rows = [["steps", data.length], ["end", data.end || "not recorded"],
                  ["final observation", data.final ? "stored (the timeline's last position)" : "not stored"],
                  ["position", `${data.position} (0 is the oldest live episode)`]];
    if (data.continues !== null) rows.push(["continues", MR.el("a", { href: `#/episode/${data.continues}`, text: `episode ${data.continues}` })]);
    if (data.continued_by !== null) rows.push(["continued by", MR.el("a", { href: `#/episode/${data.continued_by}`, text: `episode ${data.continued_by}` })]);
    for (const [name, value] of Object.entries(data.meta)) rows.push([`meta: ${name}`, MR.number(value)]);
    return MR.el("dl", { class: "chips", id: "episode-facts" },
      ...rows.map(([key, value]) => MR.el("div", {}, MR.el("dt", { text: key }), MR.el("dd", {}, value))));
  }

  function images(data) {
    return data.images.map((info) => {
      const image = MR.el("img", { class: "frame", "data-field": info.name, alt: `${info.name} at the current step`,
                                   width: info.width, height: info.height });
      const scale = Math.max(1, Math.floor(256 / Math.max(info.height, info.width)));
      image.style.width = `${info.width * scale}px`;
      const caption = MR.el("figcaption", {}, `${info.name} (${info.dtype}, ${info.layout})`);
      let select = null;
      if (info.stack > 1) {
        select = MR.el("select", { class: "stack", "data-field": info.name, "aria-label": `${info.name}: frame stack` },
          MR.el("option", { value: "last", text: `newest of ${info.stack}` }), MR.el("option", { value: "tile", text: "tiled" }));
        select.addEventListener("change", () => {
          image.style.width = `${info.width * (select.value === "tile" ? info.stack : 1) * scale}px`;
          show(player.step);
        });
        caption.append(" ", select);
      }
      return { info, image, select, figure: MR.el("figure", { class: "frames" }, image, caption) };
    });
  }

  function plots(data, seek) {
    return data.plots.map((field) => {
      const labels = field.values.length > 1 ? field.values.map((_, j) => `${field.name}[${j}]`) : [field.name];
      const shrunk = data.downsampled;  // a long episode: the min and max of every `bucket` steps, at steps `x`
      const plot = MR.plots.line({
        series: field.values.map((values, j) => ({ values, label: labels[j] })), cursor: true, onseek: seek,
        x: shrunk ? shrunk.x : undefined, label: `${field.name} per step`, height: 150,
      });
      plot.svg.dataset.field = field.name;
      const finalText = data.final_values && field.name in data.final_values
        ? ` (final: ${MR.number(data.final_values[field.name])})` : "";
      const shrunkText = shrunk ? ` (min and max of every ${shrunk.bucket} steps)` : "";
      return { plot, figure: MR.el("figure", { class: "step-plot" }, MR.el("figcaption", { text: field.name + finalText + shrunkText }), plot.svg, plot.legend) };
    });
  }

  function show(step) {
    const p = player;
    p.step = Math.max(0, Math.min(p.frames - 1, step));
    p.slider.value = String(p.step);
    const isFinal = p.data.final && p.step === p.data.length;
    p.label.textContent = isFinal ? `final observation (after step ${p.data.length - 1})` : `step ${p.step} of ${p.data.length}`;
    p.label.dataset.step = String(p.step);
    for (const view of p.images) {
      view.image.src = frameUrl(p.data, view.info.name, p.step, view.select ? view.select.value : "last");
    }
    for (const view of p.plots) view.plot.setCursor(Math.min(p.step, p.data.length - 1));
  }

  function tick() {
    const p = player;
    if (!p || !p.playing) return;
    const loaded = p.images.every((view) => view.image.complete);
    if (loaded) {
      if (p.step >= p.frames - 1) { setPlaying(false); return; }
      show(p.step + 1);
    }
    p.timer = setTimeout(tick, 1000 / (BASE_FPS * Number(p.speed.value)));
  }

  function setPlaying(on) {
    const p = player;
    p.playing = on;
    p.play.textContent = on ? "❚❚ pause" : "▶ play";
    clearTimeout(p.timer);
    if (on) {
      if (p.step >= p.frames - 1) show(0);
      p.timer = setTimeout(tick, 1000 / (BASE_FPS * Number(p.speed.value)));
    }
  }

  function onKey(event) {
    if (!player || event.target.tagName === "INPUT" && event.target.type === "text") return;
    const moves = { ArrowRight: 1, ArrowLeft: -1, PageDown: 10, PageUp: -10 };
    if (event.key in moves) { setPlaying(false); show(player.step + moves[event.key]); event.preventDefault(); }
    else if (event.key === "Home") { show(0); event.preventDefault(); }
    else if (event.key === "End") { show(player.frames - 1); event.preventDefault(); }
    else if (event.key === " ") { setPlaying(!player.playing); event.preventDefault(); }
  }
  document.addEventListener("keydown", onKey);

  MR.episode = {
    stop() { if (player) { clearTimeout(player.timer); player = null; } },
    async render(root, id) {
      MR.episode.stop();
      MR.clear(root).append(MR.el("p", { class: "muted", text: `loading episode ${id}...` }));
      let data;
      try {
        data = await MR.getJSON(`/api/episode?id=${encodeURIComponent(id)}`);
      } catch (error) {
        MR.clear(root).append(MR.el("p", { class: "problem", id: "episode-problem", text: error.message }),
                              MR.el("p", {}, MR.el("a", { href: "#/", text: "back to the episodes" })));
        return;
      }
      const frames = data.length + (data.final ? 1 : 0);
      const p = player = { data, step: 0, frames: Math.max(1, frames), playing: false, timer: null };
      p.slider = MR.el("input", { type: "range", id: "timeline", min: 0, max: Math.max(0, frames - 1), value: 0, step: 1,
                                  "aria-label": "timeline" });
      p.slider.addEventListener("input", () => { setPlaying(false); show(Number(p.slider.value)); });
      p.play = MR.el("button", { type: "button", id: "play", text: "▶ play", onclick: () => setPlaying(!p.playing) });
      p.speed = MR.el("select", { id: "speed", "aria-label": "speed" },
        ...[0.25, 0.5, 1, 2, 4].map((s) => MR.el("option", { value: s, selected: s === 1, text: `${s}× (${BASE_FPS * s} fps)` })));
      p.label = MR.el("span", { id: "step-label" });
      p.images = images(data);
      p.plots = plots(data, (step) => { setPlaying(false); show(step); });
      const controls = MR.el("div", { class: "controls player" },
        MR.el("button", { type: "button", id: "step-back", onclick: () => { setPlaying(false); show(p.step - 1); }, text: "‹" }),
        p.play,
        MR.el("button", { type: "button", id: "step-forward", onclick: () => { setPlaying(false); show(p.step + 1); }, text: "›" }),
        p.slider, p.label, p.speed,
        MR.el("span", { class: "muted", text: "keys: ← → step, space play/pause, Home/End" }));
      MR.clear(root).append(
        MR.el("h1", { id: "episode-title", text: `Episode ${data.id}` }),
        MR.el("p", { class: "nav" }, MR.el("a", { href: "#/", text: "← all episodes" }),
              data.previous !== null ? MR.el("a", { href: `#/episode/${data.previous}`, id: "previous-episode", text: `‹ episode ${data.previous}` }) : null,
              data.next !== null ? MR.el("a", { href: `#/episode/${data.next}`, id: "next-episode", text: `episode ${data.next} ›` }) : null),
        facts(data), controls,
        p.images.length ? MR.el("div", { class: "frame-row" }, ...p.images.map((view) => view.figure))
                        : MR.el("p", { class: "muted", text: "no image field" }),
        MR.el("div", { class: "step-plots" }, ...p.plots.map((view) => view.figure)));
      show(0);
      root.dataset.episode = String(data.id);
    },
  };
})(window.MR);
