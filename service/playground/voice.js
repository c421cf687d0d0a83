// The voice turn (spec sections 1, 9, 10): record or upload → /v1/audio/transcriptions →
// /v1/chat/completions → /v1/audio/speech, played as it streams. The three requests carry
// one x-hypnos-workflow, each names the next stage's model in x-hypnos-next-model, and the
// last closes the workflow.
import { el, postJson, request, showError, showInfo, telemetryText } from "./api.js";
import { StreamPlayer, toWav } from "./audio.js";
import * as realtime from "./realtime.js";

let ctx;
let recorder = null;
let running = false;
const $ = (id) => document.getElementById(id);

export function setup(context) {
  ctx = context;
  $("voice-record").addEventListener("click", toggleRecording);
  realtime.setup();
  $("voice-file").addEventListener("change", () => {
    const file = $("voice-file").files[0];
    if (file) turn(file, file.name);
    $("voice-file").value = "";
  });
}

export async function show() {
  ctx.fillPicker($("voice-stt"), "speech_to_text");
  ctx.fillPicker($("voice-chat"), "text_generation");
  ctx.fillPicker($("voice-tts"), "text_to_speech");
}

export function hide() {
  if (recorder && recorder.state === "recording") recorder.stop();
  realtime.hide();
}

async function toggleRecording() {
  if (recorder && recorder.state === "recording") { recorder.stop(); return; }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (err) {
    showError($("voice-state"), new Error(`no microphone: ${err.message}`));
    return;
  }
  const chunks = [];
  recorder = new MediaRecorder(stream);
  recorder.ondataavailable = (ev) => ev.data.size && chunks.push(ev.data);
  recorder.onstop = async () => {
    stream.getTracks().forEach((t) => t.stop());
    $("voice-record").textContent = "Record";
    const { blob, name } = await toWav(new Blob(chunks, { type: recorder.mimeType }));
    turn(blob, name);
  };
  recorder.start();
  $("voice-record").textContent = "Stop";
  showInfo($("voice-state"), "recording…");
}

function stage(box, label) {
  const out = el("div", { class: "stage", "data-stage": label }, el("span", { class: "muted" }, label + ": "),
    el("span", { class: "text" }), el("div", { class: "telemetry muted" }));
  box.append(out);
  return out;
}

async function turn(audio, filename) {
  const stt = $("voice-stt").value, chat = $("voice-chat").value, tts = $("voice-tts").value;
  if (running) return;
  if (!stt || !chat || !tts) {
    showError($("voice-state"), new Error("a voice turn needs a speech-to-text, a chat and a speech model"));
    return;
  }
  running = true;
  // An AudioContext made inside the click (or change) handler may play without a gesture later.
  const audioCtx = new AudioContext();
  const id = (crypto.randomUUID ? crypto.randomUUID() : String(Date.now())).slice(0, 8);
  const flow = { "x-hypnos-workflow": `voice_turn/${id}` };
  const box = el("div", { class: "turn", "data-turn": id },
    el("div", { class: "source muted" }, `${filename} · ${(audio.size / 1024).toFixed(0)} KiB`));
  $("voice-turns").prepend(box);
  const heard = stage(box, "heard");
  const said = stage(box, "answer");
  const spoken = stage(box, "spoken");
  try {
    showInfo($("voice-state"), "transcribing…");
    const form = new FormData();
    form.append("model", stt);
    form.append("file", audio, filename);
    const tr = await (await request("/v1/audio/transcriptions", {
      method: "POST", body: form, headers: { ...flow, "x-hypnos-next-model": chat },
    })).json();
    heard.querySelector(".text").textContent = tr.text;
    heard.querySelector(".telemetry").textContent = telemetryText(tr.hypnos_telemetry);
    if (!tr.text.trim()) throw new Error("nothing was heard");

    showInfo($("voice-state"), "answering…");
    const answer = await (await postJson("/v1/chat/completions", {
      model: chat, max_tokens: 128,
      messages: [{ role: "system", content: "Answer in one or two short sentences." },
        { role: "user", content: tr.text }],
    }, { headers: { ...flow, "x-hypnos-next-model": tts } })).json();
    const reply = answer.choices[0].message.content || "";
    said.querySelector(".text").textContent = reply;
    said.querySelector(".telemetry").textContent = telemetryText(answer.hypnos_telemetry);
    if (!reply.trim()) throw new Error("the model gave no answer to speak");

    showInfo($("voice-state"), "speaking…");
    await speak(audioCtx, spoken, { model: tts, input: reply, voice: $("voice-voice").value },
      { ...flow, "x-hypnos-workflow-end": "true" });
    showInfo($("voice-state"), "done");
  } catch (err) {
    showError($("voice-state"), err);
    // The workflow closes on its own after 30 s without a request (spec section 1).
  } finally {
    running = false;
  }
}

async function speak(audioCtx, out, body, headers) {
  const resp = await postJson("/v1/audio/speech", { ...body, response_format: "wav", stream: true },
    { headers });
  const player = new StreamPlayer(audioCtx);
  const reader = resp.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    player.push(value);
    out.querySelector(".text").textContent = `${player.seconds.toFixed(1)} s of audio`;
  }
  const tier = resp.headers.get("x-hypnos-previous-tier");
  const sw = resp.headers.get("x-hypnos-switch-ms");
  out.querySelector(".telemetry").textContent =
    tier ? `${Number(sw) > 0 ? "cold" : "warm"} (${tier}${Number(sw) > 0 ? `, switch ${Math.round(sw)} ms` : ""})` : "";
  const replay = el("audio", { controls: true, src: URL.createObjectURL(player.wav()) });
  replay.dataset.seconds = player.seconds.toFixed(2);
  out.append(replay);
}
