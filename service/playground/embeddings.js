// Embeddings (spec section 8): embed two texts in one request and show their cosine
// similarity.
import { el, postJson, showError, showInfo, telemetryText } from "./api.js";

let ctx;
const $ = (id) => document.getElementById(id);

export function setup(context) {
  ctx = context;
  $("emb-form").addEventListener("submit", (ev) => { ev.preventDefault(); compare(); });
}

export async function show() {
  ctx.fillPicker($("emb-model"), "embeddings");
}

export function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}

async function compare() {
  const state = $("emb-state");
  if (!$("emb-model").value) { showError(state, new Error("no embeddings model on this server")); return; }
  showInfo(state, "embedding…");
  try {
    const body = await (await postJson("/v1/embeddings", {
      model: $("emb-model").value, input: [$("emb-a").value, $("emb-b").value],
    })).json();
    const [a, b] = [...body.data].sort((x, y) => x.index - y.index).map((d) => d.embedding);
    const sim = cosine(a, b);
    const meter = el("meter", { min: -1, max: 1, value: sim.toFixed(4) });
    $("emb-out").replaceChildren(
      el("div", { class: "similarity" }, "cosine similarity ",
        el("strong", { id: "emb-similarity", "data-value": sim.toFixed(6) }, sim.toFixed(4)), " ", meter),
      el("div", { class: "muted" }, `${a.length} dimensions · ${body.usage.prompt_tokens} tokens`));
    showInfo(state, telemetryText(body.hypnos_telemetry));
  } catch (err) {
    showError(state, err);
  }
}
