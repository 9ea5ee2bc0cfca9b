// The review page: one proposal at a time, decisions sent to the server, which writes them
// to the review file at once. Every piece of file text is set with textContent (never as
// HTML). Keys and clicks go through one queue, so fast typing is applied in order, each key
// seeing the state the previous one left.
"use strict";

const GRADES = ["0 not relevant", "1 partially relevant", "2 moderately relevant", "3 highly relevant"];
const DONE = { accept: "accepted", grade: "graded", reject: "rejected", skip: "skipped" };
const token = document.querySelector('meta[name="review-token"]').content;
const state = { proposals: [], progress: null, index: 0, history: [] };
let queue = Promise.resolve();

function $(id) {
  return document.getElementById(id);
}

function setText(id, text) {
  $(id).textContent = text;
}

function showMessage(text) {
  const box = $("message");
  box.textContent = text;
  box.hidden = !text;
}

async function api(path, body) {
  const options = { headers: { "X-Review-Token": token }, cache: "no-store" };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data = null;
  try {
    data = await response.json();
  } catch (error) {
    throw new Error(`the server answered ${response.status} without JSON`);
  }
  if (!response.ok) {
    throw new Error(data && data.error ? data.error : `the server answered ${response.status}`);
  }
  return data;
}

function actionOf(proposal) {
  return proposal.decision ? proposal.decision.action : null;
}

// The next proposal after `from` (wrapping) with no decision, else the next skipped one,
// else `from` itself.
function nextOpen(from) {
  const count = state.proposals.length;
  for (const wanted of [null, "skip"]) {
    for (let step = 1; step <= count; step += 1) {
      const index = (from + step) % count;
      if (actionOf(state.proposals[index]) === wanted) return index;
    }
  }
  return from;
}

// The document's text with the query's words (3+ letters, matched at a word's start, so
// "heat" marks "heating") in <mark>: built from text nodes, never parsed as HTML.
function showText(element, text, query) {
  const words = [...new Set((query.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) || []).slice(0, 30))];
  element.replaceChildren();
  if (!words.length) {
    element.textContent = text;
    return;
  }
  // letters and digits only: nothing to escape
  const pattern = new RegExp(`(?<![\\p{L}\\p{N}])(?:${words.join("|")})`, "giu");
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    element.append(document.createTextNode(text.slice(last, match.index)));
    const mark = document.createElement("mark");
    mark.textContent = match[0];
    element.append(mark);
    last = match.index + match[0].length;
  }
  element.append(document.createTextNode(text.slice(last)));
}

function describeDecision(proposal) {
  const decision = proposal.decision;
  if (!decision) return "none yet";
  let text = DONE[decision.action] || decision.action;
  if (proposal.final_grade !== null) text += `: grade ${GRADES[proposal.final_grade]}`;
  else if (decision.action === "reject" && proposal.kind === "remove") text += ": the golden label stays";
  else if (decision.action === "reject") text += ": no label recorded";
  return `${text} (by ${decision.by}, ${decision.at})`;
}

function render() {
  const progress = state.progress;
  setText("decided", String(progress.decided));
  setText("total", String(progress.total));
  setText("skipped", String(progress.skipped));
  $("bar-fill").style.width = progress.total ? `${(100 * progress.decided) / progress.total}%` : "0%";
  $("done").hidden = !(progress.total > 0 && progress.decided === progress.total);
  $("loading").hidden = true;
  if (!state.proposals.length) {
    setText("position", "none (the review file has no proposals)");
    $("card").hidden = true;
    return;
  }
  const p = state.proposals[state.index];
  setText("position", `${state.index + 1} of ${progress.total}`);
  $("card").hidden = false;
  $("card").dataset.kind = p.kind;
  $("card").dataset.decision = actionOf(p) || "none";
  setText("kind", p.kind === "add" ? "add" : "remove");
  setText(
    "kind-help",
    p.kind === "add"
      ? "Unjudged in the golden set; the judge proposes a grade for it."
      : `The golden set grades this ${p.current}; the judge says 0. Accept sets 0, reject keeps ${p.current}.`
  );
  setText("query-id", p.query_id);
  setText("query", p.query);
  setText("doc-id", p.doc_id);
  setText("rank", `best rank ${p.rank}`);
  showText($("text"), p.text, p.query);
  setText("judge-grade", GRADES[p.grade] || String(p.grade));
  setText("confidence", p.confidence === null ? "not given" : p.confidence.toFixed(2));
  setText("current", p.current === null ? "unjudged" : GRADES[p.current] || String(p.current));
  setText("sources", p.sources.join(", "));
  setText("reason", p.reason);
  setText("decision", describeDecision(p));
}

