// Every page (mkdocs.yml extra_javascript). Whatever scrolls sideways can be reached and scrolled
// by keyboard (axe-core's scrollable-region-focusable; Material does this for its code blocks):
// wide tables, display math, notebook code and text outputs. A wide table is also named, and a
// line above it says it scrolls (book.css), in the page's language (<meta name="book-scroll-cue">,
// from mkdocs.yml's extra.strings.scroll_cue).
const SCROLLERS = [".md-typeset__scrollwrap", ".math-display", ".jupyter-wrapper .highlight-ipynb",
  ".jupyter-wrapper .jp-OutputArea-output pre", ".jupyter-wrapper .highlight > pre"];

function markScrollers() {
  const cue = document.querySelector('meta[name="book-scroll-cue"]')?.content || "";
  for (const el of document.querySelectorAll(SCROLLERS.join(", "))) {
    const wide = el.scrollWidth > el.clientWidth + 1;
    const table = el.classList.contains("md-typeset__scrollwrap");
    el.toggleAttribute("data-scrolls", wide);
    if (wide) el.setAttribute("tabindex", "0");
    else el.removeAttribute("tabindex");
    if (table && wide) {
      el.setAttribute("role", "region");
      el.setAttribute("aria-label", cue);
      el.dataset.scrollCue = cue;
    } else if (table) {
      el.removeAttribute("role");
      el.removeAttribute("aria-label");
    }
  }
}

let resizing;
window.addEventListener("load", markScrollers);
window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(markScrollers, 200);
});
