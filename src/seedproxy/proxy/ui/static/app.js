// seedproxy's trajectory viewer. Plain DOM, no dependencies.
// Everything shown comes from the proxy's admin JSON routes. Model output is untrusted:
// text goes in through textContent / createTextNode only, never innerHTML.
// The key lives in sessionStorage and travels as a bearer header, never in a URL.
"use strict";

const KEY_STORE = "seedproxy.key";
const POLL_MS = 2000;
const DECODE_BATCH = 8192; // the route's bound on ids per call
const TURNS_PAGE = 20; // turns fetched and rendered per step of a session page
const CONCAT_CHUNK = 2000; // concat-view tokens rendered per step
let viewToken = 0; // bumped on every navigation; stale async work checks it and stops
const GLYPHS = new WeakMap(); // a shown ids array -> Map(start -> [end, text]) of multi-token characters

class AuthNeeded extends Error {}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "className") node.className = value;
    else if (name === "text") node.textContent = String(value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function key() { return sessionStorage.getItem(KEY_STORE) || ""; }

async function api(path, options) {
  const headers = { accept: "application/json" };
  if (key()) headers.authorization = "Bearer " + key();
  const init = Object.assign({ headers, cache: "no-store", credentials: "omit" }, options || {});
  if (init.body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, init);
  if (response.status === 401 || response.status === 403) {
    let message = "this page needs the admin key";
    try { message = (await response.json()).error.message; } catch (_) { /* keep default */ }
    throw new AuthNeeded(message);
  }
  if (!response.ok) {
    let message = "HTTP " + response.status;
    try { message = (await response.json()).error.message; } catch (_) { /* keep default */ }
    throw new Error(message);
  }
  return response.json();
}

const enc = encodeURIComponent;
const fmt = (v, digits) => (v === null || v === undefined ? "–" : typeof v === "number" && digits !== undefined ? v.toFixed(digits) : String(v));

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
}

function fail(error) {
  if (error instanceof AuthNeeded) return login(error.message);
  show(el("p", { className: "error", id: "error", text: error.message }));
}

// ---- login ---------------------------------------------------------------

function login(message) {
  viewToken += 1;
  const input = el("input", { type: "password", id: "key", autocomplete: "off", placeholder: "admin key" });
  const form = el("form", { className: "login", id: "login" },
    el("h1", { text: "Key needed" }),
    el("p", { className: "muted", id: "login-message", text: message }),
    input,
    el("button", { type: "submit", id: "login-submit", text: "Open" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_STORE, input.value);
    route();
  });
  show(form);
  input.focus();
}

// ---- sessions list -------------------------------------------------------

