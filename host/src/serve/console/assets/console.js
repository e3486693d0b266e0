"use strict";
// The Pending page's live updates and keys. Everything here is progressive: without this
// script the pages work with plain forms and reloads.

// Whether the person is typing (a reason, a rule): never reload under them.
function typing() {
  const a = document.activeElement;
  return !!a && ["INPUT", "SELECT", "TEXTAREA"].includes(a.tagName);
}

function questions() {
  return Array.from(document.querySelectorAll("article.question"));
}

function recount() {
  const count = document.getElementById("count");
  if (count) count.textContent = "(" + questions().length + ")";
}

// The selected question, by id: a live update (a question arriving or leaving, a reload) never
// moves the selection to another question. It survives the page's reloads in sessionStorage;
// a selected question that left leaves nothing selected until the person picks again.
const SELECTED = "approval-host-selected";
let selectedId = null;
function select(id) {
  selectedId = id;
  if (id) sessionStorage.setItem(SELECTED, id);
  questions().forEach((q) => q.classList.toggle("selected", q.id === id));
  const q = id && document.getElementById(id);
  if (q) q.scrollIntoView({ block: "nearest" });
}
function move(step) {
  const qs = questions();
  if (qs.length === 0) return;
  const i = qs.findIndex((q) => q.id === selectedId);
  const next = i < 0 ? 0 : Math.max(0, Math.min(i + step, qs.length - 1));
  select(qs[next].id);
}
if (document.querySelector("[data-live]")) {
  const stored = sessionStorage.getItem(SELECTED);
  const qs = questions();
  if (qs.length === 0) sessionStorage.removeItem(SELECTED);
  else if (stored === null) select(qs[0].id);
  else select(document.getElementById(stored) ? stored : null);
}
// Answering a question (it leaves) selects its neighbour for the page that comes next: the
// person's own act, never a live update, moves the selection.
document.addEventListener("submit", (e) => {
  const q = e.target.closest && e.target.closest("article.question");
  if (!q) return;
  const qs = questions();
  const i = qs.indexOf(q);
  const next = qs[i + 1] || qs[i - 1];
  if (next) sessionStorage.setItem(SELECTED, next.id);
  else sessionStorage.removeItem(SELECTED);
});
// A click in a question selects it.
document.addEventListener("mousedown", (e) => {
  const q = e.target.closest && e.target.closest("article.question");
  if (q) select(q.id);
});

const live = document.querySelector("[data-live]");
if (live) {
  const stream = new EventSource(live.dataset.live);
  const refresh = () => {
    if (typing()) document.getElementById("stale").hidden = false;
    else location.reload();
  };
  // The stream opens with the version it starts from: anything the page missed while it loaded
  // (a reload, a slow start) shows as a different version.
  stream.addEventListener("hello", (e) => {
    if (e.data !== live.dataset.version) refresh();
    else live.dataset.ready = "yes";
  });
  stream.addEventListener("arrived", refresh);
  stream.addEventListener("reload", refresh);
  // A stream refused for good (the login ended: logged out, revoked, or the server restarted
  // and forgot it) would leave a page that says nothing is waiting while questions wait.
  stream.addEventListener("error", () => {
    if (stream.readyState === EventSource.CLOSED) {
      document.getElementById("lost").hidden = false;
      delete live.dataset.ready;
    }
  });
  // A question that left (answered, cancelled, timed out) goes at once, with how it ended.
  stream.addEventListener("left", (e) => {
    const d = JSON.parse(e.data);
    const q = document.getElementById("q-" + d.id);
    if (q) q.remove();
    const recent = document.getElementById("recent");
    if (recent && !document.getElementById("left-" + d.id)) {
      const li = document.createElement("li");
      li.id = "left-" + d.id;
      const tool = document.createElement("code");
      tool.textContent = d.tool;
      li.append(tool, " (" + d.session + "): " + d.ending);
      recent.prepend(li);
    }
    if (questions().length === 0 && !document.querySelector("p.empty")) {
      const empty = document.createElement("p");
      empty.className = "empty";
      empty.textContent = "No question is waiting.";
      live.append(empty);
    }
    recount();
    if (selectedId === d.id) select(null);
  });

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || typing()) return;
    if (e.key === "j" || e.key === "k") {
      move(e.key === "j" ? 1 : -1);
      e.preventDefault();
      return;
    }
    // The question that has the focus, else the selected one.
    const focused = document.activeElement && document.activeElement.closest("article.question");
    const q = focused || (selectedId && document.getElementById(selectedId));
    if (!q) return;
    switch (e.key) {
      case "a": q.querySelector("button.allow").click(); break;
      case "r": q.querySelector("form.reject input[name=reason]").focus(); break;
      default: return;
    }
    e.preventDefault();
  });
}
