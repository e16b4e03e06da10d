"use strict";
// Every page's script. Nothing an action needs is here: the forms work
// without it. What it works on is named by data- attributes.

// Times: <time data-ms> in the reader's own zone, with how long ago (or
// how soon), kept current.
function span(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m";
  const h = Math.floor(m / 60);
  if (h < 48) return h + "h" + (m % 60 ? (m % 60) + "m" : "");
  return Math.floor(h / 24) + "d";
}
function clock(d) {
  const now = new Date();
  const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (d.toDateString() === now.toDateString()) return hm;
  return d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + hm;
}
function times(root) {
  const now = Date.now();
  for (const t of root.querySelectorAll("time[data-ms]")) {
    const at = Number(t.dataset.ms);
    const d = new Date(at);
    const diff = at - now;
    const text = Math.abs(diff) < 10000 ? "just now"
      : diff > 0 ? "in " + span(diff) + " (" + clock(d) + ")"
      : span(diff) + " ago (" + clock(d) + ")";
    if (t.textContent !== text) t.textContent = text;
    t.title = d.toLocaleString();
  }
}
times(document);
setInterval(() => times(document), 5000);

// A live list: its rows come as [key, html] pairs, in order; a row is
// replaced only when it changed, so a click on a row that did not change
// always lands. Rows are compared as the server made them: each <time>
// with its own text, whatever the clock above made of it.
function norm(node) {
  const copy = node.cloneNode(true);
  for (const t of copy.querySelectorAll("time")) {
    t.textContent = t.getAttribute("datetime");
    t.removeAttribute("title");
  }
  return copy.outerHTML;
}
for (const body of document.querySelectorAll("tbody[data-live]")) {
  const source = new EventSource(body.dataset.live);
  source.onmessage = (e) => {
    const rows = JSON.parse(e.data);
    const keep = new Set(rows.map((r) => r[0]));
    for (const tr of Array.from(body.children)) {
      if (!keep.has(tr.dataset.key)) tr.remove();
    }
    let prev = null;
    for (const [key, html] of rows) {
      const t = document.createElement("template");
      t.innerHTML = html;
      const fresh = t.content.firstElementChild;
      let tr = Array.from(body.children).find((r) => r.dataset.key === key);
      if (!tr || norm(tr) !== norm(fresh)) {
        times(fresh);
        if (tr) tr.replaceWith(fresh);
        tr = fresh;
      }
      const want = prev ? prev.nextElementSibling : body.firstElementChild;
      if (tr !== want) body.insertBefore(tr, want);
      prev = tr;
    }
  };
}

// A log followed as it grows: new lines (already escaped, colours as
// spans) appended; the page follows the end unless the reader scrolled
// up; the job's state shown as it changes; the stream closed at its end.
// A search hides the lines without its text, new ones included.
const log = document.querySelector("pre.log");
const find = document.getElementById("log-search");
function search(lines) {
  const text = find ? find.value.toLowerCase() : "";
  for (const line of lines) {
    line.hidden = text !== "" && !line.textContent.toLowerCase().includes(text);
  }
}
if (find && log) find.addEventListener("input", () => search(log.children));
if (log && log.dataset.follow) {
  const source = new EventSource(log.dataset.follow);
  const atEnd = () => window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  source.onmessage = (e) => {
    const follow = atEnd();
    const before = log.children.length;
    log.insertAdjacentHTML("beforeend", e.data);
    search(Array.from(log.children).slice(before));
    if (follow) window.scrollTo(0, document.body.scrollHeight);
  };
  source.addEventListener("state", (e) => {
    const state = JSON.parse(e.data);
    const shown = document.getElementById("state");
    if (shown) shown.innerHTML = state.html;
    if (state.terminal) {
      source.close();
      for (const f of document.querySelectorAll("[data-while-live]")) f.remove();
    }
  });
}
