// Entity extraction (spec section 13): the text with each found span highlighted and
// labelled. Offsets count Unicode scalar values, so the text is sliced by code points.
import { el, postJson, showError, showInfo, telemetryText } from "./api.js";

let ctx;
const $ = (id) => document.getElementById(id);

export function setup(context) {
  ctx = context;
  $("ent-form").addEventListener("submit", (ev) => { ev.preventDefault(); extract(); });
}

export async function show() {
  ctx.fillPicker($("ent-model"), "entity_extraction");
}

// A stable colour per label.
function hue(label) {
  let h = 0;
  for (const c of label) h = (h * 31 + c.codePointAt(0)) % 360;
  return h;
}

export function highlight(text, entities) {
  const chars = Array.from(text);     // code points, as the server counts them
  const out = [];
  let at = 0;
  for (const e of [...entities].sort((a, b) => a.start - b.start)) {
    if (e.start < at) continue;       // nested spans (flat = false): keep the outer one
    out.push(chars.slice(at, e.start).join(""));
    const mark = el("mark", { title: `${e.label} ${e.score.toFixed(2)}`, "data-label": e.label },
      chars.slice(e.start, e.end).join(""), el("sub", {}, e.label));
    mark.style.setProperty("--hue", hue(e.label));
    out.push(mark);
    at = e.end;
  }
  out.push(chars.slice(at).join(""));
  return out;
}

async function extract() {
  const state = $("ent-state");
  const text = $("ent-text").value;
  const labels = $("ent-labels").value.split(",").map((s) => s.trim()).filter(Boolean);
  if (!$("ent-model").value) { showError(state, new Error("no entity_extraction model on this server")); return; }
  showInfo(state, "extracting…");
  try {
    const body = await (await postJson("/v1/entities", {
      model: $("ent-model").value, input: text, labels,
      threshold: Number($("ent-threshold").value),
    })).json();
    const found = body.data[0].entities;
    $("ent-out").replaceChildren(...highlight(text, found));
    showInfo(state, `${found.length} entities · ${telemetryText(body.hypnos_telemetry)}`);
  } catch (err) {
    if (err.routeMissing) showInfo(state, "This server has no entity extraction route yet (POST /v1/entities answered 404).");
    else showError(state, err);
  }
}
