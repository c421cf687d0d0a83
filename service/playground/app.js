// The page: tabs, the model list every picker reads, and each view's setup.
import { getJson, showError } from "./api.js";
import * as tiers from "./tiers.js";
import * as chat from "./chat.js";
import * as voice from "./voice.js";
import * as documents from "./documents.js";
import * as entities from "./entities.js";
import * as embeddings from "./embeddings.js";
import * as logs from "./logs.js";

const VIEWS = { tiers, chat, voice, documents, entities, embeddings, logs };

// Models from /v1/memory/status (it lists every modality a model serves, /v1/models only the
// primary one). Refreshed when a view is shown, since the pool can change while we run.
const catalog = { models: [] };

// Fill a <select> with the enabled models serving `modality`, keeping the current choice.
function fillPicker(select, modality) {
  const current = select.value;
  const fits = catalog.models.filter((m) => m.enabled && m.modalities.includes(modality));
  // Models whose primary modality it is come first: they are what the operator meant.
  fits.sort((a, b) => (b.modality === modality) - (a.modality === modality));
  select.replaceChildren(...fits.map((m) => new Option(m.id, m.id)));
  if (!fits.length) select.append(new Option(`(no ${modality} model)`, ""));
  if (fits.some((m) => m.id === current)) select.value = current;
}

function modelInfo(id) {
  return catalog.models.find((m) => m.id === id);
}

async function refreshCatalog() {
  const status = await getJson("/v1/memory/status");
  catalog.models = status.models;
  catalog.status = status;
  const cap = status.capabilities;
  document.getElementById("server-info").textContent =
    [cap.device_name || cap.accelerator, cap.topology, cap.simulated && "simulated"]
      .filter((x, i, all) => x && all.indexOf(x) === i).join(" · ");
  return status;
}

async function show(name) {
  for (const b of document.querySelectorAll("#tabs button")) {
    b.classList.toggle("active", b.dataset.view === name);
  }
  for (const v of document.querySelectorAll(".view")) {
    v.classList.toggle("active", v.id === "view-" + name);
  }
  for (const [other, view] of Object.entries(VIEWS)) {
    if (other !== name && view.hide) view.hide();
  }
  location.hash = name;
  try {
    await refreshCatalog();
  } catch (err) {
    showError(document.getElementById("server-info"), err);
  }
  await VIEWS[name].show();
}

function boot() {
  for (const view of Object.values(VIEWS)) view.setup({ fillPicker, modelInfo, catalog, refreshCatalog });
  for (const b of document.querySelectorAll("#tabs button")) {
    b.addEventListener("click", () => show(b.dataset.view));
  }
  const first = location.hash.slice(1);
  show(first in VIEWS ? first : "tiers");
}

boot();