function listView(params) {
  const token = viewToken;
  const group = el("input", { type: "text", id: "filter-group", placeholder: "group id", value: params.get("group") || "" });
  const identity = el("input", { type: "text", id: "filter-identity", placeholder: "identity", value: params.get("identity") || "" });
  const diff = el("button", { type: "button", id: "diff-selected", text: "Diff selected", disabled: true });
  const status = el("span", { className: "muted", id: "list-status" });
  const body = el("tbody");
  const table = el("table", { id: "sessions" },
    el("thead", {}, el("tr", {}, ["", "session", "identity", "group", "interactions", "state", "reward", "upstream", "weight version"].map((h) => el("th", { text: h })))),
    body);
  const chosen = new Set();
  diff.addEventListener("click", () => {
    const [a, b] = [...chosen];
    location.hash = "#/diff/" + enc(a) + "/" + enc(b);
  });
  const apply = () => {
    const q = new URLSearchParams();
    if (group.value) q.set("group", group.value);
    if (identity.value) q.set("identity", identity.value);
    history.replaceState(null, "", "#/" + (q.toString() ? "?" + q : ""));
    refresh(++loop);
  };
  group.addEventListener("change", apply);
  identity.addEventListener("change", apply);

  let loop = 0; // one polling chain at a time: a filter change starts a new one
  const live = (mine) => token === viewToken && mine === loop;
  let shown = null; // the store's change version the table shows (null: none yet)
  let shownFor = -1; // the polling chain (filters) it was fetched for

  async function refresh(mine) {
    const q = new URLSearchParams({ limit: "500" });
    if (group.value) q.set("group_id", group.value);
    if (identity.value) q.set("identity", identity.value);
    // A poll while nothing changed is answered with the version alone (O(1) on the proxy).
    if (shown !== null && mine === shownFor) q.set("since", String(shown));
    let page;
    try { page = await api("/sessions?" + q); } catch (error) { if (live(mine)) fail(error); return; }
    if (!live(mine)) return;
    const again = () => setTimeout(() => { if (live(mine)) refresh(mine); }, POLL_MS);
    if (page.changed === false) { again(); return; }
    shown = page.version;
    shownFor = mine;
    body.replaceChildren(...page.sessions.map((s) => {
      const box = el("input", { type: "checkbox", className: "pick", checked: chosen.has(s.session_id) });
      box.addEventListener("change", () => {
        if (box.checked) chosen.add(s.session_id); else chosen.delete(s.session_id);
        diff.disabled = chosen.size !== 2;
      });
      return el("tr", { className: "session-row", dataset: { session: s.session_id } },
        el("td", {}, box),
        el("td", {}, el("a", { href: "#/session/" + enc(s.session_id), text: s.session_id })),
        el("td", {}, el("a", { href: "#/?identity=" + enc(s.identity), text: s.identity })),
        el("td", {}, s.group_id ? el("a", { href: "#/?group=" + enc(s.group_id), text: s.group_id }) : "–"),
        el("td", { className: "num", text: s.interactions }),
        el("td", {}, el("span", { className: "state state-" + s.state, text: s.state })),
        el("td", { className: "num", text: fmt(s.reward) }),
        el("td", { text: fmt(s.upstream) }),
        el("td", { text: fmt(s.weight_version) }));
    }));
    status.textContent = page.total + " sessions" + (page.next_offset !== null ? " (first " + page.sessions.length + " shown)" : "") + " · live";
    again();
  }

  show(el("h1", { text: "Sessions" }),
    el("div", { className: "filters" }, "Group", group, "Identity", identity, diff, status),
    table);
  refresh(loop);
}

// ---- tokens --------------------------------------------------------------

function colourOf(logprob) {
  const p = Math.exp(logprob);
  return "hsl(" + Math.round(120 * p) + ", 75%, 84%)";
}

function tokenSpan(id, logprob, texts, extraClass) {
  const text = texts && Object.prototype.hasOwnProperty.call(texts, String(id)) ? texts[String(id)] : "⟨" + id + "⟩";
  const span = el("span", { className: "tok" + (extraClass ? " " + extraClass : ""), text: text === "" ? "∅" : text });
  span.dataset.id = String(id);
  if (typeof logprob === "number") {
    span.dataset.logprob = String(logprob);
    span.title = "id " + id + " · logprob " + logprob.toFixed(4) + " · p " + Math.exp(logprob).toFixed(3);
    span.style.backgroundColor = colourOf(logprob);
  } else {
    span.title = "id " + id;
  }
  return span;
}

function glyphSpan(ids, logprobs, start, end, text, extraClass) {
  // One character (an emoji) whose bytes are spread over ids[start:end]: shown once.
  const part = ids.slice(start, end);
  const lps = part.map((_, k) => logprobs ? logprobs[start + k] : undefined);
  const span = el("span", { className: "tok glyph" + (extraClass ? " " + extraClass : ""), text });
  span.dataset.id = part.join(",");
  if (lps.every((x) => typeof x === "number")) {
    const low = Math.min(...lps);
    span.dataset.logprob = String(low);
    span.title = part.map((t, k) => "id " + t + " · logprob " + lps[k].toFixed(4)).join("\n");
    span.style.backgroundColor = colourOf(low);
  } else {
    span.title = part.map((t) => "id " + t).join(", ");
  }
  return span;
}

function tokenStrip(ids, logprobs, texts, classOf, before) {
  // A span per token, a multi-token character as one span; before(p): nodes to put first.
  const glyphs = GLYPHS.get(ids) || new Map();
  const out = [];
  for (let p = 0; p < ids.length;) {
    if (before) out.push(...before(p));
    const glyph = glyphs.get(p);
    if (glyph) {
      out.push(glyphSpan(ids, logprobs, p, glyph[0], glyph[1], classOf(p)));
      p = glyph[0];
    } else {
      out.push(tokenSpan(ids[p], logprobs ? logprobs[p] : undefined, texts, classOf(p)));
      p += 1;
    }
  }
  return out;
}