async function load() {
  const data = await api("api/review");
  state.proposals = data.proposals;
  state.progress = data.progress;
  state.index = data.resume;
  const header = data.header;
  const judge = header.judge && header.judge.model ? ` · judge ${header.judge.model}` : "";
  setText("file", `${data.file} · golden ${header.golden}${judge}`);
  render();
}

// Someone else wrote the file (the command line, another window): take its state, staying
// on the same proposal when it is still there.
async function refresh() {
  const key = JSON.stringify(state.proposals[state.index].key);
  const data = await api("api/review");
  const index = data.proposals.findIndex((p) => JSON.stringify(p.key) === key);
  state.proposals = data.proposals;
  state.progress = data.progress;
  state.index = index >= 0 ? index : data.resume;
  state.history = [];
}

function countsMatch(progress) {
  const actions = state.proposals.map(actionOf);
  const skipped = actions.filter((a) => a === "skip").length;
  const undecided = actions.filter((a) => a === null).length;
  return (
    progress.total === actions.length &&
    progress.skipped === skipped &&
    progress.undecided === undecided
  );
}

async function send(index, action, grade) {
  const proposal = state.proposals[index];
  const data = await api("api/decision", { key: proposal.key, action, grade });
  state.proposals[index] = data.proposal;
  state.progress = data.progress;
  showMessage("");
  if (!countsMatch(data.progress)) await refresh();
}

async function decide(action, grade) {
  if (!state.proposals.length) return;
  const index = state.index;
  await send(index, action, grade);
  state.history.push(index);
  state.index = nextOpen(index);
  render();
}

async function undo() {
  if (!state.proposals.length) return;
  const index = state.history.length ? state.history.pop() : state.index;
  state.index = index;
  if (state.proposals[index].decision === null) {
    render();
    showMessage("Nothing to undo here.");
    return;
  }
  await send(index, "undo", null);
  render();
}

function move(step) {
  const count = state.proposals.length;
  if (!count) return;
  state.index = Math.min(count - 1, Math.max(0, state.index + step));
  render();
}

function perform(command) {
  queue = queue
    .then(() => {
      if (state.progress === null) return undefined;
      if (command.move) return move(command.move);
      if (command.action === "undo") return undo();
      return decide(command.action, command.grade === undefined ? null : command.grade);
    })
    .catch((error) => {
      showMessage(`Not saved: ${error.message}`);
      render();
    });
}

const KEYS = {
  a: { action: "accept" },
  r: { action: "reject" },
  s: { action: "skip" },
  u: { action: "undo" },
  0: { action: "grade", grade: 0 },
  1: { action: "grade", grade: 1 },
  2: { action: "grade", grade: 2 },
  3: { action: "grade", grade: 3 },
  j: { move: 1 },
  ArrowDown: { move: 1 },
  ArrowRight: { move: 1 },
  k: { move: -1 },
  ArrowUp: { move: -1 },
  ArrowLeft: { move: -1 },
};

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
  const command = Object.prototype.hasOwnProperty.call(KEYS, event.key) ? KEYS[event.key] : null;
  if (!command) return;
  event.preventDefault();
  if (event.repeat && !command.move) return; // a held key decides once, not down the list
  perform(command);
});

document.addEventListener("click", (event) => {
  const button = event.target.closest("button");
  if (!button) return;
  if (button.dataset.move) perform({ move: Number(button.dataset.move) });
  else if (button.dataset.grade) perform({ action: "grade", grade: Number(button.dataset.grade) });
  else if (button.dataset.action) perform({ action: button.dataset.action });
  button.blur();
});

load().catch((error) => {
  $("loading").hidden = true;
  showMessage(`Could not load the review file: ${error.message}`);
});
