/* The book's own behaviour on every page (html_js_files in _config.yml).
 *
 * Figures open at full size: every image of a figure in the article (a plot a cell drew, an
 * image in a {figure}) becomes a link to its own file, so a click (or a tap on a phone) opens
 * the figure alone, where the browser can zoom it. Explorer frames are left alone: they are
 * switched by their controls and have no file of their own.
 */
(function () {
  function linkFigures() {
    var article = document.querySelector("article.bd-article") || document.body;
    var images = article.querySelectorAll("figure img, div.cell_output img");
    for (var i = 0; i < images.length; i++) {
      var img = images[i];
      var src = img.getAttribute("src") || "";
      if (img.closest("a[href]") || img.closest(".nmst-explorer") || src.indexOf("data:") === 0) { continue; }
      var link = document.createElement("a");
      link.href = src;
      link.className = "nmst-figure-link";
      link.title = "Open the figure at full size";
      img.parentNode.insertBefore(link, img);
      link.appendChild(img);
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", linkFigures);
  } else {
    linkFigures();
  }
})();

/* Search snippets that read like the book.
 *
 * Sphinx's search page (searchtools.js) cuts each result's snippet from the text of the page's
 * [role=main] element. In this theme that element also holds the in-page contents, the
 * prev/next links and the footer, and a formula's text is its TeX source (\(\epsilon\)). So a
 * snippet could show "On this page" or "\(r_{\mathrm{nt}}(L)\)". Here the snippet comes from the
 * article alone, and each formula is shown as plain text a reader can read (Greek letters and
 * relations as their symbols, \frac{a}{b} as a/b, command names dropped). Only the search page
 * defines Search; on every other page this does nothing.
 */
(function () {
  var SYMBOLS = {
    alpha: "\u03b1", beta: "\u03b2", gamma: "\u03b3", delta: "\u03b4", epsilon: "\u03b5",
    varepsilon: "\u03b5", zeta: "\u03b6", eta: "\u03b7", theta: "\u03b8", kappa: "\u03ba",
    lambda: "\u03bb", mu: "\u03bc", nu: "\u03bd", xi: "\u03be", pi: "\u03c0", rho: "\u03c1",
    sigma: "\u03c3", tau: "\u03c4", phi: "\u03c6", varphi: "\u03c6", chi: "\u03c7", psi: "\u03c8",
    omega: "\u03c9", Gamma: "\u0393", Delta: "\u0394", Theta: "\u0398", Lambda: "\u039b",
    Pi: "\u03a0", Sigma: "\u03a3", Phi: "\u03a6", Psi: "\u03a8", Omega: "\u03a9",
    le: "\u2264", leq: "\u2264", ge: "\u2265", geq: "\u2265", ne: "\u2260", neq: "\u2260",
    approx: "\u2248", to: "\u2192", rightarrow: "\u2192", mapsto: "\u21a6", infty: "\u221e",
    in: "\u2208", notin: "\u2209", subset: "\u2282", subseteq: "\u2286", cup: "\u222a",
    cap: "\u2229", sum: "\u03a3", prod: "\u03a0", cdot: "\u00b7", times: "\u00d7",
    ldots: "\u2026", dots: "\u2026", cdots: "\u22ef", pm: "\u00b1", partial: "\u2202",
    nabla: "\u2207", forall: "\u2200", exists: "\u2203", lvert: "|", rvert: "|", vert: "|",
    mid: "|", lVert: "\u2016", rVert: "\u2016", langle: "\u27e8", rangle: "\u27e9",
    lfloor: "\u230a", rfloor: "\u230b", lceil: "\u2308", rceil: "\u2309", ell: "\u2113",
    emptyset: "\u2205", propto: "\u221d", sim: "\u223c", equiv: "\u2261", neg: "\u00ac",
    wedge: "\u2227", vee: "\u2228", top: "\u22a4"
  };
  var SPACES = /\\(?:,|;|:|!|quad|qquad|\s)/g;
  var FONTS_BARE = /\\(?:mathcal|mathbb|mathrm|mathbf|mathit|mathsf|boldsymbol|bm)\b\s*/g;
  var DROPPED = /\\(?:left|right|big|Big|bigg|Bigg|displaystyle|textstyle|limits|nolimits)\b/g;

  /* A formula's TeX source as plain text (see above); exported for the site tests. */
  function texToText(tex) {
    var s = tex.replace(/^\s*(?:\\\(|\\\[|\$\$?)/, "").replace(/(?:\\\)|\\\]|\$\$?)\s*$/, "");
    s = s.replace(/\\\{/g, "\u0001").replace(/\\\}/g, "\u0002");  /* literal braces survive */
    s = s.replace(SPACES, " ").replace(DROPPED, "");
    var group = function (x) { return /[\s+\-]/.test(x.trim()) ? "(" + x.trim() + ")" : x.trim(); };
    for (var i = 0; i < 3; i++) {  /* nested \frac{\frac{a}{b}}{c} */
      s = s.replace(/\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g, function (whole, a, b) {
        return "{" + group(a) + "/" + group(b) + "}";
      });
    }
    /* font and accent commands keep their argument, in braces so that a command before it
       (\lvert\mathcal{V}) still ends where it should */
    s = s.replace(/\\(?:mathcal|mathbb|mathrm|mathbf|mathit|mathsf|operatorname|text|textrm|textit|textbf|boldsymbol|bm|hat|bar|tilde|widehat|widetilde|overline|vec)\s*\{([^{}]*)\}/g, "{$1}");
    s = s.replace(FONTS_BARE, "");  /* \boldsymbol\theta, \mathcal V: the symbol alone */
    s = s.replace(/\\([A-Za-z]+)/g, function (whole, name) {
      return Object.prototype.hasOwnProperty.call(SYMBOLS, name) ? SYMBOLS[name] : name;
    });
    s = s.replace(/\\([%$&#_|])/g, "$1").replace(/[{}]/g, "");
    s = s.replace(/\u0001/g, "{").replace(/\u0002/g, "}");
    return s.replace(/\s+/g, " ").trim();
  }
  window.nmstTexToText = texToText;

  function articleText(htmlString, anchor) {
    var doc = new DOMParser().parseFromString(htmlString, "text/html");
    var drop = ".headerlink, script, style, .bd-sidebar-secondary, .bd-toc, .prev-next-area, " +
      "footer, .bd-footer-article, .bd-header-article, .cell_input, .nmst-explorer";
    doc.querySelectorAll(drop).forEach(function (el) { el.remove(); });
    doc.querySelectorAll(".math, mjx-container").forEach(function (el) {
      el.replaceWith(doc.createTextNode(" " + texToText(el.textContent) + " "));
    });
    var root = doc.querySelector("article.bd-article") || doc.querySelector('[role="main"]');
    if (!root) { return ""; }
    /* cells, items and paragraphs end with a space, so that a table's cells do not run together */
    root.querySelectorAll("td, th, li, p, dt, dd, h1, h2, h3, h4, tr, caption, figcaption").forEach(function (el) {
      el.append(" ");
    });
    var part = anchor ? root.querySelector(anchor) : null;
    return ((part || root).textContent || "").replace(/\s+/g, " ");
  }

  function patchSearch() {
    /* searchtools.js declares `const Search` at the top level: a global binding, not a window property */
    if (typeof Search === "undefined" || !Search.htmlToText) { return; }
    Search.htmlToText = articleText;
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", patchSearch);
  } else {
    patchSearch();
  }
})();