async function findGlyphs(sequences, texts) {
  // For each shown [ids, upstream] with a token that decodes alone to U+FFFD, ask which
  // runs of tokens decode together (a byte-level tokenizer's split characters).
  if (!texts) return;
  for (const [ids, upstream] of sequences) {
    if (!ids.some((t) => (texts[String(t)] || "").includes("\ufffd"))) continue;
    try {
      const answer = await api("/ui/api/detokenize", { method: "POST", body: JSON.stringify({ ids: [], upstream: upstream || null, sequence: ids.slice(0, DECODE_BATCH) }) });
      GLYPHS.set(ids, new Map((answer.glyphs || []).map(([start, end, text]) => [start, [end, text]])));
    } catch (error) {
      if (!(error instanceof AuthNeeded)) console.warn("detokenize:", error.message);
    }
  }
}

function shownSequences(interactions) {
  return interactions.flatMap((it) => choices(it).map((c) => [c.ids, it.upstream]));
}

function choices(interaction) {
  const ids = interaction.completion_token_ids || [];
  const lps = interaction.logprobs || [];
  const spans = interaction.weight_versions || [];
  if (ids.length && Array.isArray(ids[0])) return ids.map((c, i) => ({ ids: c, logprobs: lps[i] || [], spans: spans[i] || [] }));
  return [{ ids, logprobs: lps, spans }];
}

function completionTokens(c, texts) {
  // A mark where each weight-version span starts: which weights made the tokens after it.
  const starts = new Map(c.spans.filter((s) => s && Number.isInteger(s.start)).map((s) => [s.start, s.version]));
  return tokenStrip(c.ids, c.logprobs, texts, () => "", (p) => starts.has(p)
    ? [el("span", { className: "version-mark", title: "weight version", text: String(starts.get(p)) })] : []);
}

async function decodeAll(interactions, extra) {
  // One detokenize call per upstream; null when the upstream cannot decode.
  const byUpstream = new Map();
  for (const it of interactions) {
    const up = it.upstream || "";
    if (!byUpstream.has(up)) byUpstream.set(up, new Set());
    const set = byUpstream.get(up);
    for (const c of choices(it)) c.ids.forEach((t) => set.add(t));
    (extra || []).forEach((t) => set.add(t));
  }
  const texts = {};
  for (const [upstream, set] of byUpstream) {
    const ids = [...set];
    for (let start = 0; start < ids.length; start += DECODE_BATCH) {
      const batch = ids.slice(start, start + DECODE_BATCH);
      try {
        const answer = await api("/ui/api/detokenize", { method: "POST", body: JSON.stringify({ ids: batch, upstream: upstream || null }) });
        if (!answer.tokens) break; // this upstream cannot decode: ids are shown
        Object.assign(texts, answer.tokens);
      } catch (error) {
        if (!(error instanceof AuthNeeded)) console.warn("detokenize:", error.message);
        break;
      }
    }
  }
  return Object.keys(texts).length ? texts : null;
}

// ---- one session ---------------------------------------------------------

function messagesOf(request) {
  if (!request || typeof request !== "object") return [];
  if (Array.isArray(request.messages)) return request.messages.map((m) => [m.role || "?", m.content, m.tool_calls]);
  if (request.prompt !== undefined) return [["prompt", request.prompt]];
  if (request.input !== undefined) return [["input", request.input]];
  if (request.text !== undefined) return [["text", request.text]];
  return [];
}

function renderContent(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (!Array.isArray(content) || !content.some((p) => imageSource(p) !== null)) return JSON.stringify(content, null, 1);
  // Parts with images: text as text, each image a thumbnail (data: URLs only), the rest as JSON.
  return content.map((p) => {
    const src = imageSource(p);
    if (src !== null) return el("img", { className: "thumb", src, alt: "image", title: "image" });
    if (p && typeof p === "object" && typeof p.text === "string") return p.text;
    return JSON.stringify(p);
  });
}

