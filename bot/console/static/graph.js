// The knowledge graph drawn in SVG with a small force layout: zoom (buttons, wheel, pinch-free drag to pan)
// and a selected node's descriptions and sources in the side panel. The search highlights the drawn nodes
// whose names match and asks the bot for every matching name of the whole graph; choosing one draws that
// entity's neighbourhood in place of what is drawn (the page's address names it, so Back returns), and
// "Whole graph" draws the most connected entities again.
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

function show(panel, node, edges, around) {
  panel.replaceChildren();
  const title = document.createElement("h3");
  title.textContent = node.id + (node.type ? ` (${node.type})` : "");
  panel.append(title);
  if (node.id !== around) {
    const button = document.createElement("button");
    button.type = "button"; button.className = "around"; button.textContent = "Draw its neighbourhood";
    button.addEventListener("click", () => choose(node.id));
    panel.append(button);
  }
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

// What is drawn now: the graph's answer, the entity it is drawn around (null: the whole graph), its circles.
let current = { graph: { nodes: [], edges: [] }, around: null, circles: new Map() };
let view = { x: 0, y: 0, w: 800, h: 600 };
let choose = () => {};

function explained(panel, text) {
  panel.replaceChildren();
  const p = document.createElement("p"); p.textContent = text; panel.append(p);
}

document.addEventListener("DOMContentLoaded", () => {
  const svg = document.getElementById("graph");
  const panel = document.getElementById("graph-node");
  const search = document.getElementById("graph-search");
  const found = document.getElementById("graph-found");
  const drawnNote = document.getElementById("graph-drawn");
  const whole = document.getElementById("graph-whole");
  if (!svg || !panel || !search || !found || !drawnNote || !whole) return;
  const width = 800, height = 600;
  const apply = () => svg.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
  apply();

  const select = (node) => {
    current.circles.forEach((c) => c.classList.remove("selected"));
    const circle = current.circles.get(node.id);
    if (circle) circle.classList.add("selected");
    show(panel, node, current.graph.edges, current.around);
  };

  const draw = (graph, around) => {
    svg.replaceChildren();
    current = { graph, around, circles: new Map() };
    whole.hidden = around === null;
    const links = layout(graph.nodes, graph.edges, width, height);
    if (!graph.nodes.length) return;
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
    for (const node of graph.nodes) {
      const circle = el("circle", { cx: node.x, cy: node.y, r: node.id === around ? 10 : 7, "data-id": node.id, tabindex: 0 });
      if (node.id === around) circle.classList.add("centre");
      const label = el("text", { x: node.x + 9, y: node.y + 3 });
      label.textContent = node.id;
      circle.addEventListener("click", () => select(node));
      circle.addEventListener("keydown", (event) => { if (event.key === "Enter") select(node); });
      current.circles.set(node.id, circle);
      nodesLayer.append(circle, label);
    }
  };

  // Draws the whole graph (around null) or an entity's neighbourhood; says what went wrong otherwise.
  let loads = 0;
  const load = async (around) => {
    const mine = ++loads;
    const address = around === null ? "graph.json" : `graph.json?entity=${encodeURIComponent(around)}`;
    let response, graph;
    try {
      response = await fetch(address, { credentials: "same-origin" });
      graph = await response.json().catch(() => ({}));
    } catch (error) {
      response = { ok: false, status: 0 }; graph = { error: `The bot did not answer (${error}).` };
    }
    if (mine !== loads) return; // another drawing was asked for meanwhile
    if (!response.ok || !Array.isArray(graph.nodes)) {
      const error = graph.error || `The knowledge graph could not be read (HTTP ${response.status}).`;
      // An entity that cannot be drawn (an address naming one forgotten since) leaves the whole graph drawn.
      if (around !== null && !current.graph.nodes.length) await load(null);
      drawnNote.textContent = error;
      drawnNote.setAttribute("role", "alert");
      return;
    }
    drawnNote.setAttribute("role", "status");
    if (!graph.nodes.length) {
      draw(graph, null);
      drawnNote.textContent = "The graph is empty so far: it grows as conversations and documents are indexed.";
      explained(panel, "Select a node to see its descriptions and sources.");
      return;
    }
    draw(graph, around);
    if (around === null) {
      drawnNote.textContent = graph.total > graph.nodes.length
        ? `The ${graph.nodes.length} most connected of ${graph.total} entities are drawn: search to find any other.`
        : `All ${graph.total} entities are drawn.`;
      explained(panel, "Select a node to see its descriptions and sources.");
    } else {
      const others = graph.nodes.length - 1;
      drawnNote.textContent = `${around} and the ${others} ${others === 1 ? "entity" : "entities"} ` +
        (graph.truncated ? `nearest it are drawn (more lie within ${graph.depth} relations).`
          : `within ${graph.depth} relations of it are drawn.`);
      const centre = graph.nodes.find((n) => n.id === around);
      if (centre) select(centre);
    }
  };

  choose = (name) => {
    found.replaceChildren();
    listedFor = null;
    if (location.hash !== `#${encodeURIComponent(name)}`) history.pushState(null, "", `#${encodeURIComponent(name)}`);
    load(name);
  };
  const fromAddress = () => (location.hash.length > 1 ? decodeURIComponent(location.hash.slice(1)) : null);
  window.addEventListener("popstate", () => load(fromAddress()));
  whole.addEventListener("click", () => {
    history.pushState(null, "", location.pathname + location.search);
    load(null);
  });

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

  // The names the bot found for what is typed, each a button that draws its neighbourhood.
  const listed = (items) => {
    found.replaceChildren(...items.map((item) => {
      const li = document.createElement("li");
      if (typeof item === "string") {
        const button = document.createElement("button");
        button.type = "button"; button.textContent = item; button.dataset.name = item;
        button.addEventListener("click", () => choose(item));
        li.append(button);
      } else {
        li.className = item.error ? "error" : "none"; li.textContent = item.text;
      }
      return li;
    }));
  };
  let asked = 0, pending = null, listedFor = null;
  const ask = async (wanted) => {
    const mine = ++asked;
    let response, answer;
    try {
      response = await fetch(`graph/search.json?q=${encodeURIComponent(wanted)}`, { credentials: "same-origin" });
      answer = await response.json().catch(() => ({}));
    } catch (error) {
      response = { ok: false, status: 0 }; answer = { error: `The bot did not answer (${error}).` };
    }
    if (mine !== asked) return; // a later search was typed meanwhile
    listedFor = wanted;
    if (!response.ok || !Array.isArray(answer.names)) {
      listed([{ error: true, text: answer.error || `The search failed (HTTP ${response.status}).` }]);
    } else if (!answer.names.length) {
      listed([{ text: `No entity's name contains “${wanted}”.` }]);
    } else {
      listed(answer.names);
    }
  };
  search.addEventListener("input", () => {
    const wanted = search.value.trim();
    const lower = wanted.toLowerCase();
    let first = null;
    for (const node of current.graph.nodes) {
      const hit = lower !== "" && node.id.toLowerCase().includes(lower);
      const circle = current.circles.get(node.id);
      if (circle) circle.classList.toggle("found", hit);
      if (hit && !first) first = node;
    }
    if (first) {
      const inView = first.x > view.x && first.x < view.x + view.w && first.y > view.y && first.y < view.y + view.h;
      if (!inView) {
        view = { x: first.x - view.w / 2, y: first.y - view.h / 2, w: view.w, h: view.h };
        apply();
      }
      select(first);
    }
    clearTimeout(pending);
    if (!wanted) { asked++; listedFor = null; found.replaceChildren(); return; }
    pending = setTimeout(() => ask(wanted), 150);
  });
  // Enter draws the first name found (the name itself when it is one), asking at once for what was just typed.
  search.addEventListener("keydown", async (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    const wanted = search.value.trim();
    if (!wanted) return;
    if (listedFor !== wanted) { clearTimeout(pending); await ask(wanted); }
    const first = found.querySelector("button[data-name]");
    if (first && listedFor === wanted) choose(first.dataset.name);
  });

  load(fromAddress());
});
