// The cluster view: each node named in `?nodes=<admin>,<admin>,...` (by default this one) is a row
// with its state, drain progress, rooms and their standbys, read every 250 ms; every move a drain makes is
// listed as its node pushes it (Server-Sent Events, read with fetch so they can carry the token).
// Every request uses the scheme this page came with, so with `admin_tls` all of it is HTTPS.
// When a node asks for the admin token, the page asks for it once and keeps it in this tab's
// session storage; it goes in the Authorization header, never in a URL.

const params = new URLSearchParams(location.search);
const admins = (params.get("nodes") ?? location.host).split(",").filter(Boolean);
const rows = document.getElementById("nodes");
const cell = (row, name) => row.querySelector(`.${name}`);
const TOKEN_KEY = "ferry-admin-token";
const login = document.getElementById("login");

/** The request headers: the admin token, once the page has one. */
function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** Those waiting for the person to give the token. */
let waiting = [];

/** A node asked for the token (or refused the one given): ask the person for it, and resolve
 * once they gave one, so a node is not asked again meanwhile. */
function needToken(row) {
  cell(row, "state").textContent = "needs the admin token";
  cell(row, "state").className = "state unreachable";
  login.hidden = false;
  return new Promise((resolve) => waiting.push(resolve));
}

login.addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  login.hidden = true;
  for (const resolve of waiting) resolve();
  waiting = [];
});

/** GET `path` on node `admin`, with the page's scheme and the token. */
function get(admin, path, signal) {
  return fetch(`${location.protocol}//${admin}${path}`, { headers: headers(), cache: "no-store", signal });
}

function rowFor(admin) {
  const row = document.createElement("tr");
  row.dataset.admin = admin;
  for (const name of ["node", "state", "drain", "rooms", "actors", "standby", "feed"]) {
    const td = document.createElement("td");
    td.className = name;
    row.append(td);
  }
  cell(row, "node").textContent = admin;
  rows.append(row);
  return row;
}

async function poll(admin, row) {
  try {
    const response = await get(admin, "/cluster/node");
    if (response.status === 401) return await needToken(row);
    const view = await response.json();
    row.dataset.node = view.node;
    cell(row, "node").textContent = view.node;
    const state = cell(row, "state");
    state.textContent = view.state;
    state.className = `state ${view.state}`;
    const drain = view.drain;
    cell(row, "drain").textContent = drain && drain.total ? `${drain.moved + drain.failed}/${drain.total} (${drain.failed} failed)` : "-";
    cell(row, "rooms").textContent = view.spots.join(" ");
    cell(row, "actors").textContent = view.actors;
    cell(row, "standby").textContent = standby(view.standby);
  } catch {
    cell(row, "state").textContent = "unreachable";
    cell(row, "state").className = "state unreachable";
  } finally {
    setTimeout(() => poll(admin, row), 250);
  }
}

/** A node's standbys in a few words: how many of its rooms a crash would keep, and how long the
 * oldest change their standbys do not hold has waited. */
function standby(s) {
  if (!s || s.rooms === 0) return "-";
  const oldest = s.oldest_unheld_ms === null ? "all held" : `oldest unheld ${s.oldest_unheld_ms} ms`;
  const alone = s.alone > 0 ? `, ${s.alone} with no node to hold a copy` : "";
  return `${s.current}/${s.rooms} current${alone}, ${oldest}`;
}

/** The events of an SSE body, as `[name, data]` pairs, as they arrive. */
async function* events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield [name, data.join("\n")];
    }
  }
}

const list = document.getElementById("moves");
function add(text) {
  const li = document.createElement("li");
  li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  list.prepend(li);
}

async function follow(admin, row) {
  const feed = cell(row, "feed");
  try {
    const response = await get(admin, "/cluster/moves");
    if (response.status === 401) {
      feed.textContent = "needs the admin token";
      await needToken(row);
    } else if (response.ok) {
      feed.textContent = "live";
      for await (const [name, data] of events(response.body)) {
        if (name === "move") {
          const move = JSON.parse(data);
          const pause = move.pause_ms === null ? "" : `, paused ${move.pause_ms.toFixed(1)} ms`;
          add(`${move.unit} ${move.from} → ${move.to}${pause}`);
        } else if (name === "failed") {
          const failed = JSON.parse(data);
          add(`${failed.unit} did not move: ${failed.reason}`);
        }
      }
      feed.textContent = "ended";
    }
  } catch {
    feed.textContent = "reconnecting";
  }
  setTimeout(() => follow(admin, row), 1000);
}

for (const admin of admins) {
  const row = rowFor(admin);
  poll(admin, row);
  follow(admin, row);
}
