// Progressive enhancement only: every page works without this file.
"use strict";

// Each [data-announce] element names an export and its status ("orders: running").
function announcements(root) {
  return new Set([...root.querySelectorAll("[data-announce]")].map((e) => e.dataset.announce));
}

// Live updates: while a [data-live][data-unsettled] region is on the page, fetch the page
// again every second, swap in each [data-live] region that changed, and announce new
// statuses to screen readers through one polite live region that stays in place. A
// [data-live][data-watch] region (the newest page of a list) is fetched every few seconds even
// when nothing in it is unsettled, so that what was started elsewhere appears.
function liveDelay() {
  if (document.querySelector("[data-live][data-unsettled]")) return 1000;
  return document.querySelector("[data-live][data-watch]") ? 3000 : 0;
}

function refreshLive() {
  const url = document.body.dataset.liveUrl;
  if (!url || !liveDelay()) return;
  if (document.querySelector("dialog[open]")) {  // nothing moves under an open question
    setTimeout(refreshLive, 1000);
    return;
  }
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
      const delay = liveDelay();
      if (delay) setTimeout(refreshLive, delay);
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

// A form marked data-confirm asks in the page's dialog first; "yes" sends it confirmed. Without
// this script the server asks on a page of its own.
function enableConfirmations() {
  const dialog = document.getElementById("confirm");
  if (!dialog || typeof dialog.showModal !== "function") return;
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    const confirmed = form.querySelector("input[name=confirmed]");
    if (!confirmed || confirmed.value === "yes") return;
    event.preventDefault();
    document.getElementById("confirm-title").textContent = form.dataset.confirm;
    document.getElementById("confirm-detail").textContent = form.dataset.confirmDetail || "";
    document.getElementById("confirm-yes").textContent = form.dataset.confirmYes || "Yes";
    dialog.returnValue = "";
    const action = form.getAttribute("action");
    dialog.addEventListener("close", () => {
      if (dialog.returnValue !== "yes") return;
      // A live update may have swapped the form for a fresh copy meanwhile: send that one.
      const current = form.isConnected ? form
        : document.querySelector(`form[data-confirm][action="${CSS.escape(action)}"]`);
      if (!current) return;
      current.querySelector("input[name=confirmed]").value = "yes";
      current.submit();
    }, { once: true });
    dialog.showModal();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  enableCopyButtons();
  enableConfirmations();
  const delay = liveDelay();
  if (delay) setTimeout(refreshLive, delay);
});
