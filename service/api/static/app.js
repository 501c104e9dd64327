// Attend's page: everything it shows comes from the REST API it is served by.
"use strict";

const $ = (id) => document.getElementById(id);
const liked = new Map(); // id -> title
let lastQuery = "";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

async function api(path, options) {
  const res = await fetch(path, options);
  const body = await res.json();
  if (!res.ok) throw new Error(body.detail || res.statusText);
  return body;
}

const pct = (x) => `${(100 * x).toFixed(x >= 0.1 ? 0 : 1)}%`;
const bookPath = (id) => `/books/${encodeURIComponent(id)}`;

function headNames(response) {
  return response.heads ? Object.keys(response.heads) : [];
}

function renderLegend(response) {
  const legend = $("legend");
  legend.replaceChildren();
  for (const name of headNames(response)) {
    const h = response.heads[name];
    legend.append(el("span", {},
      el("span", { class: `swatch seg ${name}` }),
      `${name} head: π ${h.weight.toFixed(2)}, scale ${h.scale}`));
  }
}

function weightBar(hit, top) {
  const bar = el("div", { class: "bar", title: `weight ${hit.weight.toPrecision(3)}` });
  const width = (x) => `${(100 * x) / Math.max(top, 1e-12)}%`;
  if (hit.heads) {
    for (const [name, h] of Object.entries(hit.heads)) {
      if (h.share > 0) {
        bar.append(el("div", {
          class: `seg ${name}`, "data-head": name, style: `width:${width(h.share)}`,
          title: `${name}: ${pct(h.share / hit.weight)} of the weight (score ${h.score.toFixed(3)})`,
        }));
      }
    }
  } else {
    bar.append(el("div", { class: "seg text", style: `width:${width(hit.weight)}` }));
  }
  return bar;
}

async function search(q) {
  lastQuery = q;
  $("summary").textContent = "Searching…";
  try {
    const res = await api(`/search?q=${encodeURIComponent(q)}&k=10`);
    renderLegend(res);
    const flag = res.no_strong_match ? el("span", { class: "flag", text: " · no strong match" }) : "";
    const entropy = res.entropy != null ? ` · entropy ${res.entropy.toFixed(2)} nats` : "";
    $("summary").replaceChildren(`${res.matched} books in the softmax${entropy}`, flag);
    const top = res.results.length ? res.results[0].weight : 1;
    $("results").replaceChildren(...res.results.map((hit) => resultItem(hit, top)));
  } catch (err) {
    $("summary").replaceChildren(el("span", { class: "error", text: err.message }));
  }
}

function resultItem(hit, top) {
  const like = el("button", { class: "like", type: "button", "aria-pressed": String(liked.has(hit.id)),
    title: "Like: recommend books like this one", text: "♥" });
  like.addEventListener("click", (ev) => {
    ev.stopPropagation();
    if (liked.has(hit.id)) liked.delete(hit.id); else liked.set(hit.id, hit.title);
    like.setAttribute("aria-pressed", String(liked.has(hit.id)));
    recommend();
  });
  const item = el("li", { class: "hit", "data-id": hit.id },
    el("span", { class: "rank", text: String(hit.rank) }),
    el("div", {}, el("div", { class: "title", text: hit.title }),
      el("div", { class: "authors", text: [hit.authors.join(", "), hit.year].filter(Boolean).join(" · ") })),
    like,
    el("div", { class: "bar-row" }, weightBar(hit, top), el("span", { text: pct(hit.weight) })));
  item.addEventListener("click", () => {
    document.querySelectorAll(".hit.selected").forEach((n) => n.classList.remove("selected"));
    item.classList.add("selected");
    openBook(hit);
  });
  return item;
}

function highlighted(text, field, highlights) {
  const spans = highlights.filter((h) => h.field === field).sort((a, b) => a.start - b.start);
  const out = el("p", { class: `field-text ${field}` });
  let at = 0;
  for (const h of spans) {
    if (h.start < at) continue;
    out.append(text.slice(at, h.start));
    out.append(el("mark", { title: `attention ${h.weight.toFixed(2)}`,
      style: `opacity:${0.45 + 0.55 * Math.min(1, h.weight)}`, text: text.slice(h.start, h.end) }));
    at = h.end;
  }
  out.append(text.slice(at));
  return out;
}

async function openBook(hit) {
  $("detail").hidden = false;
  $("detail-title").textContent = hit.title;
  $("detail-authors").textContent = hit.authors.join(", ");
  $("explanation").replaceChildren(el("p", { class: "muted", text: "Reading the book’s words…" }));
  $("similar").replaceChildren();
  const id = bookPath(hit.id);
  const [exp, sim] = await Promise.allSettled([
    api(`${id}/explain?q=${encodeURIComponent(lastQuery)}`),
    api(`${id}/similar?k=5`),
  ]);
  if (exp.status === "fulfilled") renderExplanation(exp.value);
  else $("explanation").replaceChildren(el("p", { class: "error", text: exp.reason.message }));
  if (sim.status === "fulfilled") {
    $("similar").replaceChildren(...sim.value.results.map((s) =>
      el("li", {}, `${s.title} `, el("span", { class: "because", text: pct(s.weight) }))));
  }
}

function renderExplanation(exp) {
  const attends = el("ul", { class: "attends" });
  for (const a of exp.attends) {
    const words = a.top.map((t) => `${exp.book_words[t.word].text} ${pct(t.weight)}`).join(", ");
    attends.append(el("li", {}, el("b", { text: exp.query_words[a.query_word].text }), ` → ${words}`));
  }
  $("explanation").replaceChildren(
    highlighted(exp.title, "title", exp.highlights),
    highlighted(exp.description || "", "description", exp.highlights),
    attends);
}

async function recommend() {
  const names = [...liked.values()];
  $("liked-list").textContent = names.length ? `Liked: ${names.join(" · ")}` :
    "Like a few results (♥) to get recommendations.";
  if (!liked.size) { $("recommendations").replaceChildren(); return; }
  try {
    const res = await api("/recommend", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ liked: [...liked.keys()], k: 8 }) });
    $("recommendations").replaceChildren(...res.results.map((r) => el("li", { "data-id": r.id },
      `${r.title} `,
      el("span", { class: "because",
        text: r.because.filter((b) => b.share >= 0.05).map((b) => `${pct(b.share)} from ${b.title}`).join(", ") }))));
  } catch (err) {
    $("recommendations").replaceChildren(el("li", { class: "error", text: err.message }));
  }
}

$("search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = $("q").value.trim();
  if (q) search(q);
});
const initial = new URLSearchParams(location.search).get("q");
if (initial) { $("q").value = initial; search(initial); }