function imageSource(part) {
  // A recorded image as a data: URL (chat image_url, Responses input_image, Anthropic's
  // base64 source), or null: a URL to elsewhere is never loaded.
  if (!part || typeof part !== "object") return null;
  let url = null;
  if (part.type === "image_url") url = typeof part.image_url === "string" ? part.image_url : part.image_url && part.image_url.url;
  else if (part.type === "input_image") url = part.image_url;
  else if (part.type === "image" && part.source && part.source.type === "base64"
    && typeof part.source.data === "string" && /^image\/[a-z+.-]+$/.test(String(part.source.media_type))) {
    url = "data:" + part.source.media_type + ";base64," + part.source.data;
  }
  return typeof url === "string" && /^data:image\/[a-z+.-]+;base64,/.test(url) ? url : null;
}

function messageBlocks(blocks) {
  // A Messages answer's blocks: text as text, thinking as itself, a tool call as its JSON.
  return blocks.map((b) => !b || typeof b !== "object" ? ""
    : b.type === "text" && typeof b.text === "string" ? b.text
    : b.type === "thinking" && typeof b.thinking === "string" ? b.thinking
    : JSON.stringify(b)).join("\n");
}

function answerText(interaction) {
  const r = interaction.response;
  if (!r || typeof r !== "object") return "";
  const c = Array.isArray(r.choices) && r.choices[0];
  if (c && c.message) return renderContent(c.message.content) + (c.message.tool_calls ? "\n" + JSON.stringify(c.message.tool_calls) : "");
  if (c && typeof c.text === "string") return c.text;
  if (typeof r.text === "string") return r.text;
  if (typeof r.output_text === "string") return r.output_text;
  if (Array.isArray(r.content)) return messageBlocks(r.content); // Anthropic's /v1/messages
  return JSON.stringify(r);
}

function mark(kind, text, title) {
  return el("span", { className: "mark mark-" + kind, title: title || null, text });
}

function turnMarks(it) {
  // What the record knows about where a turn sits: its branch, how its prompt was made,
  // a compaction, a replay, a fork.
  const marks = [];
  if (it.branch) marks.push(mark("branch", "branch " + it.branch));
  const prompt = it.prompt;
  if (prompt && typeof prompt.kind === "string") {
    const how = prompt.kind === "matched" && Array.isArray(prompt.matchers) ? " (" + prompt.matchers.join(", ") + ")"
      : prompt.kind === "rendered" && prompt.reason && prompt.reason.what ? ": " + prompt.reason.what : "";
    marks.push(mark("prompt", prompt.kind + how, "how this turn's prompt was made"));
  }
  if (it.compacted_from) marks.push(mark("compacted", "compacts " + it.compacted_from, "its summary replaces the history up to this interaction"));
  const forked = it.lineage && it.lineage.forked_from;
  if (forked && forked.interaction_id) marks.push(mark("forked", "forked from " + forked.interaction_id));
  if (it.replayed) marks.push(mark("replayed", "replayed", "answered from the source record, no upstream call"));
  if (it.abandoned) marks.push(mark("abandoned", "abandoned", "the client left before the answer was complete"));
  return marks.length ? el("span", { className: "marks" }, marks) : null;
}

