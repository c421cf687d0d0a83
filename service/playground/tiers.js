// The tier visualizer (spec section 14): three bars of booked against real bytes, each model
// a block sized by the bytes it holds in that tier (a split model shows in two), the models
// table with its move and enable/disable buttons, and the recent evictions as a timeline.
import { bytes, el, getJson, ms, postJson, showError, showInfo, TIER_NAMES } from "./api.js";

const TIERS = ["tier1_gpu_vram", "tier2_pinned_ram", "tier3_nvme_ssd"];
const SHORT = { tier1_gpu_vram: "T1", tier2_pinned_ram: "T2", tier3_nvme_ssd: "T3" };
// What each tier is on a host without a GPU (ARCHITECTURE: the wire names stay the same).
const CPU_MEANING = {
  tier1_gpu_vram: "here: engine loaded in process memory",
  tier2_pinned_ram: "here: weights locked in RAM",
  tier3_nvme_ssd: "",
};
const POLL_MS = 2000;
const TIMELINE_SPAN_MS = 10 * 60 * 1000;
let ctx;
let timer = null;
const busy = new Set();    // models with a move or enable/disable in flight

export function setup(context) {
  ctx = context;
  document.getElementById("tiers-live").addEventListener("change", schedule);
}

export async function show() {
  if (ctx.catalog.status) render(ctx.catalog.status);
  await refresh();
}

export function hide() {
  clearTimeout(timer);
  timer = null;
}

function active() {
  return document.getElementById("view-tiers").classList.contains("active");
}

function schedule() {
  clearTimeout(timer);
  timer = null;
  if (active() && document.getElementById("tiers-live").checked) {
    timer = setTimeout(refresh, POLL_MS);
  }
}

async function refresh() {
  try {
    const status = await getJson("/v1/memory/status");
    ctx.catalog.status = status;
    ctx.catalog.models = status.models;
    render(status);
    document.getElementById("tiers-updated").textContent =
      "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    showError(document.getElementById("tiers-message"), err);
  }
  schedule();
}

// The bytes a model holds in each tier, from its placement's layer split.
function holdings(m) {
  const p = m.placement || {};
  const out = {};
  if (m.current_tier === "tier3_nvme_ssd" || !p.primary_tier) {
    out.tier3_nvme_ssd = m.total_weight_bytes;
    return out;
  }
  const t1 = (p.vram_weight_bytes || 0) + (p.vram_kv_and_workspace_bytes || 0);
  if (t1) out.tier1_gpu_vram = t1;
  if (p.pinned_ram_bytes) out.tier2_pinned_ram = p.pinned_ram_bytes;
  if (!t1 && !p.pinned_ram_bytes) out[m.current_tier] = m.total_weight_bytes;
  if (p.ssd_layers) out.tier3_nvme_ssd = m.total_weight_bytes * p.ssd_layers /
    ((p.gpu_layers || 0) + (p.pinned_ram_layers || 0) + p.ssd_layers);
  return out;
}

function layersText(p) {
  if (!p || p.gpu_layers === undefined) return "–";
  return `${p.gpu_layers} / ${p.pinned_ram_layers} / ${p.ssd_layers}`;
}

// [budget, booked, real used or null, note] for one tier.
function tierTotals(s, tier, models) {
  const cap = s.capabilities;
  if (tier === "tier1_gpu_vram") {
    const real = s.tier1_vram_real_total_bytes - s.tier1_vram_real_free_bytes;
    return [cap.usable_vram_budget_bytes, s.tier1_vram_used_bytes, real,
      `device: ${bytes(real)} used of ${bytes(s.tier1_vram_real_total_bytes)}` +
      (s.tier1_vram_unaccounted_bytes ? ` · unaccounted ${bytes(s.tier1_vram_unaccounted_bytes)}` : "") +
      ` · effective free ${bytes(s.tier1_vram_effective_free_bytes)}`];
  }
  if (tier === "tier2_pinned_ram") {
    return [cap.pinned_ram_budget_bytes, s.tier2_pinned_ram_used_bytes, null,
      `process memory ${bytes(s.process_memory_bytes)}` +
      (s.process_memory_cap_bytes ? ` (cap ${bytes(s.process_memory_cap_bytes)})` : "")];
  }
  const onDisk = models.reduce((sum, m) => sum + (holdings(m).tier3_nvme_ssd || 0), 0);
  const all = models.reduce((sum, m) => sum + m.total_weight_bytes, 0);
  return [all, onDisk, null, "weights only on disk; the bar is every model's weights"];
}

