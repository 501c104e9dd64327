// Attend's page: everything it shows comes from the REST API it is served by.
"use strict";

const $ = (id) => document.getElementById(id);
const liked = new Map(); // id -> title, kept in localStorage across reloads
let lastQuery = "";

// A search is its state: the query, the filters, the order and the page. It lives in the URL,
// so a search can be shared and the browser's back and forward buttons walk through them.
const FILTERS = ["author", "year_min", "year_max", "language", "subject", "series", "publisher"];
const FACETS = { subjects: "Subjects", author: "Authors", year: "Decades", series: "Series", publisher: "Publishers", language: "Languages" };
const PAGE = 10;
const MAX_OFFSET = 1000; // the API's
let state = { q: "", sort: "", offset: 0, filters: {} };
let searching = 0; // the latest search only is shown

function stateFromUrl() {
  const params = new URLSearchParams(location.search);
  const filters = {};
  for (const name of FILTERS) if (params.get(name)) filters[name] = params.get(name);
  return { q: params.get("q") || "", sort: params.get("sort") || "", offset: Number(params.get("offset")) || 0, filters };
}

function queryOf(s) {
  const params = new URLSearchParams({ q: s.q });
  for (const [name, value] of Object.entries(s.filters)) params.set(name, value);
  if (s.sort) params.set("sort", s.sort);
  if (s.offset) params.set("offset", String(s.offset));
  return params;
}

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

// A new search from the box or an example: the query alone, its first page by relevance.
function search(q) {
  show({ q, sort: $("sort").value, offset: 0, filters: {} }, true);
}

async function show(next, push) {
  state = next;
  lastQuery = next.q;
  $("q").value = next.q;
  $("sort").value = next.sort;
  if (push) history.pushState(next, "", `?${queryOf(next)}`);
  $("detail").hidden = true; // the last book's explanation is not this search's
  document.querySelectorAll(".hit.selected").forEach((n) => n.classList.remove("selected"));
  $("summary").textContent = "Searching…";
  const mine = ++searching;
  try {
    const params = queryOf(next);
    params.set("k", String(PAGE));
    params.set("facets", Object.keys(FACETS).join(","));
    params.set("facet_size", "6");
    const res = await api(`/search?${params}`);
    if (mine !== searching) return;
    renderLegend(res);
    const flag = res.no_strong_match ?
      el("span", { class: "flag", text: " · no strong match: no book stands out, these are weak answers" }) : "";
    const entropy = res.entropy != null ? ` · entropy ${res.entropy.toFixed(2)} nats` : "";
    const like = res.like ? `Books like ${res.like.title}: ` : "";
    const shown = res.results.length ? `results ${res.offset + 1}–${res.offset + res.results.length}` : "no results";
    $("summary").replaceChildren(
      `${like}Compared with ${res.matched} of ${res.catalog_size} books; ${shown}`,
      tech(` · ${res.matched} books in the softmax${entropy}`), flag);
    // a bar is the book's share of all the attention, so a weak best answer shows a short bar;
    // a "books like X" answer is in its similar books' order and weights, drawn against its best
    const top = res.like && res.results.length ? Math.max(...res.results.map((hit) => hit.weight)) : 1;
    $("results").classList.toggle("weak", res.no_strong_match);
    $("results").replaceChildren(...res.results.map((hit) => resultItem(hit, top)));
    renderFilters(next);
    renderFacets(res.facets, next);
    renderPager(res, next);
  } catch (err) {
    if (mine !== searching) return;
    $("summary").replaceChildren(el("span", { class: "error", text: err.message }));
    $("results").replaceChildren();
    $("facets").replaceChildren();
    $("pager").hidden = true;
  }
}

function renderFilters(s) {
  const chips = Object.entries(s.filters).map(([name, value]) => {
    const chip = el("button", { type: "button", class: "chip", title: "Remove this filter",
      text: `${name.replace("_", " ")}: ${value} ×` });
    chip.addEventListener("click", () => {
      const filters = { ...s.filters };
      delete filters[name];
      show({ ...s, filters, offset: 0 }, true);
    });
    return chip;
  });
  $("filters").replaceChildren(...chips);
}