function interactionCard(it, turn, texts) {
  const meta = el("div", { className: "meta" },
    el("span", {}, "turn ", el("b", { text: turn })),
    el("span", {}, "index ", el("b", { text: it.request_index })),
    el("span", {}, "seed ", el("b", { className: "seed", text: Array.isArray(it.seed) ? it.seed.join(", ") : fmt(it.seed) })),
    el("span", {}, "upstream ", el("b", { text: fmt(it.upstream) })),
    el("span", {}, "latency ", el("b", { text: fmt(it.latency_ms, 1) + " ms" })),
    el("span", {}, "finish ", el("b", { className: "finish", text: Array.isArray(it.finish_reason) ? it.finish_reason.join(", ") : fmt(it.finish_reason) })),
    el("span", {}, "status ", el("b", { text: fmt(it.status) })),
    el("span", {}, "reward ", el("b", { text: fmt(it.reward) })),
    it.weight_version !== undefined ? el("span", {}, "weight version ", el("b", { text: fmt(it.weight_version) })) : null,
    it.prompt_tokens !== undefined ? el("span", {}, "prompt ", el("b", { text: it.prompt_tokens + " tokens" })) : null,
    el("span", {}, it.endpoint),
    turnMarks(it));
  // The request's messages past the history it repeats (messages_from of them).
  const earlier = it.messages_from ? el("div", { className: "msg earlier muted", text: "… " + it.messages_from + " earlier message" + (it.messages_from === 1 ? "" : "s") }) : null;
  const msgs = el("div", { className: "messages" }, earlier, messagesOf(it.request).map(([role, content, calls]) =>
    el("div", { className: "msg added" }, el("span", { className: "role", text: role }), renderContent(content), calls ? " " + JSON.stringify(calls) : "")));
  const answer = el("div", { className: "msg answer" }, el("span", { className: "role", text: "→ answer" }), answerText(it));
  const completions = choices(it).map((c, i) => el("div", { className: "tokens completion", dataset: { choice: i } },
    completionTokens(c, texts)));
  return el("section", { className: "card interaction", dataset: { index: it.request_index, turn } },
    meta, msgs, answer, el("h2", { text: "completion tokens" }), completions);
}

function branchHeader(b, chain) {
  // One branch of a token-in-token-out rollout and its links to the others.
  const links = [];
  if (b.main) links.push(mark("main", "main conversation"));
  if (chain.includes(b.branch_id)) links.push(mark("chain", "chain " + (chain.indexOf(b.branch_id) + 1) + "/" + chain.length));
  if (b.compacted_from) links.push(mark("compacted", "compacted from branch " + fmt(b.compacted_from.branch) + " at " + fmt(b.compacted_from.interaction_id)));
  if (b.subagent_of) links.push(mark("subagent", "sub-agent of " + fmt(b.subagent_of.interaction_id) + (b.subagent_of.tool_call_id ? " call " + b.subagent_of.tool_call_id : "")));
  if (b.side_request) links.push(mark("side", "side request"));
  if (b.parent && b.parent.branch) links.push(mark("forked", "forks from branch " + b.parent.branch + " at " + fmt(b.parent.interaction_id)));
  return el("h3", { className: "branch-head", dataset: { branch: b.branch_id } }, "branch " + b.branch_id + " · " + (b.interaction_ids || []).length + " turns ", links);
}

function concatCard(card, concat, texts, part) {
  // part: which branch of the rollout (0 for the first, or a rollout with no branches);
  // element ids name the first branch's nodes, as they name a single sequence's.
  const error = concat.concat_error || concat.error;
  if (error) {
    const e = error;
    card.append(el("div", { className: "drift", id: part ? null : "drift" },
      (e.turn !== undefined ? "drift at turn " + e.turn + " (request index " + e.request_index + ")" + (e.position !== null && e.position !== undefined ? ", position " + e.position : "") : "broken at " + fmt(e.interaction_id)) + ": " + e.reason));
    return;
  }
  const ids = concat.token_ids || [];
  const mask = concat.loss_mask || [];
  const lps = concat.logprobs || [];
  const box = el("div", { className: "tokens", dataset: { part: part || 0 } });
  card.append(el("p", { className: "legend", text: ids.length + " tokens; grey: prompt (mask 0); coloured: generated (mask 1), by probability" }), box);
  const shownLps = ids.map((_, p) => mask[p] === 1 ? lps[p] : undefined);
  const glyphs = GLYPHS.get(ids) || new Map();
  let turn = 0;
  let shown = 0;
  const more = el("span", { className: "muted concat-more", id: part ? null : "concat-more" });
  const renderMore = () => { // CONCAT_CHUNK tokens at a time, as the strip's end scrolls into view
    const stop = Math.min(ids.length, shown + CONCAT_CHUNK);
    const out = [];
    let p = shown;
    while (p < stop) {
      if (mask[p] === 1 && (p === 0 || mask[p - 1] === 0)) out.push(el("span", { className: "turn-mark", text: "turn " + turn++ }));
      const cls = mask[p] === 1 ? "gen" : "prompt";
      const glyph = glyphs.get(p);
      if (glyph) {
        out.push(glyphSpan(ids, shownLps, p, glyph[0], glyph[1], cls));
        p = glyph[0];
      } else {
        out.push(tokenSpan(ids[p], shownLps[p], texts, cls));
        p += 1;
      }
    }
    more.before(...out);
    shown = p;
    more.textContent = shown < ids.length ? "… " + (ids.length - shown) + " more tokens" : "";
    return shown < ids.length;
  };
  box.append(more);
  renderMore();
  whenSeen(more, async () => renderMore());
}

