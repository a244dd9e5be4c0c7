// The play page: a console for the node's own game. It binds a player Actor through this node's
// WebSocket gateway, sends it inputs written as JSON (the game's message type, as serde writes
// it), checks that each push's number is the one after the last, and polls where the room runs,
// so a person sees the room move while the session stays.
// Query (each optional; the form asks for what is missing): player, room, input (JSON), token
// (a player token; typing it into the form keeps it out of the address), auto=1 to play at once
// and send the input every 200 ms, and spot=<factory>&actor=<factory> to create the room and the
// player in it first (on a development node whose admin endpoint needs no token).

import { FerryClient } from "/play/ferry-client.js";

const params = new URLSearchParams(location.search);
const field = (id) => document.getElementById(id);
const show = (id, value) => (field(id).textContent = String(value));
const counts = { sent: 0, received: 0, lost: 0, disorder: 0, reconnects: 0, rebinds: 0 };
let nextPush = 0;

for (const name of ["token", "player", "room", "input"]) field(name).value = params.get(name) ?? "";
field("repeat").checked = params.get("auto") === "1";

function count(name, by = 1) {
  counts[name] += by;
  show(name, counts[name]);
  field(name).classList.toggle("bad", (name === "lost" || name === "disorder") && counts[name] > 0);
}

function heard(event) {
  if (event.type === "push") {
    if (event.seq > nextPush) count("lost", event.seq - nextPush);
    if (event.seq < nextPush) count("disorder");
    nextPush = Math.max(nextPush, event.seq + 1);
    count("received");
    const div = document.createElement("div");
    div.textContent = `#${event.seq} ${JSON.stringify(event.message)}`;
    field("pushes").append(div);
    field("pushes").scrollTop = field("pushes").scrollHeight;
  } else if (event.type === "reconnected") {
    // A new session binds the player again: its pushes count from 0 again.
    nextPush = 0;
    count("reconnects");
    showSession(event.session);
  } else if (event.type === "rebound") {
    // The player's node crashed and the gateway bound it again where it was rebuilt, on the same
    // session: its pushes count from 0 again.
    nextPush = 0;
    count("rebinds");
  } else if (event.type === "closed") {
    show("state", `closed: ${event.code} ${event.reason}`);
  } else if (event.type === "unbound") {
    show("state", `unbound: ${event.reason}`);
  }
}

function showSession(session) {
  show("gateway", session.node);
  show("session", session.session);
}

let roomNode = null;
async function watchRoom(room) {
  try {
    const at = await (await fetch(`/play/rooms/${encodeURIComponent(room)}`)).json();
    if (at.node && at.node !== roomNode) {
      if (roomNode !== null) {
        const li = document.createElement("li");
        li.textContent = `${new Date().toLocaleTimeString()} ${roomNode} → ${at.node}`;
        field("moves").append(li);
      }
      roomNode = at.node;
      show("room-node", roomNode);
    }
  } finally {
    setTimeout(() => watchRoom(room), 100);
  }
}

async function create(body) {
  const response = await fetch("/units", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  // 409: it exists already, which is what the page wants.
  if (!response.ok && response.status !== 409) throw new Error(`creating ${body.id}: ${response.status} ${await response.text()}`);
}

let client = null;
async function play() {
  const token = field("token").value;
  const player = field("player").value.trim();
  const room = field("room").value.trim();
  if (!token || !player) return show("state", "give a player token and a player");
  const config = await (await fetch("/play/config")).json();
  if (!config.websocket && !params.get("ws")) throw new Error(`node ${config.node} has no sessions_websocket listener`);
  const url = params.get("ws") ?? `${config.websocket.scheme}://${location.hostname}:${config.websocket.port}/`;
  if (params.get("spot") && room) await create({ kind: "spot", factory: params.get("spot"), id: room });
  if (params.get("actor")) await create({ kind: "actor", factory: params.get("actor"), id: player, join: room || undefined });
  show("state", "connecting");
  client = await FerryClient.connect({ urls: [url], token });
  client.onEvent = heard;
  showSession(client.session);
  await client.bind(player);
  show("state", "playing");
  field("join").hidden = true;
  if (room) watchRoom(room);
  setInterval(() => field("repeat").checked && send(), 200);
}

function send() {
  const text = field("input").value;
  let message;
  try {
    message = JSON.parse(text);
  } catch (error) {
    field("repeat").checked = false;
    return show("state", `the input is not JSON: ${error.message}`);
  }
  client.send(field("player").value.trim(), message);
  count("sent");
}

const failed = (error) => show("state", `failed: ${error.message}`);
field("join").addEventListener("submit", (event) => {
  event.preventDefault();
  play().catch(failed);
});
field("send").addEventListener("submit", (event) => {
  event.preventDefault();
  if (client) send();
});
if (params.get("auto") === "1") play().catch(failed);
