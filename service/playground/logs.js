// The request log (spec section 15): GET /v1/logs with its filters, one record's details
// from GET /v1/logs/{id}, the capture level and clearing. A server without the log says so.
import { el, getJson, ms, postJson, request, showError, showInfo } from "./api.js";

const $ = (id) => document.getElementById(id);
const MISSING = "This server has no request log yet (GET /v1/logs answered 404).";

export function setup() {
  $("logs-form").addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  $("logs-level").addEventListener("change", setLevel);
  $("logs-clear").addEventListener("click", clear);
}

export async function show() {
  await load();
}

function query() {
  const q = new URLSearchParams();
  for (const f of ["model", "route", "status", "key", "limit"]) {
    const v = $("logs-" + f).value.trim();
    if (v) q.set(f, v);
  }
  return q.toString();
}

function fail(err) {
  if (err.routeMissing) showInfo($("logs-state"), MISSING);
  else showError($("logs-state"), err);
}

async function load() {
  try {
    const body = await getJson("/v1/logs?" + query());
    $("logs-level").value = body.level;
    showInfo($("logs-state"), `${body.records.length} shown · ${body.stored} stored of ${body.capacity}`);
    $("logs-table").querySelector("tbody").replaceChildren(...body.records.map(row));
  } catch (err) {
    fail(err);
  }
}

function row(r) {
  const tr = el("tr", { class: r.status >= 400 ? "failed" : "", "data-id": r.id },
    el("td", {}, new Date(r.started_at).toLocaleTimeString()),
    el("td", {}, `${r.method || ""} ${r.route}`),
    el("td", {}, r.model || "–"),
    el("td", { title: r.error || "" }, r.status),
    el("td", {}, ms(r.duration_ms)),
    el("td", {}, `${r.tokens_in ?? "–"} / ${r.tokens_out ?? "–"}`),
    el("td", {}, r.tokens_per_s ? r.tokens_per_s.toFixed(1) : "–"),
    el("td", {}, r.tier_switch_ms ? ms(r.tier_switch_ms) : "–"),
    el("td", {}, r.key || "–"));
  tr.addEventListener("click", () => detail(r.id));
  return tr;
}

async function detail(id) {
  try {
    $("logs-detail").textContent = JSON.stringify(await getJson(`/v1/logs/${encodeURIComponent(id)}`), null, 2);
  } catch (err) {
    fail(err);
  }
}

async function setLevel() {
  try {
    await postJson("/v1/logs/level", { level: $("logs-level").value });
    showInfo($("logs-state"), `capturing at ${$("logs-level").value}`);
  } catch (err) {
    fail(err);
  }
}

async function clear() {
  try {
    await request("/v1/logs", { method: "DELETE" });
    $("logs-detail").textContent = "";
    await load();
  } catch (err) {
    fail(err);
  }
}
