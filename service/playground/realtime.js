// Push-to-talk over GET /v1/realtime (OpenAI's Realtime protocol): hold the button to speak,
// release to send; the answer streams back as text and 24 kHz audio. The microphone is read
// at 24 kHz and sent as pcm16 input_audio_buffer.append events; turn detection is off (the
// button is the turn). Speaking again while the answer plays cancels it (response.cancel),
// stops its audio and tells the server how much of it was heard (conversation.item.truncate),
// so the conversation keeps only what the user heard. The API key, when the server has one, goes as the subprotocol
// "openai-insecure-api-key.<key>" (a browser cannot set Authorization on a WebSocket).
import { el, showError, showInfo } from "./api.js";
import { wavBlob } from "./audio.js";

const RATE = 24000;
const $ = (id) => document.getElementById(id);
let ws = null, wsModel = null, audioCtx = null, mic = null, answer = null, responding = false;
let playAt = 0, sources = [];
// The answer being played: its message item and its audio's chunks as [start (audioCtx
// time), seconds], so what was heard is known however the chunks were spaced.
let playing = null;

export function setup() {
  const talk = $("rt-talk");
  talk.addEventListener("pointerdown", (ev) => { ev.preventDefault(); start(); });
  for (const name of ["pointerup", "pointerleave"]) talk.addEventListener(name, stop);
}

export function hide() {
  if (mic) stop();
  if (ws) ws.close();
  ws = null;
}