function whenSeen(sentinel, step) {
  // Run step() each time sentinel scrolls into view, until it answers false (or the
  // page navigates away). One step at a time; after each, if the sentinel is still in
  // view, observing it again fires again.
  const token = viewToken;
  let busy = false;
  const observer = new IntersectionObserver(async (entries) => {
    if (busy || !entries.some((e) => e.isIntersecting)) return;
    busy = true;
    let again = false;
    try { again = token === viewToken && await step(); } catch (error) { if (token === viewToken) fail(error); }
    busy = false;
    observer.unobserve(sentinel);
    if (again && token === viewToken) observer.observe(sentinel); else observer.disconnect();
  });
  observer.observe(sentinel);
}

const turnsPath = (id, offset) => "/ui/api/sessions/" + enc(id) + "/turns?offset=" + offset + "&limit=" + TURNS_PAGE;

async function sessionView(id) {
  const token = viewToken;
  const base = "/sessions/" + enc(id);
  const [summary, first] = await Promise.all([api(base), api(turnsPath(id, 0))]);
  const texts = await decodeAll(first.turns);
  await findGlyphs(shownSequences(first.turns), texts);
  if (token !== viewToken) return;
  const state = summary.exported ? "exported" : summary.ended ? "ended" : "open";
  const others = el("select", { id: "diff-with" }, el("option", { value: "", text: "diff with…" }));
  others.addEventListener("change", () => { if (others.value) location.hash = "#/diff/" + enc(id) + "/" + enc(others.value); });
  api("/sessions?identity=" + enc(summary.identity) + "&limit=500").then((page) => {
    for (const s of page.sessions) if (s.session_id !== id) others.append(el("option", { value: s.session_id, text: s.session_id }));
  }).catch(() => { others.disabled = true; });
  const list = el("div", { id: "turns" });
  const more = el("p", { className: "muted", id: "turns-more" });
  const concat = el("section", { className: "card", id: "concat" }, el("h2", { text: "concat view (loss mask)" }));
  show(
    el("h1", {}, "Session ", el("span", { id: "session-id", text: id })),
    el("div", { className: "meta" },
      el("span", {}, "identity ", el("b", { text: summary.identity })),
      el("span", {}, "group ", el("b", { text: fmt(summary.group_id) })),
      el("span", {}, "state ", el("b", { text: state })),
      el("span", {}, "reward ", el("b", { text: fmt(summary.reward) })),
      el("span", {}, "interactions ", el("b", { text: summary.interactions })),
      others),
    el("p", { className: "legend", text: texts ? "Token colour: probability (red low, green high); hover for id and logprob." : "Token ids shown (the upstream cannot detokenize); hover for logprob." }),
    list, more, concat);
  // Turns come a page at a time as the list's end scrolls into view; the concat view
  // (the whole rollout's tokens) once every turn is in and it is seen.
  let upstream = null;
  const append = (page, decoded) => {
    list.append(...page.turns.map((it) => interactionCard(it, it.turn, decoded)));
    if (page.turns.length) upstream = page.turns[page.turns.length - 1].upstream;
    more.textContent = page.next_offset === null ? "" : page.next_offset + " of " + page.total + " turns shown; more as you scroll";
    if (page.next_offset === null) whenSeen(concat, loadConcat);
    return page.next_offset;
  };
  const loadConcat = async () => {
    const whole = await api(base + "/trajectory?style=concat");
    // Token-in-token-out: one exact sequence per branch, each shown with its links.
    const parts = Array.isArray(whole.branches) && whole.branches.length ? whole.branches : [whole];
    const all = parts.flatMap((b) => b.token_ids || []);
    const decoded = await decodeAll([{ upstream, completion_token_ids: [] }], all);
    await findGlyphs(parts.map((b) => [b.token_ids || [], upstream]), decoded);
    if (token !== viewToken) return false;
    parts.forEach((b, k) => {
      if (parts.length > 1) concat.append(branchHeader(b, whole.chain || []));
      concatCard(concat, b, decoded, k);
    });
    return false;
  };
  let next = append(first, texts);
  if (next === null) return;
  whenSeen(more, async () => {
    const page = await api(turnsPath(id, next));
    const decoded = await decodeAll(page.turns);
    await findGlyphs(shownSequences(page.turns), decoded);
    if (token !== viewToken) return false;
    next = append(page, decoded);
    return next !== null;
  });
}

