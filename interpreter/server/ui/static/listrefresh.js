// The runs list, refreshed: with "Refresh automatically" ticked (remembered in this browser), the page's first
// page of runs, its counts and its pager are fetched again every few seconds (data-refresh) with the same filters.
// Progressive enhancement: without this script the list is complete as served, and reloading it refreshes it.
(function () {
  "use strict";
  var page = document.getElementById("runs-page");
  if (!page || !window.fetch || !window.DOMParser) { return; }
  var every = Math.max(2, Math.min(300, parseInt(page.dataset.refresh || "15", 10) || 15)) * 1000;
  var box = document.getElementById("auto-refresh");
  var holder = document.getElementById("auto-refresh-holder");
  var note = document.getElementById("refresh-note");
  if (!box || !holder) { return; }
  holder.hidden = false;
  var KEY = "sealflow.runs.autorefresh";
  try { box.checked = window.localStorage.getItem(KEY) === "1"; } catch (err) { /* storage refused: off */ }
  var timer = null;
  function swap(doc, id) {
    var fresh = doc.getElementById(id), old = document.getElementById(id);
    if (fresh && old) { old.replaceWith(fresh); }
    else if (fresh && !old) { page.appendChild(fresh); }
    else if (!fresh && old) { old.remove(); }
  }
  function refresh() {
    window.fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        ["runs-body", "counts", "no-runs", "pager"].forEach(function (id) { swap(doc, id); });
        if (note) { note.textContent = "Refreshed at " + new Date().toLocaleTimeString() + "."; }
      })
      .catch(function () { if (note) { note.textContent = "Could not refresh; reload the page."; } });
  }
  function arm() {
    if (timer) { window.clearInterval(timer); timer = null; }
    if (box.checked) { timer = window.setInterval(refresh, every); }
  }
  box.addEventListener("change", function () {
    try { window.localStorage.setItem(KEY, box.checked ? "1" : "0"); } catch (err) { /* not remembered */ }
    arm();
  });
  arm();
})();
