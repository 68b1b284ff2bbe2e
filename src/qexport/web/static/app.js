// Progressive enhancement only: every page works without this file.
"use strict";

// Each [data-announce] element names an export and its status ("orders: running").
function announcements(root) {
  return new Set([...root.querySelectorAll("[data-announce]")].map((e) => e.dataset.announce));
}

// Live updates: while a [data-live][data-unsettled] region is on the page, fetch the page
// again every second, swap in each [data-live] region that changed, and announce new
// statuses to screen readers through one polite live region that stays in place.
function refreshLive() {
  const url = document.body.dataset.liveUrl;
  if (!url || !document.querySelector("[data-live][data-unsettled]")) return;
  fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
    .then((response) => {
      if (response.redirected) return "stop";  // signed out: the page stays as it was
      return response.ok ? response.text() : null;
    })
    .then((html) => {
      if (html === "stop") return;
      if (html !== null) {
        const before = announcements(document);
        const fresh = new DOMParser().parseFromString(html, "text/html");
        for (const region of fresh.querySelectorAll("[data-live][id]")) {
          const current = document.getElementById(region.id);
          if (current && current.outerHTML !== region.outerHTML) current.replaceWith(region);
        }
        const changed = [...announcements(document)].filter((text) => !before.has(text));
        const announcer = document.getElementById("announcer");
        if (announcer && changed.length) announcer.textContent = changed.join(". ");
      }
      setTimeout(refreshLive, 1000);
    })
    .catch(() => setTimeout(refreshLive, 5000));
}

function enableCopyButtons() {
  for (const button of document.querySelectorAll("button[data-copy]")) {
    button.hidden = false;
    button.addEventListener("click", () => {
      const input = document.getElementById(button.dataset.copy);
      const status = button.parentElement.querySelector(".copied");
      input.select();
      const done = () => { if (status) status.textContent = "Copied."; };
      if (navigator.clipboard) navigator.clipboard.writeText(input.value).then(done, () => {});
      else if (document.execCommand("copy")) done();
    });
  }
}

document.addEventListener("DOMContentLoaded", () => {
  enableCopyButtons();
  setTimeout(refreshLive, 1000);
});
