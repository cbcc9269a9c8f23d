// The knowledge graph drawn in SVG with a small force layout: search, zoom (buttons, wheel, pinch-free
// drag to pan) and a selected node's descriptions and sources in the side panel.
"use strict";
const SVG = "http://www.w3.org/2000/svg";

function el(name, attrs) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

function layout(nodes, edges, width, height) {
  nodes.forEach((n, i) => {
    const angle = (2 * Math.PI * i) / Math.max(nodes.length, 1);
    n.x = width / 2 + (width / 3) * Math.cos(angle);
    n.y = height / 2 + (height / 3) * Math.sin(angle);
    n.vx = 0; n.vy = 0;
  });
  const index = new Map(nodes.map((n) => [n.id, n]));
  const links = edges.map((e) => [index.get(e.source), index.get(e.target)]).filter(([a, b]) => a && b);
  const k = Math.sqrt((width * height) / Math.max(nodes.length, 1)) * 0.6;
  for (let step = 0; step < 200; step++) {
    const heat = 1 - step / 200;
    for (let i = 0; i < nodes.length; i++) {
      for (let j = i + 1; j < nodes.length; j++) {
        const a = nodes[i], b = nodes[j];
        let dx = a.x - b.x, dy = a.y - b.y;
        const d2 = Math.max(dx * dx + dy * dy, 0.01);
        const force = (k * k) / d2;
        dx *= force; dy *= force;
        a.vx += dx; a.vy += dy; b.vx -= dx; b.vy -= dy;
      }
    }
    for (const [a, b] of links) {
      const dx = b.x - a.x, dy = b.y - a.y;
      const d = Math.max(Math.sqrt(dx * dx + dy * dy), 0.01);
      const pull = (d * d) / k / d;
      a.vx += dx * pull; a.vy += dy * pull; b.vx -= dx * pull; b.vy -= dy * pull;
    }
    for (const n of nodes) {
      n.vx += (width / 2 - n.x) * 0.01; n.vy += (height / 2 - n.y) * 0.01;
      const speed = Math.sqrt(n.vx * n.vx + n.vy * n.vy) || 1;
      const limit = Math.min(speed, 20 * heat + 1);
      n.x += (n.vx / speed) * limit; n.y += (n.vy / speed) * limit;
      n.vx *= 0.5; n.vy *= 0.5;
    }
  }
  return links;
}

function show(panel, node, edges) {
  panel.replaceChildren();
  const title = document.createElement("h3");
  title.textContent = node.id + (node.type ? ` (${node.type})` : "");
  panel.append(title);
  for (const text of node.descriptions) {
    const p = document.createElement("p");
    p.className = "description";
    p.textContent = text;
    panel.append(p);
  }
  const related = edges.filter((e) => e.source === node.id || e.target === node.id);
  if (related.length) {
    const h = document.createElement("h4"); h.textContent = "Relations"; panel.append(h);
    const list = document.createElement("ul");
    for (const e of related) {
      const li = document.createElement("li");
      li.textContent = `${e.source} — ${e.target}: ${e.description}`;
      list.append(li);
    }
    panel.append(list);
  }
  if (node.sources.length) {
    const h = document.createElement("h4"); h.textContent = "Sources"; panel.append(h);
    for (const source of node.sources) {
      const pre = document.createElement("pre"); pre.className = "source"; pre.textContent = source; panel.append(pre);
    }
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  const svg = document.getElementById("graph");
  const panel = document.getElementById("graph-node");
  if (!svg || !panel) return;
  const response = await fetch("graph.json", { credentials: "same-origin" });
  const graph = await response.json().catch(() => ({}));
  const width = 800, height = 600;
  let view = { x: 0, y: 0, w: width, h: height };
  const apply = () => svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
  apply();
  if (!response.ok || !Array.isArray(graph.nodes)) {
    panel.textContent = graph.error || `The knowledge graph could not be read (HTTP ${response.status}).`;
    panel.setAttribute("role", "alert");
    return;
  }
  if (!graph.nodes.length) {
    panel.textContent = "The graph is empty so far: it grows as conversations and documents are indexed.";
    return;
  }
  if (graph.total > graph.nodes.length) {
    panel.querySelector("p").textContent =
      `The ${graph.nodes.length} most connected of ${graph.total} entities are drawn. ` +
      "Select a node to see its descriptions and sources.";
  }
  const links = layout(graph.nodes, graph.edges, width, height);
  // The view fits the drawing, with room for the labels.
  const xs = graph.nodes.map((n) => n.x), ys = graph.nodes.map((n) => n.y);
  const margin = 60;
  const left = Math.min(...xs) - margin, top = Math.min(...ys) - margin;
  const spanX = Math.max(...xs) + margin * 2 - left, spanY = Math.max(...ys) + margin - top;
  const scale = Math.max(spanX / width, spanY / height);
  view = { w: width * scale, h: height * scale, x: left + (spanX - width * scale) / 2, y: top + (spanY - height * scale) / 2 };
  apply();
  const edgesLayer = el("g", {}), nodesLayer = el("g", {});
  svg.append(edgesLayer, nodesLayer);
  for (const [a, b] of links) edgesLayer.append(el("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y }));
  const circles = new Map();
  for (const node of graph.nodes) {
    const circle = el("circle", { cx: node.x, cy: node.y, r: 7, "data-id": node.id, tabindex: 0 });
    const label = el("text", { x: node.x + 9, y: node.y + 3 });
    label.textContent = node.id;
    const select = () => {
      circles.forEach((c) => c.classList.remove("selected"));
      circle.classList.add("selected");
      show(panel, node, graph.edges);
    };
    circle.addEventListener("click", select);
    circle.addEventListener("keydown", (event) => { if (event.key === "Enter") select(); });
    circles.set(node.id, circle);
    nodesLayer.append(circle, label);
  }
  const zoom = (factor) => {
    const cx = view.x + view.w / 2, cy = view.y + view.h / 2;
    view = { w: view.w * factor, h: view.h * factor, x: cx - (view.w * factor) / 2, y: cy - (view.h * factor) / 2 };
    apply();
  };
  document.getElementById("zoom-in").addEventListener("click", () => zoom(0.8));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(1.25));
  svg.addEventListener("wheel", (event) => { event.preventDefault(); zoom(event.deltaY < 0 ? 0.9 : 1.1); }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", (event) => { if (event.target === svg) drag = { x: event.clientX, y: event.clientY }; });
  svg.addEventListener("pointerup", () => { drag = null; });
  svg.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const scale = view.w / svg.clientWidth;
    view.x -= (event.clientX - drag.x) * scale; view.y -= (event.clientY - drag.y) * scale;
    drag = { x: event.clientX, y: event.clientY };
    apply();
  });
  document.getElementById("graph-search").addEventListener("input", (event) => {
    const wanted = event.target.value.trim().toLowerCase();
    let first = null;
    for (const node of graph.nodes) {
      const hit = wanted !== "" && node.id.toLowerCase().includes(wanted);
      circles.get(node.id).classList.toggle("found", hit);
      if (hit && !first) first = node;
    }
    if (first) {
      const inView = first.x > view.x && first.x < view.x + view.w && first.y > view.y && first.y < view.y + view.h;
      if (!inView) {
        view = { x: first.x - view.w / 2, y: first.y - view.h / 2, w: view.w, h: view.h };
        apply();
      }
      show(panel, first, graph.edges);
    }
  });
});
