// The practice page. Every action is the judge's own, asked of the local server (practice/_judge/web.py);
// the page only shows what it answers. Words come from the server (/api/ui), in both languages.
"use strict";

const TOKEN = document.querySelector('meta[name="tbh-token"]').content;
const S = {ui: null, lang: localStorage.getItem("tbh-lang") || (navigator.language.startsWith("zh") ? "zh" : "en"),
           ex: null, editor: null, digest: "", dirty: false, quiet: false, poll: null, conflict: false, gen: 0};
const $ = (sel) => document.querySelector(sel);

function t(key, fields) {
  let s = ((S.ui || {})[key] || {})[S.lang] || key;
  for (const [k, v] of Object.entries(fields || {})) s = s.replace(new RegExp("\\{" + k + "(:[^}]*)?\\}", "g"), v);
  return s;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== false && v != null) e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) if (k != null) e.append(k.nodeType ? k : String(k));
  return e;
}

// {ok, status, data}: every failure (no answer, a status that is not 200, a body that is not a JSON object)
// comes back as ok: false with data.error, one line the caller shows; nothing here throws.
async function api(method, path, body) {
  const sep = path.includes("?") ? "&" : "?";
  let r, text;
  try {
    r = await fetch(path + sep + "lang=" + S.lang, {method, headers: {"X-Token": TOKEN, "Content-Type": "application/json"},
                                                    body: body === undefined ? undefined : JSON.stringify(body)});
    text = await r.text();
  } catch (e) {
    const error = S.ui ? t("lost") : String(e);
    notice(error);
    return {ok: false, status: 0, data: {error}};
  }
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = null; }
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    return {ok: false, status: r.status, data: {error: t("bad_reply", {s: r.status})}};
  }
  if (!r.ok && typeof data.error !== "string") data = {error: t("bad_reply", {s: r.status})};
  if (r.ok) notice(null);
  return {ok: r.ok, status: r.status, data};
}

function notice(text) {
  const n = $("#notice");
  n.hidden = !text;
  n.textContent = text || "";
}

// ------------------------------------------------------------------------------------------ the list

async function showList() {
  stopPolling();
  S.ex = null;
  const r = await api("GET", "/api/list");
  if (!r.ok) return notice(r.data.error);
  const d = r.data;
  $("#progress").textContent = d.progress;
  const rows = d.exercises.map((x) => el("tr", {id: "row-" + x.id, "data-status": x.status, "data-passed": String(x.passed)},
    el("td", {class: "mark"}, x.passed ? "✓" : ""),
    el("td", {}, el("a", {href: "#/" + x.id}, x.id)),
    el("td", {}, el("a", {href: "#/" + x.id}, x.title)),
    el("td", {class: "hide-narrow"}, x.chapter),
    el("td", {class: "hide-narrow"}, x.level + (x.needs_torch ? " · PyTorch" : "")),
    el("td", {class: "s-" + x.status.replace("*", "")}, x.label)));
  $("#main").replaceChildren(
    el("h1", {}, t("list")),
    el("div", {class: "meta"}, d.progress),
    el("div", {class: "bar"}, el("div", {style: `width:${(100 * d.passed / d.total).toFixed(1)}%`})),
    d.next ? el("p", {id: "next"}, t("next"), el("a", {href: "#/" + d.next}, d.next + " · " +
                d.exercises.find((x) => x.id === d.next).title)) : el("p", {id: "next"}, t("all_passed")),
    el("div", {class: "table-wrap"}, el("table", {class: "list"},
      el("thead", {}, el("tr", {}, el("th", {}, hidden(t("passed_mark"))), el("th", {}, "#"), el("th", {}, t("exercise")),
                         el("th", {class: "hide-narrow"}, t("chapter")), el("th", {class: "hide-narrow"}, t("difficulty")),
                         el("th", {}, t("status")))),
      el("tbody", {}, rows))));
}

// ------------------------------------------------------------------------------------------ an exercise

