// The play page: the chat sample through this node's WebSocket gateway. It checks every line it
// receives (each push's number is the one after the last, and so is each line's number in the
// room) and polls where the room runs, so a person sees the room move while the session stays.
// Query: token (required), room (default "lobby"), player (default a random one), auto=1 to say
// a line every 200 ms, create=0 when the room and player exist already.

import { FerryClient } from "/play/ferry-client.js";

const params = new URLSearchParams(location.search);
const token = params.get("token") ?? "";
const room = params.get("room") ?? "lobby";
const player = params.get("player") ?? `player-${Math.floor(Math.random() * 1e6)}`;
const show = (id, value) => (document.getElementById(id).textContent = String(value));
const counts = { sent: 0, received: 0, lost: 0, disorder: 0, reconnects: 0 };
let nextPush = 0;
let lastLine = null;

async function post(path, body) {
  const response = await fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  // 409: it exists already, which is what the page wants.
  if (!response.ok && response.status !== 409) throw new Error(`${path}: ${response.status} ${await response.text()}`);
}

function count(name, by = 1) {
  counts[name] += by;
  show(name, counts[name]);
  document.getElementById(name).classList.toggle("bad", (name === "lost" || name === "disorder") && counts[name] > 0);
}

function heard(event) {
  if (event.type === "push") {
    const line = event.message;
    if (event.seq > nextPush) count("lost", event.seq - nextPush);
    if (event.seq < nextPush) count("disorder");
    nextPush = Math.max(nextPush, event.seq + 1);
    if (lastLine !== null && line.seq > lastLine + 1) count("lost", line.seq - lastLine - 1);
    if (lastLine !== null && line.seq <= lastLine) count("disorder");
    lastLine = Math.max(lastLine ?? line.seq, line.seq);
    count("received");
    const div = document.createElement("div");
    div.textContent = `#${line.seq} ${line.from}: ${line.text}`;
    const lines = document.getElementById("lines");
    lines.append(div);
    lines.scrollTop = lines.scrollHeight;
  } else if (event.type === "reconnected") {
    // A new session: its pushes count from 0 again.
    nextPush = 0;
    count("reconnects");
    showSession(event.session);
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
async function watchRoom() {
  try {
    const at = await (await fetch(`/play/rooms/${encodeURIComponent(room)}`)).json();
    if (at.node && at.node !== roomNode) {
      if (roomNode !== null) {
        const li = document.createElement("li");
        li.textContent = `${new Date().toLocaleTimeString()} ${roomNode} → ${at.node}`;
        document.getElementById("moves").append(li);
      }
      roomNode = at.node;
      show("room-node", roomNode);
    }
  } finally {
    setTimeout(watchRoom, 100);
  }
}

async function main() {
  show("room", `${room} (you are ${player})`);
  const config = await (await fetch("/play/config")).json();
  const url = params.get("ws") ?? `ws://${config.websocket}/`;
  if (params.get("create") !== "0") {
    await post("/units", { kind: "spot", factory: "chat-room", id: room });
    await post("/units", { kind: "actor", factory: "chatter", id: player, join: room });
  }
  const client = await FerryClient.connect({ urls: [url], token });
  client.onEvent = heard;
  showSession(client.session);
  await client.bind(player);
  show("state", "playing");
  watchRoom();
  const say = (text) => {
    client.send(player, { Say: text });
    count("sent");
  };
  document.getElementById("say").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("text");
    if (input.value) say(input.value);
    input.value = "";
  });
  const auto = document.getElementById("auto");
  auto.checked = params.get("auto") === "1";
  let n = 0;
  setInterval(() => auto.checked && say(`line ${n++}`), 200);
}

main().catch((error) => show("state", `failed: ${error.message}`));
