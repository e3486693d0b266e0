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

let selected = 0;
function select(i) {
  const qs = questions();
  if (qs.length === 0) return;
  selected = Math.max(0, Math.min(i, qs.length - 1));
  qs.forEach((q, j) => q.classList.toggle("selected", j === selected));
  qs[selected].scrollIntoView({ block: "nearest" });
}

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
    select(selected);
  });

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || typing()) return;
    const q = questions()[selected];
    if (!q) return;
    switch (e.key) {
      case "j": select(selected + 1); break;
      case "k": select(selected - 1); break;
      case "a": q.querySelector("button.allow").click(); break;
      case "r": q.querySelector("form.reject input[name=reason]").focus(); break;
      default: return;
    }
    e.preventDefault();
  });
}
