// The HTML report's script (embedded in the page; see html/mod.rs): a hover read-out over
// the chart, legend highlighting and sortable tables. The page is complete without it.
// It reads the chart's data from the JSON in `#tl-data` (html/mod.rs, `chart_data`) and
// sets `data-ready="1"` on the document when it has run.
(function () {
  "use strict";

  var data = JSON.parse(document.getElementById("tl-data").textContent);
  var svg = document.getElementById("timeline");
  var tip = document.getElementById("tip");
  var units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

  // Bytes with binary units, as the report writes them: `512 B`, `1.2 MiB`.
  function fmt(b) {
    var u = 0;
    while (Math.abs(b) >= 1024 && u < units.length - 1) {
      b /= 1024;
      u++;
    }
    return u ? b.toFixed(1) + " " + units[u] : Math.round(b) + " B";
  }

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }

  // The index of the time in the sorted `ts` nearest to `t` (-1 when `ts` is empty).
  function nearest(ts, t) {
    var lo = 0;
    var hi = ts.length - 1;
    if (hi < 0) return -1;
    while (lo < hi) {
      var m = (lo + hi) >> 1;
      if (ts[m] < t) lo = m + 1;
      else hi = m;
    }
    if (lo > 0 && t - ts[lo - 1] < ts[lo] - t) lo--;
    return lo;
  }

  if (svg) {
    var cross = document.getElementById("crosshair");
    var left = +svg.dataset.left;
    var right = +svg.dataset.right;
    var span = (data.t1 - data.t0) / 1e6;

    // The read-out of the iteration end nearest to the pointer, and the pools there.
    svg.addEventListener("mousemove", function (e) {
      var pt = svg.createSVGPoint();
      pt.x = e.clientX;
      pt.y = e.clientY;
      var p = pt.matrixTransform(svg.getScreenCTM().inverse());
      if (p.x < left || p.x > right) {
        hide();
        return;
      }
      var t = (p.x - left) / (right - left) * span;
      var j = nearest(data.t, t);
      var h = "";
      if (j >= 0) {
        var x = left + data.t[j] / span * (right - left);
        cross.setAttribute("x1", x);
        cross.setAttribute("x2", x);
        cross.setAttribute("visibility", "visible");
        h += "<b>" + (data.t[j] / 1000).toFixed(3) + " s</b> &middot; " +
          esc(data.loops[data.loop[j]] || "?") + " iteration " + data.it[j] +
          (data.n[j] > 1 ? " (fullest of " + data.n[j] + ")" : "");
        h += "<div class=row>live tracked<span class=v>" + fmt(data.live[j]) + "</span></div>";
        for (var i = data.series.length - 1; i >= 0; i--) {
          var s = data.series[i];
          if (!s.v[j]) continue;
          h += "<div class=row><span class=swatch style='background:" + s.color + "'></span>" +
            esc(s.name) + "<span class=v>" + fmt(s.v[j]) + "</span></div>";
        }
      }
      data.pools.forEach(function (l) {
        var k = nearest(l.t, t);
        if (k >= 0) {
          h += "<div class=row>" + esc(l.name) + "<span class=v>" + fmt(l.v[k]) + "</span></div>";
        }
      });
      tip.innerHTML = h;
      tip.hidden = false;
      var r = tip.getBoundingClientRect();
      tip.style.left = Math.min(e.clientX + 14, innerWidth - r.width - 8) + "px";
      tip.style.top = Math.min(e.clientY + 14, innerHeight - r.height - 8) + "px";
    });

    function hide() {
      tip.hidden = true;
      cross.setAttribute("visibility", "hidden");
    }

    svg.addEventListener("mouseleave", hide);

    // Hovering a legend entry dims the other series.
    var areas = svg.querySelectorAll("path.area");
    document.querySelectorAll("#legend li[data-series]").forEach(function (li) {
      li.addEventListener("mouseenter", function () {
        areas.forEach(function (a) {
          if (a.dataset.series !== li.dataset.series) a.classList.add("dim");
        });
      });
      li.addEventListener("mouseleave", function () {
        areas.forEach(function (a) {
          a.classList.remove("dim");
        });
      });
    });
  }

  // A click on a column's header sorts the table by it, by `data-v` where the cells
  // have one (numbers), by text otherwise; a second click reverses the order.
  document.querySelectorAll("table.sortable").forEach(function (tb) {
    tb.querySelectorAll("th").forEach(function (th, c) {
      var asc = false;
      th.addEventListener("click", function () {
        asc = !asc;
        var body = tb.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[c];
          var y = b.cells[c];
          var vx = x.dataset.v;
          var vy = y.dataset.v;
          var d = (vx !== undefined && vy !== undefined)
            ? (+vx) - (+vy)
            : x.textContent.localeCompare(y.textContent);
          return asc ? d : -d;
        });
        rows.forEach(function (r) {
          body.appendChild(r);
        });
      });
    });
  });

  document.documentElement.dataset.ready = "1";
})();