async function showExercise(id) {
  const r = await api("GET", "/api/exercise/" + id);
  if (!r.ok) return notice(r.data.error);
  const x = r.data;
  S.ex = x; S.digest = x.digest; S.dirty = false; S.conflict = false;
  $("#main").replaceChildren(el("div", {class: "exercise"},
    el("section", {class: "statement", id: "statement"}),
    el("section", {},
      el("div", {class: "toolbar"},
        el("button", {id: "run", class: "primary", type: "button", onclick: run}),
        el("button", {id: "save", type: "button", onclick: () => save()}),
        el("button", {id: "hint", type: "button", onclick: hint}),
        el("button", {id: "solution", type: "button", onclick: solution}),
        el("button", {id: "reset", type: "button", onclick: reset}),
        el("span", {class: "state", id: "state"})),
      el("div", {id: "banner", class: "banner", hidden: true}),
      el("div", {class: "meta", id: "file"}),
      el("div", {id: "editor"}),
      el("div", {id: "report", class: "report"}),
      el("div", {id: "hints"}),
      el("div", {id: "solution-box"}))));
  S.editor = window.TBHEditor.create($("#editor"), x.text, {onChange: () => { if (!S.quiet) setDirty(true); }, onSave: save});
  S.editor.view.contentDOM.setAttribute("tabindex", "0");   // the scrolled region holds a focusable element
  paintExercise();
  goToLine(x.start_line);
  startPolling();
  showProgress();
}

async function showProgress() {
  const r = await api("GET", "/api/list");
  if (r.ok) $("#progress").textContent = r.data.progress;
}

function paintExercise() {
  const x = S.ex;
  const st = x.statement;
  $("#statement").replaceChildren(
    el("h1", {}, x.id + " · " + x.title[S.lang]),
    el("div", {class: "meta", id: "where"}, `${t("chapter_n", {n: x.chapter})} · ${x.level[S.lang]}`),
    el("div", {class: "tolerance", id: "tolerance"}, el("strong", {}, t("tolerance")),
       el("ul", {id: "tolerances"}, el("li", {class: "meta"}, "…"))),
    ...st[S.lang].slice(1).map((p) => el("p", {}, p)));
  api("GET", `/api/exercise/${x.id}/tolerance`).then((r) => {
    if (!r.ok || S.ex !== x) return;
    $("#tolerances").replaceChildren(...r.data.tolerances.map((g) =>
      el("li", {}, el("code", {}, g.function), (S.lang === "zh" ? "：" : ": ") + g.what + " · " + t("n_cases", {n: g.cases}))));
  });
  for (const k of ["run", "save", "hint", "solution", "reset"]) $("#" + k).textContent = t(k);
  $("#solution").disabled = !x.passed;
  $("#solution").title = x.passed ? "" : t("solution_locked");
  $("#file").textContent = t("file") + (S.lang === "zh" ? "：" : ": ") + x.file;
  S.editor.view.contentDOM.setAttribute("aria-label", t("editor", {f: x.file}));
  setDirty(S.dirty);
}

// The editor opened on line n (the first line of the function to fill in, below the statement): the cursor
// there and the editor scrolled to show it near its top; the page itself does not move.
function goToLine(n) {
  const view = S.editor.view, doc = view.state.doc;
  const line = doc.line(Math.min(Math.max(1, n || 1), doc.lines));
  const at = line.from + (line.text.length - line.text.trimStart().length);
  view.dispatch({selection: {anchor: at}});
  view.requestMeasure({read: () => view.lineBlockAt(at).top,
                       write: (top) => { view.scrollDOM.scrollTop = Math.max(0, top - 3 * view.defaultLineHeight); }});
  view.contentDOM.focus({preventScroll: true});
}

function hidden(text) {
  return el("span", {class: "visually-hidden"}, text);
}

function setDirty(d) {
  S.dirty = d;
  $("#state").textContent = d ? t("unsaved") : "";
}

function setText(text, digest) {
  S.quiet = true;
  S.editor.set(text);
  S.quiet = false;
  S.digest = digest;
  S.gen++;
  setDirty(false);
}

