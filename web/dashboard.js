// cadre's dashboard. Talks to the trainings API with the bearer token kept in sessionStorage.
// Routes: #/ (the job list), #/jobs/<id> (one job: state, live log, metric curves, cancel, and
// its model with a deploy button), #/deployments (the online deployments: state, model,
// restarts, why one failed, delete).
"use strict";

const VERSION = "2020-09-01";
const COLORS = ["#e63946", "#1d6fb8", "#2a9d8f", "#f4a261", "#6a4c93"];
const $ = (id) => document.getElementById(id);
let refreshTimer = null;
let logAbort = null;

function token() { return sessionStorage.getItem("cadre-token"); }

async function api(method, path, body) {
  const sep = path.includes("?") ? "&" : "?";
  const headers = { Authorization: `Bearer ${token()}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(`${path}${sep}version=${VERSION}`, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401) { signOut(NO_LONGER_VALID); throw new Error("signed out"); }
  return r;
}

function show(section) {
  for (const id of ["sign-in", "jobs", "job", "deployments"]) $(id).hidden = id !== section;
  $("nav").hidden = section === "sign-in";
}

function stopUpdates() {
  clearTimeout(refreshTimer);
  refreshTimer = null;
  if (logAbort) { logAbort.abort(); logAbort = null; }
}

// Said when a token that signed in stops working: revoked (`cadre users revoke`), or the
// server's data was replaced.
const NO_LONGER_VALID =
  "Signed out: your token is no longer accepted by this server (it may have been revoked). " +
  "Paste a valid token.";

function signOut(why) {
  sessionStorage.removeItem("cadre-token");
  $("sign-in-error").textContent = typeof why === "string" ? why : "";
  stopUpdates();
  $("who").textContent = "";
  $("sign-out").hidden = true;
  show("sign-in");
}

async function signIn(candidate) {
  const r = await fetch("/v1/me", { headers: { Authorization: `Bearer ${candidate}` } });
  if (!r.ok) {
    $("sign-in-error").textContent = "That token is not valid on this server.";
    return false;
  }
  const me = await r.json();
  sessionStorage.setItem("cadre-token", candidate);
  $("who").textContent = `${me.name} (${me.plan.name} plan)`;
  $("sign-out").hidden = false;
  $("sign-in-error").textContent = "";
  return true;
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

// The list shows one page of trainings, newest first: PAGE of them (the API's largest page)
// unless the address says otherwise (#/?start=200, #/?start=4&limit=2).
const PAGE = 200;

function listPage() {
  const query = new URLSearchParams((location.hash.match(/^#\/\?(.*)$/) || [])[1] || "");
  const number = (name, fallback, max) => {
    const v = Number(query.get(name));
    return query.has(name) && Number.isInteger(v) && v >= 0 ? Math.min(v, max) : fallback;
  };
  return { start: number("start", 0, 1e15), limit: Math.max(1, number("limit", PAGE, PAGE)) };
}

function pageLink(id, start, limit, shown) {
  const a = $(id);
  a.hidden = !shown;
  a.href = `#/?start=${start}` + (limit === PAGE ? "" : `&limit=${limit}`);
}

async function showJobs() {
  show("jobs");
  const { start, limit } = listPage();
  const r = await api("GET", `/ml/v4/trainings?limit=${limit}&start=${start}`);
  const list = await r.json();
  const total = list.total_count;
  const shown = list.resources.length;
  $("jobs-range").textContent =
    total === 0 ? "" :
    start === 0 && shown === total ? `${total} training${total === 1 ? "" : "s"}` :
    shown === 0 ? `None from number ${start + 1}: ${total} in all` :
    start === 0 ? `Newest ${shown} of ${total} trainings` :
    `Trainings ${start + 1}\u2013${start + shown} of ${total}, newest first`;
  pageLink("newer", Math.max(0, start - limit), limit, start > 0);
  pageLink("older", start + limit, limit, start + shown < total);
  const rows = $("job-rows");
  rows.replaceChildren();
  for (const t of list.resources) {
    const tr = document.createElement("tr");
    const link = document.createElement("a");
    link.href = `#/jobs/${t.metadata.id}`;
    link.textContent = t.metadata.id;
    const id = document.createElement("td");
    id.appendChild(link);
    const state = t.entity.status.state;
    tr.append(id, cell(t.metadata.name), cell(state, `state state-${state}`),
              cell(String((t.entity.hardware_spec || {}).nodes || 1)), cell(t.metadata.created_at));
    rows.appendChild(tr);
  }
  $("no-jobs").hidden = total > 0;
  refreshTimer = setTimeout(route, 2000);
}

// Draws each metric as a polyline over the iterations, each scaled to its own range.
function drawChart(points) {
  const svg = $("chart");
  const legend = $("legend");
  svg.replaceChildren();
  legend.replaceChildren();
  const names = [...new Set(points.flatMap((p) => Object.keys(p.ml_metrics || {})))];
  const xs = points.map((p) => p.iteration);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const ns = "http://www.w3.org/2000/svg";
  names.forEach((name, i) => {
    const series = points.filter((p) => typeof (p.ml_metrics || {})[name] === "number");
    if (series.length === 0) return;
    const ys = series.map((p) => p.ml_metrics[name]);
    const [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    const sx = (x) => 20 + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * 600;
    const sy = (y) => 220 - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * 200;
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", series.map((p) => `${sx(p.iteration)},${sy(p.ml_metrics[name])}`).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", COLORS[i % COLORS.length]);
    line.setAttribute("stroke-width", "2");
    line.setAttribute("class", `curve curve-${name}`);
    svg.appendChild(line);
    const label = document.createElement("span");
    label.style.color = COLORS[i % COLORS.length];
    label.textContent = `${name}: ${ys[ys.length - 1].toPrecision(4)}`;
    legend.appendChild(label);
  });
}

// Follows the job's log as server-sent events over a streamed fetch (EventSource cannot send the
// token): each event's data is one line, its id the line's number. A stream that breaks before the
// job's `end` event (the server restarted, say) is taken up again after the last line shown.
async function followLog(id) {
  const log = $("log");
  log.textContent = "";
  const abort = new AbortController();
  logAbort = abort;
  let last = 0;
  while (!abort.signal.aborted) {
    try {
      const r = await fetch(
        `/ml/v4/trainings/${id}/logs?follow=true&since=${last}&version=${VERSION}`, {
          headers: { Authorization: `Bearer ${token()}`, Accept: "text/event-stream" },
          signal: abort.signal });
      // Not found (deleted) or signed out: nothing more to follow. 503: the server streams as
      // many logs as it will; try again.
      if (!r.ok && r.status !== 503) return;
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let pending = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        pending += decoder.decode(value, { stream: true });
        const events = pending.split("\n\n");
        pending = events.pop();
        let text = "";
        let ended = false;
        for (const event of events) {
          const fields = event.split("\n");
          if (fields.includes("event: end")) { ended = true; continue; }
          for (const f of fields) {
            if (f.startsWith("id: ")) last = Number(f.slice(4));
            if (f.startsWith("data: ")) text += f.slice(6) + "\n";
          }
        }
        const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        log.textContent += text;
        if (atBottom) log.scrollTop = log.scrollHeight;
        if (ended) return;
      }
    } catch (e) {
      if (e.name === "AbortError") return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

// Polls the job until it ends; while the server cannot be reached (restarting) it keeps trying.
async function refreshJob(id) {
  let r;
  try {
    r = await api("GET", `/ml/v4/trainings/${id}`);
  } catch (e) {
    if (e.message === "signed out") return;
    $("job-message").textContent = "(the server cannot be reached; trying again)";
    refreshTimer = setTimeout(() => refreshJob(id), 2000);
    return;
  }
  if (r.status === 404) { $("job-state").textContent = "not found"; return; }
  const t = await r.json();
  const s = t.entity.status;
  $("job-name").textContent = t.metadata.name;
  $("job-id").textContent = t.metadata.id;
  $("job-state").textContent = s.state;
  $("job-state").className = `state state-${s.state}`;
  $("job-message").textContent = s.message ? `(${s.message.text})` : "";
  $("job-failure").textContent = s.failure ? s.failure.errors.map((e) => e.message).join("\n") : "";
  $("cancel").hidden = ["completed", "failed", "canceled"].includes(s.state);
  drawChart(s.metrics || []);
  if (!["completed", "failed", "canceled"].includes(s.state)) {
    refreshTimer = setTimeout(() => refreshJob(id), 1000);
  } else if (s.state === "completed") {
    await showModel(id, t.metadata.name);
  }
}

// The completed training's stored model (cadre.save_model), with a button that deploys it.
async function showModel(id, name) {
  const r = await api("GET", `/ml/v4/models?training_id=${encodeURIComponent(id)}`);
  const model = r.ok ? (await r.json()).resources[0] : undefined;
  $("job-model").hidden = !model;
  if (!model) return;
  $("job-model-id").textContent = model.metadata.id;
  $("deploy").disabled = false;
  $("deploy").onclick = async () => {
    $("deploy").disabled = true;  // one deployment a click
    const d = await api("POST", "/ml/v4/deployments",
                        { name, online: {}, asset: { id: model.metadata.id } });
    const answer = await d.json();
    if (d.status !== 201) {
      $("deploy-error").textContent = answer.errors.map((e) => e.message).join("\n");
      $("deploy").disabled = false;
      return;
    }
    location.hash = "#/deployments";
  };
}

// One row per deployment, newest first; refreshed every 2 s.
async function showDeployments() {
  show("deployments");
  const r = await api("GET", "/ml/v4/deployments");
  const list = await r.json();
  const rows = $("deployment-rows");
  rows.replaceChildren();
  for (const d of list.resources) {
    const s = d.entity.status;
    const why = s.failure ? s.failure.errors.map((e) => e.message).join("\n")
                          : (s.message ? s.message.text : "");
    const remove = document.createElement("button");
    remove.textContent = "Delete";
    remove.className = "delete";
    remove.onclick = async () => {
      remove.disabled = true;
      const answer = await api("DELETE", `/ml/v4/deployments/${d.metadata.id}`);
      $("deployments-error").textContent = answer.status === 204 || answer.status === 404 ? "" :
        `deleting ${d.metadata.id} answered ${answer.status}`;
      route();
    };
    const actions = document.createElement("td");
    actions.appendChild(remove);
    const tr = document.createElement("tr");
    tr.id = `deployment-${d.metadata.id}`;
    tr.append(cell(d.metadata.id), cell(d.metadata.name), cell(s.state, `state state-${s.state}`),
              cell(d.entity.asset.id), cell(String(d.entity.restarts)),
              cell(why, s.failure ? "message error" : "message"), actions);
    rows.appendChild(tr);
  }
  $("no-deployments").hidden = list.resources.length > 0;
  refreshTimer = setTimeout(route, 2000);
}

async function showJob(id) {
  show("job");
  $("cancel").onclick = async () => { await api("DELETE", `/ml/v4/trainings/${id}`); };
  $("job-model").hidden = true;
  $("deploy-error").textContent = "";
  followLog(id);
  await refreshJob(id);
}

async function route() {
  stopUpdates();
  if (!token()) { show("sign-in"); return; }
  const m = location.hash.match(/^#\/jobs\/([\w-]+)$/);
  try {
    if (m) await showJob(m[1]);
    else if (location.hash === "#/deployments") await showDeployments();
    else await showJobs();
  } catch (e) {
    if (e.message === "signed out") return;
    console.error(e);
    refreshTimer = setTimeout(route, 2000);  // the server cannot be reached: try again
  }
}

$("sign-in-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  if (await signIn($("token").value.trim())) route();
});
$("sign-out").addEventListener("click", signOut);
window.addEventListener("hashchange", route);
(async () => {
  if (token() && !(await signIn(token()))) signOut(NO_LONGER_VALID);
  route();
})();
