/* Searchable, sortable tables for the hosts page (tools/hostspage.py writes the markup).
 *
 * Plain JavaScript, no library and no network: the site works offline. Every
 * div.pb-table > table on a page gets
 *   - a search box: a row stays when every word typed occurs in it (any column);
 *   - a drop-down per header with the class pb-facet (its values and their counts);
 *   - sorting on a click on a header: pb-num columns as numbers, others in natural
 *     order (6.2 before 6.18), empty cells last; a second click reverses;
 *   - a "show" button in place of each long list (.pb-more).
 * A cell's span.pb-key is its value for sorting and facets; a cell's class pb-rank-N sorts
 * it by N. Without JavaScript the tables are plain tables.
 */
(function () {
  "use strict";

  var collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });

  function cellKey(cell) {
    if (!cell) { return ""; }
    var rank = /(?:^|\s)pb-rank-(\d+)(?:\s|$)/.exec(cell.className);
    if (rank) { return rank[1]; }
    var k = cell.querySelector(".pb-key");
    return (k ? k.textContent : cell.textContent).replace(/\s+/g, " ").trim();
  }

  function asNumber(text) {
    var v = parseFloat(String(text).replace(/[,\s]/g, ""));
    return isNaN(v) ? null : v;
  }

  function blank(text) { return text === "" || text === "—"; }

  function compare(a, b, numeric) {
    if (numeric) {
      var x = asNumber(a), y = asNumber(b);
      if (x === null || y === null) { return (x === null) - (y === null); }
      return x - y;
    }
    if (blank(a) || blank(b)) { return blank(a) - blank(b); }
    return collator.compare(a, b);
  }

  function fold(box) {
    box.querySelectorAll(".pb-more").forEach(function (list) {
      var n = list.querySelectorAll("a, code").length;
      var btn = document.createElement("button");
      btn.type = "button";
      btn.className = "pb-more-toggle";
      btn.textContent = "show " + n;
      btn.setAttribute("aria-expanded", "false");
      list.hidden = true;
      btn.addEventListener("click", function () {
        list.hidden = !list.hidden;
        btn.textContent = (list.hidden ? "show " : "hide ") + n;
        btn.setAttribute("aria-expanded", String(!list.hidden));
      });
      list.parentNode.insertBefore(btn, list);
    });
  }

  function init(box) {
    var table = box.querySelector("table");
    if (!table || !table.tHead || !table.tBodies.length || box.classList.contains("pb-ready")) { return; }
    box.classList.add("pb-ready");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    var texts = rows.map(function (r) { return r.textContent.replace(/\s+/g, " ").toLowerCase(); });
    heads.forEach(function (th, i) {
      if (th.classList.contains("pb-num")) {
        rows.forEach(function (r) { if (r.cells[i]) { r.cells[i].classList.add("pb-num"); } });
      }
    });
    fold(box);

    var bar = document.createElement("div");
    bar.className = "pb-controls";
    var search = document.createElement("input");
    search.type = "search";
    search.className = "pb-search";
    search.placeholder = "Search any column";
    search.setAttribute("aria-label", "Search the table: rows holding every word typed");
    bar.appendChild(search);

    var facets = [];
    heads.forEach(function (th, i) {
      if (!th.classList.contains("pb-facet")) { return; }
      var counts = new Map();
      rows.forEach(function (r) { var v = cellKey(r.cells[i]); counts.set(v, (counts.get(v) || 0) + 1); });
      if (counts.size < 2) { return; }
      var label = document.createElement("label");
      label.className = "pb-facet-label";
      label.appendChild(document.createTextNode(th.textContent.trim() + " "));
      var sel = document.createElement("select");
      sel.className = "pb-facet-select";
      sel.add(new Option("all", ""));
      Array.from(counts.keys()).sort(collator.compare).forEach(function (v) {
        sel.add(new Option(v + " (" + counts.get(v) + ")", v));
      });
      label.appendChild(sel);
      bar.appendChild(label);
      facets.push([i, sel]);
    });

    var count = document.createElement("span");
    count.className = "pb-count";
    count.setAttribute("aria-live", "polite");
    bar.appendChild(count);
    box.insertBefore(bar, box.firstChild);

    function filter() {
      var words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      rows.forEach(function (r, n) {
        var ok = words.every(function (w) { return texts[n].indexOf(w) >= 0; }) &&
          facets.every(function (f) { return !f[1].value || cellKey(r.cells[f[0]]) === f[1].value; });
        r.hidden = !ok;
        if (ok) { shown += 1; }
      });
      count.textContent = shown + " of " + rows.length + " rows";
    }
    search.addEventListener("input", filter);
    facets.forEach(function (f) { f[1].addEventListener("change", filter); });
    filter();

    heads.forEach(function (th, i) {
      var btn = document.createElement("button");
      btn.type = "button";
      btn.className = "pb-sort";
      while (th.firstChild) { btn.appendChild(th.firstChild); }
      th.appendChild(btn);
      th.setAttribute("aria-sort", "none");
      btn.addEventListener("click", function () {
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        heads.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
        var numeric = th.classList.contains("pb-num");
        var keyed = rows.map(function (r, n) { return [cellKey(r.cells[i]), n, r]; });
        keyed.sort(function (a, b) {
          var aBlank = numeric ? asNumber(a[0]) === null : blank(a[0]);
          var bBlank = numeric ? asNumber(b[0]) === null : blank(b[0]);
          if (aBlank !== bBlank) { return aBlank ? 1 : -1; }   // empty cells last, either way
          return dir * compare(a[0], b[0], numeric) || a[1] - b[1];
        });
        var frag = document.createDocumentFragment();
        keyed.forEach(function (k) { frag.appendChild(k[2]); });
        body.appendChild(frag);
      });
    });
  }

  function start() { document.querySelectorAll("div.pb-table").forEach(init); }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
