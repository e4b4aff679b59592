// The run page, live: follows GET /runs/{id}/live (server-sent events, docket/ui/live.py).
//
// - each committed event is appended to the timeline (the browser's EventSource resumes
//   after the last event id it saw, so a dropped connection loses and repeats nothing);
// - emissions (node output such as LLM tokens) go to the "Live output" box;
// - after a checkpoint commits, the page's own HTML is fetched again and every region
//   marked data-live is swapped for its new version, except a region holding a form the
//   person has started filling in (it is refreshed on a later commit instead);
// - "end" (the run is terminal, every event sent) refreshes once more and stops.
//
// No framework, no inline script (the console's CSP forbids it): text goes in with
// textContent only, never as HTML.
(function () {
  "use strict";
  const anchor = document.getElementById("live");
  if (!anchor || typeof EventSource === "undefined") return;
  const streamUrl = anchor.dataset.stream;
  const pageUrl = anchor.dataset.page;
  const list = document.getElementById("timeline-list");
  const count = document.getElementById("event-count");
  const outputCard = document.getElementById("live-output");
  const outputText = document.getElementById("live-text");
  const OUTPUT_LIMIT = 200000; // characters kept in the live output box
  let lastSeq = 0;
  if (list) {
    for (const seq of list.querySelectorAll(".ev-seq")) {
      const n = parseInt(seq.textContent.replace("#", ""), 10);
      if (n > lastSeq) lastSeq = n;
    }
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function appendEvent(e) {
    if (!list || e.seq <= lastSeq) return;
    lastSeq = e.seq;
    const empty = list.querySelector("li.empty");
    if (empty) empty.remove();
    const li = el("li", "ev ev-" + e.type + " ev-live");
    li.dataset.seq = String(e.seq);
    li.append(el("span", "ev-seq", "#" + e.seq), " ");
    li.append(el("span", "ev-time", e.time), " ");
    li.append(el("span", "ev-type", e.type.replace(/_/g, " ")), " ");
    const what = el("span", "ev-what");
    if (e.node_id) what.append(el("code", null, e.node_id), " ");
    else if (e.channel_id) what.append(el("code", "muted", e.channel_id), " ");
    what.append(el("span", "ev-step", "step " + e.step));
    li.append(what);
    if (e.error) {
      const details = el("details", "ev-error");
      const summary = el("summary", null, "raised ");
      summary.append(el("code", null, e.error.type), ": " + e.error.message);
      details.append(summary);
      li.append(" ", details);
    }
    if (e.summary) {
      const details = el("details", "ev-payload");
      details.append(el("summary", null, e.summary));
      details.append(el("pre", "json small", e.pretty || "(large payload: see the run's history)"));
      li.append(" ", details);
    }
    list.append(li);
    if (count) count.textContent = String(e.seq);
  }

  function appendOutput(m) {
    if (!outputText) return;
    let text;
    if (typeof m.data === "string") text = m.data;
    else text = "\n[" + m.node_id + " " + m.kind + "] " + JSON.stringify(m.data) + "\n";
    let all = outputText.textContent + text;
    if (all.length > OUTPUT_LIMIT) all = all.slice(all.length - OUTPUT_LIMIT);
    outputText.textContent = all;
    outputText.scrollTop = outputText.scrollHeight;
    if (outputCard) outputCard.hidden = false;
  }

  // a region the person is using: typed into, a choice changed, or focused
  function inUse(region) {
    if (region.contains(document.activeElement) && document.activeElement !== document.body) {
      const tag = document.activeElement.tagName;
      if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT") return true;
    }
    for (const field of region.querySelectorAll("input, textarea, select")) {
      if (field.type === "hidden" || field.type === "submit") continue;
      if (field.type === "radio" || field.type === "checkbox") {
        if (field.checked !== field.defaultChecked) return true;
      } else if (field.tagName === "SELECT") {
        for (const option of field.options) {
          if (option.selected !== option.defaultSelected) return true;
        }
      } else if (field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  let fetching = false;
  let again = false;
  async function refresh() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      do {
        again = false;
        const response = await fetch(pageUrl, { credentials: "same-origin" });
        if (!response.ok) break;
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        for (const region of document.querySelectorAll("[data-live]")) {
          if (!region.id || inUse(region)) continue;
          const next = fresh.getElementById(region.id);
          if (next) region.replaceWith(document.importNode(next, true));
          else region.remove(); // gone from the page (e.g. the edit form once it is done)
        }
        // regions the run grew since the page was drawn (e.g. the edit form once it waits)
        for (const region of fresh.querySelectorAll("[data-live]")) {
          if (!region.id || document.getElementById(region.id)) continue;
          const before = region.previousElementSibling;
          const place = before && before.id ? document.getElementById(before.id) : null;
          if (place) place.after(document.importNode(region, true));
        }
      } while (again);
    } catch (err) {
      // a failed refresh is retried on the next commit
    } finally {
      fetching = false;
    }
    document.body.dataset.liveRefreshed = String(Date.now());
  }

  const REFRESH_ON = new Set([
    "checkpoint_committed",
    "run_completed",
    "run_failed",
    "run_cancelled",
    "state_edited",
  ]);
  const source = new EventSource(streamUrl);
  document.body.dataset.live = "connecting";
  source.onopen = function () {
    document.body.dataset.live = "open";
  };
  source.addEventListener("event", function (message) {
    const e = JSON.parse(message.data);
    appendEvent(e);
    if (REFRESH_ON.has(e.type)) refresh();
  });
  source.addEventListener("emission", function (message) {
    appendOutput(JSON.parse(message.data));
  });
  source.addEventListener("pruned", function (message) {
    const p = JSON.parse(message.data);
    if (list && p.last_seq > lastSeq) {
      list.append(el("li", "empty", "events #" + p.first_seq + "–#" + p.last_seq + " were pruned"));
      lastSeq = p.last_seq;
    }
  });
  source.addEventListener("failed", function (message) {
    document.body.dataset.live = "failed: " + JSON.parse(message.data).message;
  });
  source.addEventListener("end", function () {
    source.close();
    document.body.dataset.live = "ended";
    refresh();
  });
})();