function busy(on) {
  for (const k of ["run", "hint", "reset", "save"]) $("#" + k).disabled = on;
  $("#solution").disabled = on || !S.ex.passed;
}

// Save the editor's text if it changed; false (and the banner) when the file on disk is not the one loaded.
async function save(force) {
  if (!S.dirty && !force) return true;
  const r = await api("POST", `/api/exercise/${S.ex.id}/save`, {text: S.editor.get(), digest: S.digest, force: !!force});
  if (r.status === 409) { showConflict(r.data.error); return false; }
  if (!r.ok) { notice(r.data.error); return false; }
  S.digest = r.data.digest;
  S.gen++;
  setDirty(false);
  hideConflict();
  $("#state").textContent = r.data.message;
  return true;
}

function showConflict(message) {
  S.conflict = true;
  const b = $("#banner");
  b.hidden = false;
  b.replaceChildren(el("div", {}, message || t("changed", {f: S.ex.file})),
    el("button", {id: "reload", type: "button", onclick: reloadFromDisk}, t("reload")),
    el("button", {id: "overwrite", type: "button", onclick: () => save(true)}, t("overwrite")));
}

function hideConflict() {
  S.conflict = false;
  $("#banner").hidden = true;
}

async function reloadFromDisk() {
  let kept = "";
  if (S.dirty) {                                            // never lost: the page's text goes to .backup/ first
    const k = await api("POST", `/api/exercise/${S.ex.id}/keep`, {text: S.editor.get()});
    if (!k.ok) return notice(k.data.error);
    kept = k.data.message;
  }
  const r = await api("GET", "/api/exercise/" + S.ex.id);
  if (!r.ok) return notice(r.data.error);
  setText(r.data.text, r.data.digest);
  hideConflict();
  $("#state").textContent = kept;
}

function startPolling() {
  stopPolling();
  S.poll = setInterval(async () => {
    if (!S.ex || S.conflict) return;
    const gen = S.gen;                                      // a save or load while asking: the answer is stale
    const r = await api("GET", `/api/exercise/${S.ex.id}/disk`);
    if (r.ok && S.ex && gen === S.gen && r.data.digest !== S.digest) showConflict();
  }, 2000);
}

function stopPolling() {
  if (S.poll) clearInterval(S.poll);
  S.poll = null;
}

async function run() {
  if (!(await save())) return;
  busy(true);
  $("#report").replaceChildren(el("p", {class: "meta"}, t("running", {s: S.ex.time_limit})));
  const r = await api("POST", `/api/exercise/${S.ex.id}/run`);
  busy(false);
  if (!r.ok) return failed(r.data.error);
  try {
    showReport(r.data);
  } catch (e) {                                             // an answer without the report's parts
    return failed(t("bad_reply", {s: r.status}) + " (" + e.message + ")");
  }
  S.ex.passed = r.data.passed;
  showProgress();
  $("#solution").disabled = !S.ex.passed;
}

function failed(message) {
  $("#report").replaceChildren(el("p", {class: "mistake", id: "run-error", role: "alert"}, message));
}

function num(v) {
  return typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(3)) : String(v);
}

