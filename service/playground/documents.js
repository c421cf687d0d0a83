// Document conversion (spec section 12): upload with stream = true; a placeholder per page
// from document.started, filled by each document.page as it arrives, the usage at the end.
import { el, request, showError, showInfo, sse, telemetryText } from "./api.js";

let ctx;
let aborter = null;
const $ = (id) => document.getElementById(id);

export function setup(context) {
  ctx = context;
  $("doc-form").addEventListener("submit", (ev) => { ev.preventDefault(); convert(); });
}

export async function show() {
  ctx.fillPicker($("doc-model"), "document_conversion");
}

export function hide() {
  if (aborter) aborter.abort();
}

function pageBox(n) {
  let box = document.querySelector(`#doc-pages-out [data-page="${n}"]`);
  if (!box) {
    box = el("article", { class: "page pending", "data-page": n },
      el("h4", {}, `page ${n}`), el("pre", { class: "markdown" }, "converting…"));
    $("doc-pages-out").append(box);
  }
  return box;
}

async function convert() {
  const file = $("doc-file").files[0];
  const state = $("doc-state");
  if (!file) { showError(state, new Error("choose a file first")); return; }
  if (!$("doc-model").value) { showError(state, new Error("no document_conversion model on this server")); return; }
  if (aborter) aborter.abort();
  const form = new FormData();
  form.append("model", $("doc-model").value);
  form.append("file", file, file.name);
  form.append("stream", "true");
  form.append("ocr", $("doc-ocr").checked ? "true" : "false");
  if ($("doc-pages").value.trim()) form.append("pages", $("doc-pages").value.trim());
  $("doc-pages-out").replaceChildren();
  showInfo(state, `converting ${file.name}…`);
  aborter = new AbortController();
  try {
    const resp = await request("/v1/documents/convert", { method: "POST", body: form, signal: aborter.signal });
    let received = 0;
    for await (const ev of sse(resp)) {
      if (ev === "[DONE]") break;
      if (ev.object === "document.started") {
        (ev.pages || []).forEach(pageBox);
        showInfo(state, `${file.name}: ${ev.page_count} pages, converting ${(ev.pages || []).length}…`);
      } else if (ev.object === "document.page") {
        const box = pageBox(ev.page);
        box.classList.remove("pending");
        box.querySelector("pre").textContent = ev.markdown;
        box.querySelector("h4").textContent =
          `page ${ev.page} · ${ev.tables || 0} tables · ${ev.pictures || 0} pictures · ${Math.round(ev.ms || 0)} ms`;
        received++;
      } else if (ev.object === "document") {
        const u = ev.usage || {};
        showInfo(state, `${ev.filename || file.name}: ${received} pages converted` +
          ` (${u.tables || 0} tables, ${u.pictures || 0} pictures) · ${telemetryText(ev.hypnos_telemetry)}`);
      } else if (ev.object === "error") {
        throw new Error(ev.error ? `${ev.error.type}: ${ev.error.message}` : "conversion failed");
      }
    }
  } catch (err) {
    if (err.routeMissing) showInfo(state, "This server has no document conversion route yet (POST /v1/documents/convert answered 404).");
    else if (err.name !== "AbortError") showError(state, err);
  } finally {
    aborter = null;
  }
}
