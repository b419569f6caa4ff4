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
