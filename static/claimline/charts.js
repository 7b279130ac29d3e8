// Renders every <div data-plotly="id-of-json-script"> with Plotly; kept out of the HTML for the CSP.
function renderCharts(root) {
  if (!window.Plotly) return;
  root.querySelectorAll("[data-plotly]").forEach(function (el) {
    var source = document.getElementById(el.dataset.plotly);
    if (!source) return;
    var fig = JSON.parse(JSON.parse(source.textContent));
    window.Plotly.react(el, fig.data, fig.layout, {displaylogo: false, responsive: true});
    el.dataset.rendered = "true";
  });
}
document.addEventListener("DOMContentLoaded", function () { renderCharts(document); });
document.addEventListener("htmx:afterSwap", function (e) { renderCharts(e.target); });
