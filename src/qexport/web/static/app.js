// Progressive enhancement only: every page works without this file.
"use strict";

// Live updates: while a [data-live][data-unsettled] region is on the page, fetch the page
// again every second and swap in each [data-live] region that changed.
function refreshLive() {
  const url = document.body.dataset.liveUrl;
  if (!url || !document.querySelector("[data-live][data-unsettled]")) return;
  fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
    .then((response) => (response.ok ? response.text() : null))
    .then((html) => {
      if (html === null) return;
      const fresh = new DOMParser().parseFromString(html, "text/html");
      for (const region of fresh.querySelectorAll("[data-live][id]")) {
        const current = document.getElementById(region.id);
        if (current && current.outerHTML !== region.outerHTML) current.replaceWith(region);
      }
    })
    .catch(() => {})
    .finally(() => setTimeout(refreshLive, 1000));
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