// Each facet's values with their share of the attention; a value is a link to its filter.
function renderFacets(facets, s) {
  const rows = [];
  for (const [name, label] of Object.entries(FACETS)) {
    const facet = facets && facets[name];
    if (!facet || !facet.values.length) continue;
    const values = facet.values.map((v) => {
      const b = el("button", { type: "button", class: "facet-value",
        title: `${v.count} of the ${facet.books} relevant books; ${pct(v.weight)} of the attention` },
        `${v.value} `, el("span", { class: "muted", text: `${pct(v.weight)} · ${v.count}` }));
      b.addEventListener("click", () => show({ ...s, filters: { ...s.filters, ...v.filter }, offset: 0 }, true));
      return b;
    });
    rows.push(el("div", { class: "facet" }, el("span", { class: "facet-name", text: label }), ...values));
  }
  $("facets").replaceChildren(...rows);
}

function renderPager(res, s) {
  const total = res.sorted_books != null ? res.sorted_books : res.matched;
  const hasNext = res.results.length === PAGE && s.offset + PAGE < total && s.offset + PAGE <= MAX_OFFSET;
  $("pager").hidden = !hasNext && s.offset === 0;
  $("prev").disabled = s.offset === 0;
  $("next").disabled = !hasNext;
  $("page-at").textContent = `page ${Math.floor(s.offset / PAGE) + 1}`;
}

function resultItem(hit, top) {
  const like = el("button", { class: "like", type: "button", "aria-pressed": String(liked.has(hit.id)),
    title: "Like: recommend books like this one", text: "♥" });
  like.addEventListener("click", (ev) => {
    ev.stopPropagation();
    if (liked.has(hit.id)) liked.delete(hit.id); else liked.set(hit.id, hit.title);
    like.setAttribute("aria-pressed", String(liked.has(hit.id)));
    saveLiked();
    recommend();
  });
  const item = el("li", { class: "hit", "data-id": hit.id, "data-weight": String(hit.weight) },
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
    $("similar").replaceChildren(...sim.value.results.map((s) => bookLink(s, pct(s.weight))));
    if (sim.value.no_strong_match) {
      $("similar").after(el("p", { class: "flag", id: "similar-flag",
        text: "No strong match: nothing in the catalog is much like this book." }));
    }
  }
}

// A book in the side lists (similar books, recommendations): its title and authors, and a
// note; a click opens it as a result opens.
function bookLink(book, note) {
  const item = el("li", { "data-id": book.id, class: "book-link", tabindex: "0" },
    el("span", { class: "link-title", text: book.title }),
    el("span", { class: "muted", text: book.authors && book.authors.length ? ` · ${book.authors.join(", ")}` : "" }),
    " ", el("span", { class: "because", text: note }));
  const open = () => openBook({ id: book.id, title: book.title, authors: book.authors || [] });
  item.addEventListener("click", open);
  item.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
  return item;
}

function saveLiked() {
  try { localStorage.setItem("attend-liked", JSON.stringify([...liked])); } catch (e) { /* private mode */ }
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
    $("recommendations").replaceChildren(...res.results.map((r) => bookLink(r,
      r.because.filter((b) => b.share >= 0.05).map((b) => `${pct(b.share)} from ${titles.get(b.id)}`).join(", "))));
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
$("sort").addEventListener("change", () => { if (state.q) show({ ...state, sort: $("sort").value, offset: 0 }, true); });
$("prev").addEventListener("click", () => show({ ...state, offset: Math.max(0, state.offset - PAGE) }, true));
$("next").addEventListener("click", () => show({ ...state, offset: state.offset + PAGE }, true));
window.addEventListener("popstate", (ev) => {
  const back = ev.state || stateFromUrl();
  if (back.q) show(back, false);
  else { state = back; $("q").value = ""; $("results").replaceChildren(); $("facets").replaceChildren();
    $("filters").replaceChildren(); $("summary").replaceChildren(); $("pager").hidden = true; }
});
try {
  for (const [id, title] of JSON.parse(localStorage.getItem("attend-liked") || "[]")) liked.set(id, title);
} catch (e) { /* private mode, or nothing kept */ }
renderExamples();
renderLegend(null);
if (liked.size) recommend();
const initial = stateFromUrl();
if (initial.q) { history.replaceState(initial, "", location.search); show(initial, false); }
