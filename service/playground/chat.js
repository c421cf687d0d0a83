// Chat (spec section 7): a streamed conversation with the reasoning shown apart from the
// answer, tool calls rendered, images attached as data: URLs, the telemetry under each answer.
import { el, postJson, showError, sse, telemetryText } from "./api.js";

let ctx;
let history = [];        // what is sent back: answers only, never the reasoning (spec 17)
let image = null;        // data: URL of the attached image
let aborter = null;
const $ = (id) => document.getElementById(id);

export function setup(context) {
  ctx = context;
  $("chat-form").addEventListener("submit", (ev) => { ev.preventDefault(); send(); });
  $("chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); send(); }
  });
  $("chat-stop").addEventListener("click", () => aborter && aborter.abort());
  $("chat-clear").addEventListener("click", () => { history = []; $("chat-log").replaceChildren(); });
  $("chat-image").addEventListener("change", attach);
  $("chat-model").addEventListener("change", markVision);
}

export async function show() {
  ctx.fillPicker($("chat-model"), "text_generation");
  markVision();
}

function markVision() {
  const m = ctx.modelInfo($("chat-model").value);
  const vision = Boolean(m && m.modalities.includes("vision"));
  $("chat-image").disabled = !vision;
  $("chat-image").parentElement.title = vision ? "" : "this model does not serve vision";
}

function attach() {
  const file = $("chat-image").files[0];
  if (!file) { image = null; $("chat-image-name").textContent = ""; return; }
  const reader = new FileReader();
  reader.onload = () => { image = reader.result; $("chat-image-name").textContent = file.name; };
  reader.readAsDataURL(file);
}

function tools() {
  const text = $("chat-tools").value.trim();
  if (!text) return undefined;
  const parsed = JSON.parse(text);   // a SyntaxError is shown in the answer's place
  if (!Array.isArray(parsed)) throw new Error("tools must be a JSON array");
  return parsed;
}

function userContent(text) {
  if (!image) return text;
  return [{ type: "text", text }, { type: "image_url", image_url: { url: image } }];
}

function bubble(role, ...children) {
  const node = el("div", { class: `msg ${role}` }, ...children);
  $("chat-log").append(node);
  node.scrollIntoView({ block: "end" });
  return node;
}

function renderToolCall(call) {
  let args = call.function.arguments;
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* shown as sent */ }
  return el("div", { class: "tool-call" },
    el("div", {}, "tool call ", el("code", {}, call.function.name), " ",
      el("span", { class: "muted" }, call.id || "")),
    el("pre", {}, args));
}

function send() {
  const text = $("chat-input").value.trim();
  if (!text || !$("chat-model").value || aborter) return;
  const user = { role: "user", content: userContent(text) };
  bubble("user", text, image ? el("img", { src: image, class: "thumb", alt: "attached image" }) : null);
  $("chat-input").value = "";
  return turn(user);
}

// The client runs the tools (spec 7.5): the user types each result, then the model goes on.
function resultsForm(toolCalls) {
  const inputs = toolCalls.map((call) => el("input", { size: 40, placeholder: `result of ${call.function.name}` }));
  const form = el("form", { class: "tool-results" },
    ...inputs.map((input, i) => el("label", { class: "block" }, toolCalls[i].function.name + " → ", input)),
    el("button", { type: "submit" }, "Send tool results"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (aborter) return;
    toolCalls.forEach((call, i) => history.push(
      { role: "tool", tool_call_id: call.id, content: inputs[i].value }));
    form.remove();
    turn(null);
  });
  return form;
}

// One model answer to the history plus `user` (null: continue after tool results).
async function turn(user) {
  const model = $("chat-model").value;
  const system = $("chat-system").value.trim();
  const reasoning = el("pre", { class: "reasoning-text" });
  const reasoningBox = el("details", { class: "reasoning", hidden: true, open: true },
    el("summary", {}, "reasoning"), reasoning);
  const answer = el("div", { class: "content" });
  const calls = el("div", { class: "tool-calls" });
  const meta = el("div", { class: "telemetry muted" });
  const node = bubble("assistant", el("div", { class: "who muted" }, model), reasoningBox, answer, calls, meta);
  node.classList.add("streaming");

  const body = {
    model, stream: true, max_tokens: Number($("chat-max").value) || 256,
    temperature: Number($("chat-temp").value),
    messages: [...(system ? [{ role: "system", content: system }] : []), ...history,
      ...(user ? [user] : [])],
  };
  const effort = $("chat-effort").value;
  if (effort) body.reasoning_effort = effort;
  aborter = new AbortController();
  $("chat-stop").disabled = false;
  $("chat-send").disabled = true;
  const toolCalls = [];
  try {
    const t = tools();
    if (t) body.tools = t;
    const resp = await postJson("/v1/chat/completions", body, { signal: aborter.signal });
    for await (const chunk of sse(resp)) {
      if (chunk === "[DONE]") break;
      const choice = (chunk.choices || [])[0] || {};
      const delta = choice.delta || {};
      if (delta.reasoning_content) {
        reasoningBox.hidden = false;
        reasoning.textContent += delta.reasoning_content;
      }
      if (delta.content) answer.textContent += delta.content;
      for (const call of delta.tool_calls || []) {
        toolCalls.push(call);
        calls.append(renderToolCall(call));
      }
      if (choice.finish_reason === "error") {
        throw new Error((chunk.error && chunk.error.message) || "generation failed");
      }
      if (chunk.hypnos_telemetry || chunk.usage) {
        const u = chunk.usage;
        meta.textContent = [telemetryText(chunk.hypnos_telemetry),
          u ? `${u.prompt_tokens} → ${u.completion_tokens} tokens` : "",
          choice.finish_reason ? `finish: ${choice.finish_reason}` : ""].filter(Boolean).join(" · ");
      }
      node.scrollIntoView({ block: "end" });
    }
    if (user) history.push(user);
    if (toolCalls.length) {
      history.push({ role: "assistant", content: answer.textContent || null, tool_calls: toolCalls });
      node.append(resultsForm(toolCalls));
    } else {
      history.push({ role: "assistant", content: answer.textContent });
    }
  } catch (err) {
    const note = el("div", { class: "error" });
    if (err.name === "AbortError") note.textContent = "stopped";
    else showError(note, err);
    node.append(note);
  } finally {
    node.classList.remove("streaming");
    node.classList.add("done");
    aborter = null;
    $("chat-stop").disabled = true;
    $("chat-send").disabled = false;
    image = null;
    $("chat-image").value = "";
    $("chat-image-name").textContent = "";
  }
}
