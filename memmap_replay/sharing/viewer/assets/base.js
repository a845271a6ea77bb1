// memmap-replay viewer: DOM helpers shared by the page's scripts. Every string from the store reaches the
// page as a text node (textContent) or an attribute value, never as HTML.
"use strict";
window.MR = window.MR || {};
(function (MR) {
  const SVG = "http://www.w3.org/2000/svg";

  function fill(node, attrs, children) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "text") node.textContent = String(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  MR.el = (tag, attrs, ...children) => fill(document.createElement(tag), attrs, children);
  MR.svg = (tag, attrs, ...children) => fill(document.createElementNS(SVG, tag), attrs, children);
  MR.clear = (node) => { while (node.firstChild) node.removeChild(node.firstChild); return node; };

  MR.getJSON = async function (url) {
    const response = await fetch(url, { cache: "no-store" });
    let body = null;
    try { body = await response.json(); } catch (error) { body = null; }
    if (!response.ok || body === null) {
      const message = body && body.error ? body.error : `${url}: ${response.status} ${response.statusText}`;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return body;
  };

  MR.number = function (value) {
    if (value === null || value === undefined) return "–";
    if (Array.isArray(value)) return "[" + value.map(MR.number).join(", ") + "]";
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return String(value);
    const size = Math.abs(value);
    if (size !== 0 && (size >= 1e6 || size < 1e-3)) return value.toExponential(3);
    return String(Number(value.toPrecision(4)));
  };

  MR.showError = function (message) {
    const banner = document.getElementById("error");
    banner.textContent = message;
    banner.hidden = !message;
  };
})(window.MR);
