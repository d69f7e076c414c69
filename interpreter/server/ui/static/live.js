// The run page, live: follows the run's feed (Server-Sent Events) and updates the states the page shows.
// Progressive enhancement: without this script the page is complete as served; reload it for what is new.
(function () {
  "use strict";
  var main = document.getElementById("run");
  if (!main || !main.dataset.live || !window.EventSource) { return; }
  var note = document.getElementById("live-note");
  var source = new EventSource(main.dataset.live);
  function badge(el, state) {
    if (!el) { return; }
    var rect = el.tagName.toLowerCase() === "rect";  // (an SVG element's className is not a string)
    var classes = (rect ? el.getAttribute("class") : el.className).replace(/\bstate-\S+/g, "") + " state-" + state;
    if (rect) { el.setAttribute("class", classes); } else { el.className = classes; el.textContent = state; }
  }
  function onEvent(e) {
    var item;
    try { item = JSON.parse(e.data); } catch (err) { return; }
    if (!item || !item.to) { return; }
    if (item.step) {
      var row = document.querySelector('#steps tr[data-step="' + CSS.escape(item.step) + '"] .badge');
      badge(row, item.to);
      var node = document.querySelector('#graph a[data-step="' + CSS.escape(item.step) + '"]');
      if (node) {
        badge(node.querySelector("rect"), item.to);
        var detail = node.querySelector(".node-detail");
        if (detail) { detail.textContent = detail.textContent.replace(/^\s*[a-z_]+/, " " + item.to); }
      }
    } else {
      badge(document.getElementById("state"), item.to);
    }
    if (note) { note.textContent = "Updated live: " + (item.step || "the run") + " is " + item.to + "."; }
  }
  source.onmessage = onEvent;  // (the page's feed sends each audit event unnamed; "end" once the run is final)
  source.addEventListener("end", function () {
    source.close();
    window.location.reload();
  });
})();
