// Counts MEMORY.md's tokens as it is typed (with the file's own characters per token) against its share.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const editor = document.getElementById("long-term");
  const fit = document.getElementById("long-term-fit");
  if (!editor || !fit) return;
  const cap = Number(editor.dataset.cap);
  const perToken = Number(editor.dataset.charsPerToken) || 4;
  const fill = fit.nextElementSibling ? fit.nextElementSibling.querySelector(".fill") : null;
  editor.addEventListener("input", () => {
    const tokens = Math.ceil(editor.value.length / perToken);
    const share = tokens / Math.max(cap, 1);
    fit.textContent = `~${tokens.toLocaleString()} tokens of its ${cap.toLocaleString()}-token share (${Math.round(100 * share)}%): ` +
      (share <= 1 ? "all of it goes with every message" : "over its share: its beginning goes with every message, the parts a message is about come with it");
    if (fill) fill.setAttribute("width", String(Math.round(Math.min(share, 1) * 200)));
  });
});