// ---- replay diff ---------------------------------------------------------

function firstDivergence(a, b) {
  const turns = Math.max(a.length, b.length);
  for (let t = 0; t < turns; t++) {
    const x = a[t] ? choices(a[t])[0].ids : null;
    const y = b[t] ? choices(b[t])[0].ids : null;
    if (!x || !y) return { turn: t, position: 0, a: x ? x[0] : undefined, b: y ? y[0] : undefined };
    const n = Math.max(x.length, y.length);
    for (let p = 0; p < n; p++) if (x[p] !== y[p]) return { turn: t, position: p, a: x[p], b: y[p] };
  }
  return null;
}

function diffColumn(title, interactions, other, div, side, texts) {
  return el("div", { className: "diff-col", dataset: { side } }, el("h2", { text: title }),
    interactions.map((it, t) => {
      const mine = choices(it)[0];
      const theirs = other[t] ? choices(other[t])[0].ids : [];
      return el("div", { className: "card" },
        el("div", { className: "meta" }, el("span", {}, "turn ", el("b", { text: t })), el("span", {}, "seed ", el("b", { text: Array.isArray(it.seed) ? it.seed.join(", ") : fmt(it.seed) }))),
        el("div", { className: "tokens" }, tokenStrip(mine.ids, mine.logprobs, texts, (p) => {
          let cls = mine.ids[p] === theirs[p] ? "same" : "differs";
          if (div && div.turn === t && div.position === p) cls += " diverge";
          return cls;
        })));
    }));
}

async function diffView(a, b) {
  const token = viewToken;
  const [ta, tb] = await Promise.all([a, b].map((s) => api("/sessions/" + enc(s) + "/trajectory")));
  const texts = await decodeAll(ta.interactions.concat(tb.interactions));
  await findGlyphs(shownSequences(ta.interactions.concat(tb.interactions)), texts);
  if (token !== viewToken) return;
  const div = firstDivergence(ta.interactions, tb.interactions);
  const label = (t) => (t === undefined ? "(none)" : (texts && texts[String(t)] !== undefined ? JSON.stringify(texts[String(t)]) + " " : "") + "id " + t);
  const banner = div
    ? el("div", { className: "divergence", id: "divergence", dataset: { turn: div.turn, position: div.position, a: fmt(div.a), b: fmt(div.b) } },
      "First divergence: turn " + div.turn + ", position " + div.position + ": " + a + " has " + label(div.a) + ", " + b + " has " + label(div.b))
    : el("div", { className: "nodiff", id: "divergence", text: "No divergence: every completion token matches." });
  show(el("h1", { text: "Replay diff" }),
    el("div", { className: "meta" }, el("span", {}, "identities ", el("b", { text: ta.identity + " / " + tb.identity }))),
    ta.identity !== tb.identity ? el("p", { className: "error", text: "These sessions replay different identities." }) : null,
    banner,
    el("p", { className: "legend", text: "Dimmed: the same token at the same turn and position in both." }),
    el("div", { className: "cols" },
      diffColumn(a, ta.interactions, tb.interactions, div, "a", texts),
      diffColumn(b, tb.interactions, ta.interactions, div, "b", texts)));
}

// ---- routing -------------------------------------------------------------

function route() {
  viewToken += 1;
  document.getElementById("forget-key").hidden = !key();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  let work;
  if (parts[0] === "session" && parts.length === 2) work = sessionView(parts[1]);
  else if (parts[0] === "diff" && parts.length === 3) work = diffView(parts[1], parts[2]);
  else work = Promise.resolve(listView(new URLSearchParams(query || "")));
  work.catch(fail);
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORE);
    route();
  });
  route();
});
