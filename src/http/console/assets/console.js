// webhookd console: the overview refreshes its figures by itself. Every
// page works without this script; it only saves a reload.
"use strict";
(function () {
  const live = document.querySelector("[data-refresh]");
  if (!live) return;
  const every = 10000;
  async function refresh() {
    // Someone is on a link in it: replacing it would take their focus away.
    if (live.contains(document.activeElement)) {
      setTimeout(refresh, every);
      return;
    }
    try {
      const response = await fetch(live.dataset.refresh, {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
        redirect: "manual",
      });
      // Signed out: stop, and keep what is shown.
      if (response.type === "opaqueredirect" || response.status === 401) return;
      if (response.ok) live.innerHTML = await response.text();
    } catch (_) {
      // A failed refresh is tried again at the next tick.
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);
})();