function renderBars(s) {
  const out = document.getElementById("tiers-bars");
  const lanes = TIERS.map((tier) => {
    const [budget, booked, real, note] = tierTotals(s, tier, s.models);
    // Scaled to the budget: the host's real use (all of its memory on a CPU-only or a
    // simulated host) may run past it, and its marker then stops at the end.
    const scale = Math.max(budget, booked, 1);
    const pct = (v) => `${Math.min(100, (100 * v) / scale).toFixed(2)}%`;
    const here = s.models.filter((m) => holdings(m)[tier]);
    const blocks = here.map((m) => {
      const held = holdings(m)[tier];
      const split = Object.keys(holdings(m)).length > 1;
      const block = el("div", {
        class: `block${m.active_leases ? " leased" : ""}${split ? " split" : ""}${m.enabled ? "" : " disabled"}`,
        "data-model": m.id,
        title: `${m.id}: ${bytes(held)} in ${TIER_NAMES[tier]}` +
          (split ? ` (layers gpu/ram/ssd ${layersText(m.placement)})` : "") +
          ` · leases ${m.active_leases}`,
      }, el("span", {}, m.id), split ? el("small", {}, layersText(m.placement)) : null);
      block.style.width = pct(held);
      return block;
    });
    const bar = el("div", { class: "bar" }, el("div", { class: "booked" }), ...blocks);
    bar.firstChild.style.width = pct(booked);
    if (real !== null) {
      const marker = el("div", { class: "real", title: `real use ${bytes(real)}` });
      marker.style.left = `${Math.min(99.5, (100 * real) / scale).toFixed(2)}%`;
      bar.append(marker);
    }
    // Blocks of small models are slivers at the budget's scale: the chips name them.
    const chips = here.map((m) => el("span", { class: "chip", "data-model": m.id },
      `${m.id} ${bytes(holdings(m)[tier])}`,
      m.active_leases ? el("b", {}, ` · ${m.active_leases} leased`) : null));
    const cpu = s.capabilities.accelerator === "Cpu" && CPU_MEANING[tier];
    return el("div", { class: "lane", "data-tier": tier },
      el("div", { class: "lane-head" }, el("strong", {}, TIER_NAMES[tier]),
        cpu ? el("span", { class: "muted" }, `(${cpu})`) : null,
        el("span", {}, `${tier === "tier3_nvme_ssd" ? "on disk" : "booked"} ${bytes(booked)} of ${bytes(budget)}`),
        el("span", { class: "muted" }, note)),
      bar, el("div", { class: "chips" }, ...chips));
  });
  out.replaceChildren(...lanes);
}

function moveButtons(m) {
  return TIERS.map((tier) => el("button", {
    type: "button", "data-move": tier,
    disabled: !m.enabled || busy.has(m.id) || m.current_tier === tier,
    title: `move ${m.id} to ${TIER_NAMES[tier]}`,
    onclick: () => act(m.id, () => postJson("/v1/memory/tier", { model: m.id, target_tier: tier }),
      `${m.id} moved to ${TIER_NAMES[tier]}`),
  }, "→ " + SHORT[tier]));
}

function renderModels(s) {
  const rows = s.models.map((m) => {
    const queued = m.queued !== undefined ? m.queued
      : (m.slots !== undefined ? Math.max(0, m.active_leases - m.slots) : "–");
    const toggle = el("button", {
      type: "button", "data-toggle": m.enabled ? "disable" : "enable", disabled: busy.has(m.id),
      onclick: () => act(m.id,
        () => postJson(`/v1/models/${encodeURIComponent(m.id)}/${m.enabled ? "disable" : "enable"}`, {}),
        `${m.id} ${m.enabled ? "disabled" : "enabled"}`),
    }, m.enabled ? "disable" : "enable");
    const truth = m.memory_truth ? ` (last load booked ${bytes(m.memory_truth.booked_bytes)}, ` +
      `real growth ${bytes(m.memory_truth.rss_growth_bytes)})` : "";
    return el("tr", { "data-model": m.id, class: m.enabled ? "" : "disabled" },
      el("td", { title: m.problem || "" }, m.id, m.problem ? " ⚠" : ""),
      el("td", {}, m.modalities.join(", ")),
      el("td", { "data-col": "tier" }, SHORT[m.current_tier] || m.current_tier),
      el("td", {}, layersText(m.placement)),
      el("td", { title: truth }, bytes(m.total_weight_bytes)),
      el("td", {}, m.active_leases),
      el("td", {}, queued),
      el("td", {}, ms(m.estimated_wait_ms)),
      el("td", {}, (m.requests_per_minute || 0).toFixed(2)),
      el("td", { class: "buttons" }, ...moveButtons(m)),
      el("td", {}, toggle));
  });
  document.querySelector("#tiers-models tbody").replaceChildren(...rows);
}

function renderEvictions(s) {
  const events = s.recent_evictions || [];
  const now = Date.now();
  const line = document.getElementById("tiers-timeline");
  line.replaceChildren(el("span", { class: "muted edge" }, "−10 min"),
    el("span", { class: "muted edge now" }, "now"));
  for (const e of events) {
    const age = now - e.unix_ms;
    if (age > TIMELINE_SPAN_MS) continue;
    const dot = el("div", { class: "dot", title: `${e.model} → ${e.to_tier} for ${e.for_model} (${e.reason})` });
    dot.style.left = `${Math.min(99, 100 * (1 - Math.max(0, age) / TIMELINE_SPAN_MS)).toFixed(2)}%`;
    line.append(dot);
  }
  const list = events.slice(0, 20).map((e) => el("li", {},
    el("time", {}, new Date(e.unix_ms).toLocaleTimeString()), " ",
    el("strong", {}, e.model), ` → ${SHORT[e.to_tier] || e.to_tier} for ${e.for_model || "–"}`,
    el("span", { class: "muted" }, ` (${e.reason})`)));
  document.getElementById("tiers-evictions").replaceChildren(
    ...(list.length ? list : [el("li", { class: "muted" }, "no evictions yet")]));
}

function render(s) {
  renderBars(s);
  renderModels(s);
  renderEvictions(s);
}

// Run one placement action, then redraw from a fresh status. A route this server does not
// have yet (enable/disable) is reported, not thrown.
async function act(id, call, done) {
  const msg = document.getElementById("tiers-message");
  busy.add(id);
  showInfo(msg, `${id}: working…`);
  if (ctx.catalog.status) renderModels(ctx.catalog.status);
  try {
    await call();
    showInfo(msg, done);
  } catch (err) {
    if (err.routeMissing) showInfo(msg, `This server does not offer that action yet (${err.message}).`);
    else showError(msg, err);
  } finally {
    busy.delete(id);
  }
  await refresh();
}
