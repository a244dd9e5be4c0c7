// The cluster view: each node named in `?nodes=<admin>,<admin>,...` (by default this one) is a row
// with its state, drain progress and rooms, read every 250 ms; every move a drain makes is
// listed as its node pushes it (Server-Sent Events).

const params = new URLSearchParams(location.search);
const admins = (params.get("nodes") ?? location.host).split(",").filter(Boolean);
const rows = document.getElementById("nodes");
const cell = (row, name) => row.querySelector(`.${name}`);

function rowFor(admin) {
  const row = document.createElement("tr");
  row.dataset.admin = admin;
  for (const name of ["node", "state", "drain", "rooms", "actors", "feed"]) {
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
    const view = await (await fetch(`http://${admin}/cluster/node`)).json();
    row.dataset.node = view.node;
    cell(row, "node").textContent = view.node;
    const state = cell(row, "state");
    state.textContent = view.state;
    state.className = `state ${view.state}`;
    const { total, moved, failed } = view.drain;
    cell(row, "drain").textContent = total ? `${moved + failed}/${total} (${failed} failed)` : "-";
    cell(row, "rooms").textContent = view.spots.join(" ");
    cell(row, "actors").textContent = view.actors;
  } catch {
    cell(row, "state").textContent = "unreachable";
    cell(row, "state").className = "state unreachable";
  } finally {
    setTimeout(() => poll(admin, row), 250);
  }
}

function follow(admin, row) {
  const feed = new EventSource(`http://${admin}/cluster/moves`);
  feed.onopen = () => (cell(row, "feed").textContent = "live");
  feed.onerror = () => (cell(row, "feed").textContent = "reconnecting");
  const list = document.getElementById("moves");
  const add = (text) => {
    const li = document.createElement("li");
    li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
    list.prepend(li);
  };
  feed.addEventListener("move", (event) => {
    const move = JSON.parse(event.data);
    const pause = move.pause_ms === null ? "" : `, paused ${move.pause_ms.toFixed(1)} ms`;
    add(`${move.unit} ${move.from} → ${move.to}${pause}`);
  });
  feed.addEventListener("failed", (event) => {
    const failed = JSON.parse(event.data);
    add(`${failed.unit} did not move: ${failed.reason}`);
  });
}

for (const admin of admins) {
  const row = rowFor(admin);
  poll(admin, row);
  follow(admin, row);
}