function b64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function connect(model) {
  if (ws && wsModel === model && ws.readyState <= 1) return Promise.resolve(ws);
  if (ws) ws.close();
  const key = sessionStorage.getItem("hypnos.apiKey");
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime?model=${encodeURIComponent(model)}`;
  const sock = new WebSocket(url, key ? ["realtime", `openai-insecure-api-key.${key}`] : ["realtime"]);
  ws = sock; wsModel = model;
  sock.onmessage = (m) => onEvent(JSON.parse(m.data));
  sock.onclose = () => { if (ws === sock) { ws = null; showInfo($("rt-state"), "disconnected"); } };
  return new Promise((resolve, reject) => {
    sock.onopen = () => {
      sock.send(JSON.stringify({ type: "session.update", session: {
        type: "realtime", instructions: "Answer in one or two short sentences.", max_output_tokens: 60,
        audio: { input: { turn_detection: null }, output: { voice: $("voice-voice").value } } } }));
      resolve(sock);
    };
    sock.onerror = () => reject(new Error("the realtime WebSocket could not open (a key? the model?)"));
  });
}

async function start() {
  if (mic) return;
  const model = $("voice-chat").value;
  if (!model) { showError($("rt-state"), new Error("pick a chat model to answer")); return; }
  audioCtx = audioCtx || new AudioContext({ sampleRate: RATE });
  mic = { pending: true };
  try {
    const sock = await connect(model);
    interrupt(sock);
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const source = audioCtx.createMediaStreamSource(stream);
    const node = audioCtx.createScriptProcessor(4096, 1, 1);
    const sent = { samples: 0, open: true };
    node.onaudioprocess = (ev) => {
      // A buffer the audio thread queued before release may still arrive after stop();
      // sent after the commit, it would start the next turn with the end of this one.
      if (!sent.open) return;
      const f = ev.inputBuffer.getChannelData(0);
      const pcm = new Int16Array(f.length);
      for (let i = 0; i < f.length; i++) pcm[i] = Math.max(-1, Math.min(1, f[i])) * 0x7fff;
      sent.samples += f.length;
      if (sock.readyState === 1) {
        sock.send(JSON.stringify({ type: "input_audio_buffer.append", audio: b64(new Uint8Array(pcm.buffer)) }));
      }
    };
    source.connect(node);
    node.connect(audioCtx.destination);
    const wasStopped = mic === null;
    mic = { stream, source, node, sent };
    if (wasStopped) stop();
    $("rt-talk").textContent = "Release to send";
    showInfo($("rt-state"), "listening…");
  } catch (err) {
    mic = null;
    showError($("rt-state"), err);
  }
}

function stop() {
  if (!mic) return;
  if (mic.pending) { mic = null; return; }   // released before the microphone opened
  const { stream, source, node, sent } = mic;
  mic = null;
  sent.open = false;
  node.onaudioprocess = null;
  node.disconnect(); source.disconnect();
  stream.getTracks().forEach((t) => t.stop());
  $("rt-talk").textContent = "Hold to talk (realtime)";
  if (!ws || ws.readyState !== 1) return;
  if (sent.samples < RATE / 10) { showInfo($("rt-state"), "too short"); return; }
  ws.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
  ws.send(JSON.stringify({ type: "response.create" }));
  showInfo($("rt-state"), "answering…");
}

// The user talks over the answer: cancel it while it is made, and cut it to what was heard
// while its audio plays (after the cancel, which puts the message in the conversation).
function interrupt(sock) {
  if (responding) sock.send(JSON.stringify({ type: "response.cancel" }));
  if (playing && playing.item && audioCtx && playAt > audioCtx.currentTime) {
    const now = audioCtx.currentTime;
    const heard = playing.chunks.reduce((n, [at, secs]) => n + Math.min(Math.max(0, now - at), secs), 0);
    sock.send(JSON.stringify({ type: "conversation.item.truncate", item_id: playing.item,
                               content_index: 0, audio_end_ms: Math.round(heard * 1000) }));
  }
  silence();
}

function silence() {
  sources.forEach((s) => { try { s.stop(); } catch { /* already ended */ } });
  sources = [];
  playAt = 0;
  playing = null;
}

function play(bytes) {
  const pcm = new Int16Array(bytes.buffer, bytes.byteOffset, bytes.length >> 1);
  const floats = Float32Array.from(pcm, (s) => s / 0x8000);
  answer.parts.push(floats);
  const buffer = audioCtx.createBuffer(1, floats.length, RATE);
  buffer.copyToChannel(floats, 0);
  const src = audioCtx.createBufferSource();
  src.buffer = buffer;
  src.connect(audioCtx.destination);
  playAt = Math.max(playAt, audioCtx.currentTime + 0.05);
  src.start(playAt);
  if (!playing || playing.item !== answer.item) playing = { item: answer.item, chunks: [] };
  playing.chunks.push([playAt, buffer.duration]);
  playAt += buffer.duration;
  sources.push(src);
}

function turnBox() {
  const box = el("div", { class: "turn realtime-turn" },
    el("div", { class: "stage", "data-stage": "heard" }, el("span", { class: "muted" }, "heard: "), el("span", { class: "text" })),
    el("div", { class: "stage", "data-stage": "answer" }, el("span", { class: "muted" }, "answer: "), el("span", { class: "text" })),
    el("div", { class: "telemetry muted" }));
  $("rt-turns").prepend(box);
  return { box, parts: [], text: "" };
}

function onEvent(ev) {
  switch (ev.type) {
    case "input_audio_buffer.committed":
      answer = turnBox();
      break;
    case "conversation.item.input_audio_transcription.completed":
      if (answer) answer.box.querySelector("[data-stage=heard] .text").textContent = ev.transcript;
      break;
    case "response.created":
      responding = true;
      if (!answer) answer = turnBox();
      break;
    case "response.output_item.added":
      if (answer && ev.item.type === "message") answer.item = ev.item.id;
      break;
    case "response.output_audio_transcript.delta":
    case "response.output_text.delta":
      answer.text += ev.delta;
      answer.box.querySelector("[data-stage=answer] .text").textContent = answer.text;
      break;
    case "response.output_audio.delta":
      play(Uint8Array.from(atob(ev.delta), (c) => c.charCodeAt(0)));
      break;
    case "response.done": {
      responding = false;
      const r = ev.response;
      const secs = answer ? answer.parts.reduce((n, p) => n + p.length, 0) / RATE : 0;
      if (answer) {
        answer.box.dataset.status = r.status;
        answer.box.querySelector(".telemetry").textContent =
          `${r.status} · ${secs.toFixed(1)} s of audio · ${r.usage ? r.usage.output_tokens : 0} tokens`;
        if (secs > 0) {
          const all = new Float32Array(answer.parts.reduce((n, p) => n + p.length, 0));
          let at = 0;
          for (const p of answer.parts) { all.set(p, at); at += p.length; }
          const replay = el("audio", { controls: true, src: URL.createObjectURL(wavBlob(all, RATE)) });
          replay.dataset.seconds = secs.toFixed(2);
          answer.box.append(replay);
        }
      }
      showInfo($("rt-state"), r.status === "completed" ? "done" : r.status);
      answer = null;
      break;
    }
    case "error":
      showError($("rt-state"), new Error(ev.error.message));
      break;
    default:
      break;
  }
}
