// The one way the playground talks to the server: same origin, the API key from session
// storage, the spec's error envelope turned into an ApiError, SSE read line by line.

const KEY = "hypnos.apiKey";
let asking = null;   // one key dialog at a time, shared by every request that got a 401

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
  // The route is not on this server (a 404 from the router, not a missing model or record):
  // features that other parts of Hypnos add show a note instead of failing.
  get routeMissing() {
    return this.status === 404 && this.type === "not_found" &&
      /^(Unknown route|\w+ is not allowed)/.test(this.message);
  }
}

function askKey(reason) {
  if (asking) return asking;
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  document.getElementById("key-reason").textContent = reason;
  input.value = "";
  asking = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const key = input.value.trim();
      if (key) sessionStorage.setItem(KEY, key);
      asking = null;
      resolve(Boolean(key));
    }, { once: true });
  });
  dialog.showModal();
  input.focus();
  return asking;
}

async function errorOf(resp) {
  const text = await resp.text();
  try {
    const err = JSON.parse(text).error;
    return new ApiError(resp.status, err.type, err.message);
  } catch {
    return new ApiError(resp.status, "http_" + resp.status, text || resp.statusText);
  }
}

// fetch() with the key; on 401 asks for a key once (kept for the tab) and retries. Resolves
// to the Response when it is 2xx, else throws ApiError. `body` must be re-sendable (a
// string, FormData or Blob), since a 401 sends it again.
export async function request(path, options = {}) {
  for (let attempt = 0; ; attempt++) {
    const headers = new Headers(options.headers || {});
    const key = sessionStorage.getItem(KEY);
    if (key) headers.set("authorization", "Bearer " + key);
    const resp = await fetch(path, { ...options, headers });
    if (resp.ok) return resp;
    if (resp.status === 401 && attempt < 3) {
      if (key) sessionStorage.removeItem(KEY);
      const reason = key ? "The server refused that API key; enter another."
        : "This server needs an API key.";
      if (await askKey(reason)) continue;
    }
    throw await errorOf(resp);
  }
}

export async function getJson(path) {
  return (await request(path)).json();
}

export async function postJson(path, body, options = {}) {
  const headers = { "content-type": "application/json", ...(options.headers || {}) };
  return request(path, { ...options, method: "POST", headers, body: JSON.stringify(body) });
}

// Yields each SSE `data:` payload of a response (parsed JSON, or the string "[DONE]").
// Comment lines (": keep-alive") are skipped; events may be split anywhere across chunks.
export async function* sse(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, "");
      buffer = buffer.slice(nl + 1);
      if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      else if (line === "" && data.length) {
        const payload = data.join("\n");
        data = [];
        yield payload === "[DONE]" ? payload : JSON.parse(payload);
      }
    }
    if (done) break;
  }
  if (data.length) {
    const payload = data.join("\n");
    yield payload === "[DONE]" ? payload : JSON.parse(payload);
  }
}

// ---------------------------------------------------------------- formatting

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + " " + units[i];
}

export function ms(v) {
  if (v === null || v === undefined) return "–";
  return v >= 10000 ? (v / 1000).toFixed(1) + " s" : Math.round(v) + " ms";
}

export const TIER_NAMES = {
  tier1_gpu_vram: "Tier 1 · GPU VRAM",
  tier2_pinned_ram: "Tier 2 · pinned RAM",
  tier3_nvme_ssd: "Tier 3 · SSD",
};

// One line under an answer: cold or warm, where the model was, and how fast it ran.
export function telemetryText(t) {
  if (!t) return "";
  const e = t.engine || {};
  const cold = (t.tier_switch_latency_ms || 0) > 0;
  const parts = [cold ? `cold (from ${t.previous_tier}, switch ${ms(t.tier_switch_latency_ms)})`
    : `warm (${t.previous_tier})`];
  if (e.ttft_ms !== undefined) parts.push(`ttft ${ms(e.ttft_ms)}`);
  if (e.prefill_tokens_per_s !== undefined) parts.push(`prefill ${e.prefill_tokens_per_s.toFixed(0)} tok/s`);
  if (e.decode_tokens_per_s !== undefined) parts.push(`decode ${e.decode_tokens_per_s.toFixed(1)} tok/s`);
  if (e.cached_tokens) parts.push(`cached ${e.cached_tokens} tok`);
  if (e.rtf !== undefined) parts.push(`rtf ${e.rtf.toFixed(2)}`);
  if (e.ms_per_page !== undefined) parts.push(`${e.ms_per_page.toFixed(0)} ms/page`);
  if (t.inference_latency_ms !== undefined) parts.push(`inference ${ms(t.inference_latency_ms)}`);
  if (t.evicted_models && t.evicted_models.length) parts.push(`evicted ${t.evicted_models.join(", ")}`);
  return parts.join(" · ");
}

// A tiny element builder: el("div", {class: "x"}, "text", child).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

export function showError(node, err) {
  node.classList.add("error");
  node.textContent = err instanceof ApiError
    ? `${err.status} ${err.type}: ${err.message}` : String(err.message || err);
}

export function showInfo(node, text) {
  node.classList.remove("error");
  node.textContent = text;
}
