// One step at a time: buttons, the index, the arrow keys and the address's #step-N.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  var steps = Array.prototype.slice.call(document.querySelectorAll("section.step"));
  var links = Array.prototype.slice.call(document.querySelectorAll(".index a"));
  var position = document.getElementById("position");
  var aside = document.querySelector("aside");
  var current = 0;

  function show(index) {
    current = Math.max(0, Math.min(steps.length - 1, index));
    steps.forEach(function (step, i) { step.classList.toggle("current", i === current); });
    links.forEach(function (link, i) { link.classList.toggle("current", i === current); });
    position.textContent = "step " + steps[current].dataset.step + " of " + (steps.length - 1);
    document.getElementById("first").disabled = current === 0;
    document.getElementById("prev").disabled = current === 0;
    document.getElementById("next").disabled = current === steps.length - 1;
    document.getElementById("last").disabled = current === steps.length - 1;
    reveal(links[current]);
    if (history.replaceState) { history.replaceState(null, "", "#step-" + current); }
    window.scrollTo(0, 0);
  }

  function reveal(link) {  // scroll the index only, not the page
    if (!link || !aside) { return; }
    var top = link.offsetTop;
    if (top < aside.scrollTop || top + link.offsetHeight > aside.scrollTop + aside.clientHeight) {
      aside.scrollTop = top - aside.clientHeight / 2;
    }
  }

  function byId(id, index) {
    document.getElementById(id).addEventListener("click", function () { show(index()); });
  }
  byId("first", function () { return 0; });
  byId("prev", function () { return current - 1; });
  byId("next", function () { return current + 1; });
  byId("last", function () { return steps.length - 1; });
  var finding = document.getElementById("to-finding");
  if (finding) {
    finding.addEventListener("click", function () { show(Number(finding.dataset.step)); });
  }
  links.forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      show(Number(link.dataset.step));
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    var moves = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
    if (event.key in moves) { show(current + moves[event.key]); event.preventDefault(); }
    if (event.key === "Home") { show(0); event.preventDefault(); }
    if (event.key === "End") { show(steps.length - 1); event.preventDefault(); }
  });
  // the address's #step-N, else the divergence (where a reader of a failing check starts), else 0
  var start = /^#step-(\d+)$/.exec(location.hash);
  show(start ? Number(start[1]) : (finding ? Number(finding.dataset.step) : 0));
  // the browser jumps to the #step-N anchor after the page loads: the header stays in view
  window.addEventListener("load", function () { setTimeout(function () { window.scrollTo(0, 0); }, 0); });
})();
