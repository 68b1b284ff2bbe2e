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

// The report form: a section's chart columns are for charts only, so they are hidden while
// its display is a table (unless something is typed in them, which the server then refuses).
function enableSectionRows() {
  for (const select of document.querySelectorAll("select[data-display]")) {
    const row = select.closest("fieldset");
    const columns = row && row.querySelector("[data-chart-columns]");
    if (!columns) continue;
    const sync = () => {
      const typed = [...columns.querySelectorAll("input")].some((input) => input.value.trim());
      columns.hidden = select.value === "table" && !typed;
    };
    select.addEventListener("change", sync);
    sync();
  }
}

function showTimetable(box, found) {
  box.replaceChildren();
  if (!found.words && !(found.runs || []).length) {
    box.hidden = true;
    return;
  }
  const words = document.createElement("p");
  const strong = document.createElement("strong");
  strong.textContent = found.words || "";
  words.append(strong);
  const lead = document.createElement("p");
  lead.textContent = `Next runs in ${found.zone}:`;
  const list = document.createElement("ul");
  for (const at of found.runs) {
    const item = document.createElement("li");
    item.textContent = at;
    list.append(item);
  }
  box.append(words, lead, list);
  box.hidden = false;
}

// The schedule form: the formats narrowed to what the chosen subject takes, the cron in words
// with its next runs as it is typed (GET /schedules/timetable), and the warning that email is
// not configured shown as soon as an email address is typed. Without this script the same
// appears once the form is sent ("Check" or "Show its formats and parameters").
function enableScheduleForm() {
  const form = document.getElementById("schedule-form");
  if (!form) return;
  const subject = form.querySelector("#subject");
  const format = form.querySelector("#format");
  if (subject && format) {
    const narrow = () => {
      const chosen = subject.selectedOptions[0];
      const kind = chosen ? chosen.dataset.kind : undefined;
      for (const option of format.options) {
        const fits = !kind || (option.dataset.for || "").split(" ").includes(kind);
        option.hidden = !fits;
        option.disabled = !fits;
      }
      const selected = format.selectedOptions[0];
      if (!selected || selected.disabled) {
        const first = [...format.options].find((option) => !option.disabled);
        if (first) format.value = first.value;
      }
    };
    subject.addEventListener("change", narrow);
    narrow();
  }
  const cron = form.querySelector("#cron");
  const zone = form.querySelector("#timezone");
  const box = document.getElementById("timetable");
  if (cron && zone && box) {
    let timer;
    const refresh = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const query = new URLSearchParams({ cron: cron.value, timezone: zone.value });
        fetch(`/schedules/timetable?${query}`, {
          credentials: "same-origin",
          headers: { Accept: "application/json" },
        })
          .then((response) => (response.ok && !response.redirected ? response.json() : null))
          .then((found) => { if (found) showTimetable(box, found); })
          .catch(() => {});
      }, 300);
    };
    cron.addEventListener("input", refresh);
    zone.addEventListener("input", refresh);
  }
  const warning = document.getElementById("no-smtp");
  const recipients = form.querySelector("#recipients");
  if (warning && recipients) {
    const mails = () => recipients.value.split("\n").some((line) => {
      const text = line.trim();
      return text.includes("@") && !text.includes("://");
    });
    recipients.addEventListener("input", () => { warning.hidden = !mails(); });
  }
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
  enableSectionRows();
  enableScheduleForm();
  announceOnLoad();
  const delay = liveDelay();
  if (delay) setTimeout(refreshLive, delay);
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