function showReport(d) {
  const kids = [el("p", {class: "verdict s-" + d.status, id: "verdict"}, d.lines[0])];
  if (d.error) kids.push(el("p", {class: "mistake"}, d.error.message));
  if (d.cases.length) {
    const named = new Set();                                // each known mistake named once, as the terminal does
    const once = (m) => (m && !named.has(m) ? (named.add(m), m) : null);
    kids.push(el("div", {class: "table-wrap"}, el("table", {id: "cases"},
      el("thead", {}, el("tr", {}, el("th", {}, hidden(t("passed_mark"))), el("th", {}, t("function")), el("th", {}, t("case")), el("th", {}, t("result")))),
      el("tbody", {}, d.cases.map((c) => el("tr", {class: c.ok ? "s-pass" : (c.todo ? "s-todo" : "s-fail")},
        el("td", {class: "tick"}, c.ok ? "✓" : (c.todo ? "·" : "✗")), el("td", {}, c.function), el("td", {}, c.name),
        el("td", {}, c.ok ? "" : c.message, once(c.mistake) ? el("div", {class: "mistake"}, "→ " + c.mistake) : null)))))));
    const first = d.cases.find((c) => !c.ok && !c.todo);
    if (first && Object.keys(first.detail).length) {
      const rows = Object.entries(first.detail).map(([k, v]) => el("tr", {},
        el("td", {}, t("d_" + k)),
        el("td", {}, k === "within" ? (100 * v).toFixed(1) + "%" : Array.isArray(v) ? v.join(S.lang === "zh" ? "、" : ", ") : num(v))));
      kids.push(el("h2", {}, t("details"), " · ", first.function, S.lang === "zh" ? "：" : ": ", first.name),
                el("div", {class: "table-wrap"}, el("table", {class: "details", id: "details"}, el("tbody", {}, rows))));
    }
  }
  if (d.tiny) kids.push(el("p", {class: "meta"}, t("tiny")));
  kids.push(el("details", {}, el("summary", {}, t("terminal")), el("pre", {class: "out", id: "terminal"}, d.lines.join("\n"))));
  $("#report").replaceChildren(...kids);
}

async function hint() {
  if (!(await save())) return;
  busy(true);
  const r = await api("POST", `/api/exercise/${S.ex.id}/hint`);
  busy(false);
  if (!r.ok) return notice(r.data.error);
  $("#hints").replaceChildren(el("h2", {}, t("hint")), el("pre", {class: "out", id: "hint-text"}, r.data.lines.join("\n")));
}

async function solution() {
  const r = await api("POST", `/api/exercise/${S.ex.id}/solution`);
  if (!r.ok) return notice(r.data.error);
  $("#solution-box").replaceChildren(el("h2", {}, t("solution")), el("pre", {class: "out", id: "solution-text"}, r.data.text));
}

async function reset() {
  if (!confirm(t("confirm_reset", {id: S.ex.id}))) return;
  if (!(await save())) return;                              // the backup then holds the page's last text
  busy(true);
  const r = await api("POST", `/api/exercise/${S.ex.id}/reset`);
  busy(false);
  if (!r.ok) return notice(r.data.error);
  setText(r.data.text, r.data.digest);
  goToLine(r.data.start_line);
  $("#report").replaceChildren(el("pre", {class: "out", id: "reset-text"}, r.data.lines.join("\n")));
}

// ------------------------------------------------------------------------------------------ the frame

function paintFrame() {
  document.documentElement.lang = S.lang === "zh" ? "zh-CN" : "en";
  document.title = t("title");
  $("#home").textContent = t("title");
  $("#lang").textContent = t("lang");
}

async function route() {
  const id = location.hash.replace(/^#\/?/, "");
  if (id) await showExercise(id); else await showList();
}

async function start() {
  const r = await api("GET", "/api/ui");
  if (!r.ok) return notice(r.data.error);
  S.ui = r.data;
  paintFrame();
  $("#lang").addEventListener("click", async () => {
    S.lang = S.lang === "zh" ? "en" : "zh";
    localStorage.setItem("tbh-lang", S.lang);
    paintFrame();
    if (S.ex) paintExercise(); else await showList();
  });
  window.addEventListener("hashchange", () => {
    if (S.ex && S.dirty && location.hash !== "#/" + S.ex.id && !confirm(t("leave"))) {
      history.replaceState(null, "", "#/" + S.ex.id);       // stay, with the unsaved text
      return;
    }
    route();
  });
  window.addEventListener("beforeunload", (e) => { if (S.ex && S.dirty) { e.preventDefault(); e.returnValue = ""; } });
  document.addEventListener("keydown", (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key === "s" && S.ex) { e.preventDefault(); save(); }
  });
  await route();
}

start();
