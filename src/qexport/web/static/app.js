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
          if (current && current.outerHTML !== region.outerHTML) {
            const scrolled = sidewaysOffsets(current);
            current.replaceWith(region);
            restoreSideways(region, scrolled);
          }
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

// A message that a page loads with (a new public link) is read out: a live region announces
// changes, not what it held on load, so its words are put into the announcer once loaded.
function announceOnLoad() {
  const message = document.querySelector("[data-announce-now]");
  const announcer = document.getElementById("announcer");
  if (message && announcer) setTimeout(() => { announcer.textContent = message.textContent; }, 300);
}

document.addEventListener("DOMContentLoaded", () => {
  enableCopyButtons();
  enableConfirmations();
  announceOnLoad();
  setTimeout(refreshLive, 1000);
});

// A table scrolled sideways in its .table-scroll box (a narrow screen) stays where it was when
// a live update swaps its region for a fresh copy.
function sidewaysOffsets(region) {
  return [...region.querySelectorAll(".table-scroll")].map((box) => box.scrollLeft);
}

function restoreSideways(region, offsets) {
  [...region.querySelectorAll(".table-scroll")].forEach((box, i) => {
    if (offsets[i]) box.scrollLeft = offsets[i];
  });
}
