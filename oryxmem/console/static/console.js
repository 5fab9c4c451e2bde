// oryxmem console: keeps an open agent page live, and asks before a Forget.
// Part of oryxmem (MIT licence); no other code, nothing from elsewhere. The pages work
// without it. Memory text is never put in the page by this script except as the HTML
// the console rendered (every value escaped on the server).
"use strict";

(function () {
  const LIVE_MS = 1000;

  function confirmForgets(root) {
    root.querySelectorAll("form.forget").forEach(function (form) {
      if (form.dataset.asks) return;
      form.dataset.asks = "1";
      form.addEventListener("submit", function (event) {
        if (!window.confirm("Forget this entry? It leaves MEMORY.md and every index.")) {
          event.preventDefault();
          return;
        }
        const confirmed = document.createElement("input");
        confirmed.type = "hidden";
        confirmed.name = "confirmed";
        confirmed.value = "1";
        form.appendChild(confirmed);
      });
    });
  }

  function keepLive(memory) {
    let version = memory.dataset.version;
    let busy = false;
    async function look() {
      if (busy || document.hidden) return;
      busy = true;
      try {
        const asked = await fetch(memory.dataset.live, { credentials: "same-origin" });
        if (!asked.ok) return;
        const now = (await asked.json()).version;
        if (now === version) return;
        const rows = await fetch(memory.dataset.fragment, { credentials: "same-origin" });
        if (!rows.ok) return;
        const html = await rows.text();
        version = rows.headers.get("X-Memory-Version") || now;
        memory.innerHTML = html; // rendered and escaped by the console
        memory.dataset.version = version;
        confirmForgets(memory);
      } catch (error) {
        // the console stopped or the network blinked: the next look tries again
      } finally {
        busy = false;
      }
    }
    window.setInterval(look, LIVE_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    confirmForgets(document);
    const memory = document.getElementById("memory");
    if (memory && memory.dataset.live) keepLive(memory);
  });
})();
