// snaprun ui: live updates. Every element with data-live="URL" is refreshed from URL (a
// part of the page, rendered and escaped by the server) every data-interval ms; a part
// holding the element that has the focus (a note being typed) waits for the next round.
"use strict";

function followLive(element) {
  const url = element.dataset.live;
  const interval = Math.max(500, parseInt(element.dataset.interval || "2000", 10));
  let shown = null;
  async function refresh() {
    try {
      if (!element.contains(document.activeElement)) {
        const response = await fetch(url, {credentials: "same-origin", cache: "no-store"});
        if (response.ok) {
          const text = await response.text();
          if (text !== shown) {
            element.innerHTML = text;
            shown = text;
            element.dataset.refreshed = String(Date.now());
          }
        }
      }
    } catch (error) {
      // the server stopped or the network blinked: try again next round
    }
    window.setTimeout(refresh, interval);
  }
  window.setTimeout(refresh, interval);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live]").forEach(followLive);
});
