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

// Searches that show what the ranking does on the demo catalog (and read well on most others).
const EXAMPLES = [
  "generative AI",
  "how databases work inside",
  "a desert planet and its spice",
  "children's stories about animals",
  "the rise and fall of empires",
];

// The parts of the ranking, in words a reader who is not an engineer follows.
const HEADS = {
  title: "the title",
  description: "what the book is about",
  lexical: "your exact words",
  author: "books by the author named",
  series: "the same series",
  subjects: "the same subjects",
};
// Why a part did not count, in the same words.
const UNUSED = {
  lexical: "no word of the query is in the catalog",
  author: "the query names no author of the catalog",
  series: "not in a series with other books here",
  subjects: "no subject shared with other books here",
};
const headLabel = (name) => HEADS[name] || name;

// The technical figures (π, scale, softmax size, entropy) are in the page but shown only with
// the toggle: `.tech` spans, visible under `body.show-tech`.
const tech = (text) => el("span", { class: "tech", text });

function renderExamples() {
  for (const q of EXAMPLES) {
    const b = el("button", { type: "button", class: "example", text: q });
    b.addEventListener("click", () => { $("q").value = q; search(q); });
    $("examples").append(b);
  }
}

function renderLegend(response) {
  const legend = $("legend");
  const names = response ? headNames(response) : ["title", "description", "lexical", "author"];
  legend.replaceChildren(el("span", { class: "legend-intro",
    text: response ? "How much each part of the ranking counted:" :
      "Each result’s bar is its share of the ranking, coloured by what counted:" }));
  for (const name of names) {
    const h = response ? response.heads[name] : null;
    const part = el("span", { class: "legend-part" }, el("span", { class: `swatch seg ${name}` }),
      headLabel(name));
    if (h) {
      part.append(` ${h.abstained ? `not used (${UNUSED[name] || "nothing to go on"})` : pct(h.weight)}`);
      part.append(tech(` (${name} head: π ${h.weight.toFixed(2)}, scale ${h.scale})`));
    }
    legend.append(part);
  }
}

function setTechnical(on) {
  document.body.classList.toggle("show-tech", on);
  $("technical").checked = on;
  try { localStorage.setItem("attend-technical", on ? "1" : ""); } catch (e) { /* private mode */ }
}

function weightBar(hit, top) {
  const bar = el("div", { class: "bar", title: `weight ${hit.weight.toPrecision(3)}` });
  const width = (x) => `${(100 * x) / Math.max(top, 1e-12)}%`;
  if (hit.heads) {
    for (const [name, h] of Object.entries(hit.heads)) {
      if (h.share > 0) {
        bar.append(el("div", {
          class: `seg ${name}`, "data-head": name, style: `width:${width(h.share)}`,
          title: `${headLabel(name)}: ${pct(h.share / hit.weight)} of this book’s share (${name} score ${h.score.toFixed(3)})`,
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
    const flag = res.no_strong_match ?
      el("span", { class: "flag", text: " · no strong match: no book stands out, these are weak answers" }) : "";
    const entropy = res.entropy != null ? ` · entropy ${res.entropy.toFixed(2)} nats` : "";
    const like = res.like ? `Books like ${res.like.title}: ` : "";
    $("summary").replaceChildren(
      `${like}Compared with ${res.matched} of ${res.catalog_size} books; the best ${res.results.length} shown`,
      tech(` · ${res.matched} books in the softmax${entropy}`), flag);
    // a "books like X" answer is in its similar books' order, not its weights'
    const top = res.results.length ? Math.max(...res.results.map((hit) => hit.weight)) : 1;
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
  $("similar-flag")?.remove();
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
    if (sim.value.no_strong_match) {
      $("similar").after(el("p", { class: "flag", id: "similar-flag",
        text: "No strong match: nothing in the catalog is much like this book." }));
    }
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
    const titles = new Map(res.liked.map((b) => [b.id, b.title])); // `because` names them by id
    $("recommendations").replaceChildren(...res.results.map((r) => el("li", { "data-id": r.id },
      `${r.title} `,
      el("span", { class: "because",
        text: r.because.filter((b) => b.share >= 0.05).map((b) => `${pct(b.share)} from ${titles.get(b.id)}`).join(", ") }))));
  } catch (err) {
    $("recommendations").replaceChildren(el("li", { class: "error", text: err.message }));
  }
}

$("search-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = $("q").value.trim();
  if (q) search(q);
});
$("technical").addEventListener("change", (ev) => setTechnical(ev.target.checked));

// titles and authors completing what is typed (GET /suggest), the latest answer only
let suggesting = 0;
$("q").addEventListener("input", async () => {
  const q = $("q").value;
  const mine = ++suggesting;
  if (q.trim().length < 2) { $("suggestions").replaceChildren(); return; }
  try {
    const body = await api(`/suggest?q=${encodeURIComponent(q)}&k=6`);
    if (mine !== suggesting) return;
    const texts = [...body.titles.map((t) => t.title), ...body.authors.map((a) => a.name)];
    $("suggestions").replaceChildren(...texts.map((value) => el("option", { value })));
  } catch (e) { /* a suggestion is a convenience: the search still works */ }
});
let technical = false;
try { technical = Boolean(localStorage.getItem("attend-technical")); } catch (e) { /* private mode */ }
setTechnical(technical);
renderExamples();
renderLegend(null);
const initial = new URLSearchParams(location.search).get("q");
if (initial) { $("q").value = initial; search(initial); }
