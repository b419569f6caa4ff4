/* Loaded between RequireJS and the ipywidgets HTML manager on pages that embed widgets
 * (nb_ipywidgets_js in _config.yml), so static widget views work offline and from file://.
 *
 * 1. RequireJS resolves the HTML manager's modules, and webpack its fonts, relative to the
 *    page; point them at the copy served from _static/html-manager/ instead.
 * 2. The HTML manager typesets widget labels with the MathJax 2 call
 *    MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the book loads MathJax 3, which
 *    has no Hub. Provide that one call on top of MathJax 3's typesetPromise.
 */
(function () {
  var root = document.documentElement.getAttribute("data-content_root") || "./";
  if (window.require && window.require.config) {
    window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": root + "_static/html-manager" } });
  }

  var waiting = [];
  function typeset(element) {
    var mj = window.MathJax;
    if (mj && mj.typesetPromise) {
      mj.typesetPromise([element]).catch(function () {});
    } else {
      waiting.push(element);
    }
  }
  var hub = {
    Queue: function () {
      for (var i = 0; i < arguments.length; i++) {
        var job = arguments[i];
        if (job && job[0] === "Typeset" && job[2]) { typeset(job[2]); }
      }
    }
  };
  var config = (window.MathJax = window.MathJax || {});
  if (config.typesetPromise) {  // MathJax 3 already running
    config.Hub = config.Hub || hub;
    return;
  }
  config.Hub = hub;  // until MathJax 3 replaces the configuration object
  var startup = (config.startup = config.startup || {});
  var ready = startup.ready;
  startup.ready = function () {
    if (ready) { ready(); } else { window.MathJax.startup.defaultReady(); }
    window.MathJax.Hub = hub;
    waiting.splice(0).forEach(typeset);
  };
})();
