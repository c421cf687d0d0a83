"""What a model can serve, known before anything loads.

Two facts decide it: the model's configured modalities (``st.cfg.all_modalities``) and what
its engine kind implements in this version of Hypnos (``engines.registry.capabilities``, read
from the registry table without importing the engine's library). A request a model cannot
serve is refused here, before the lease, with one status: 400 ``invalid_request_error``
naming the field that chose the model. No load, no eviction, no queueing is paid for it.
"""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.engines import registry
from hypnos.service import errors
from hypnos.service.scheduling.scheduler import Scheduler
from hypnos.service.scheduling.pool import ModelState


@dataclass(frozen=True)
class Family:
    """One kind of request, as the capability check sees it."""
    serves: str                     # the modality named in "does not serve ..."
    modalities: tuple[str, ...]     # the model must list one of these
    capability: str                 # what its engine must implement (engines.registry)
    engine: str                     # "has no <engine> in this version of Hypnos"


CHAT = Family("text generation", ("text_generation", "vision"), registry.CHAT, "chat engine")
EMBEDDINGS = Family("embeddings", ("embeddings",), registry.EMBED, "embedding engine")
TRANSCRIPTION = Family("speech_to_text", ("speech_to_text",), registry.TRANSCRIBE,
                       "transcription engine")
SPEECH = Family("text_to_speech", ("text_to_speech",), registry.SPEAK, "speech engine")
DOCUMENTS = Family("document_conversion", ("document_conversion",), registry.CONVERT,
                   "document converter")
ENTITIES = Family("entity_extraction", ("entity_extraction",), registry.EXTRACT,
                  "entity extractor")
IMAGES = Family("image_generation", ("image_generation",), registry.IMAGES, "image generator")
PICTURES = Family("vision", ("vision",), registry.CHAT, "chat engine to describe pictures with")


def require(sched: Scheduler, model_id: str, family: Family, *,
            param: str = "model") -> ModelState:
    """The model's state when it can serve ``family``; raises 404 for an unknown or disabled
    model and 400 (naming ``param``) for one that cannot. An engine kind this build lacks
    altogether is left to the load, which answers 503 naming the extra to install."""
    with errors.refusals_as_http():
        st = sched.get(model_id)
    if not any(m in st.cfg.all_modalities for m in family.modalities):
        what = (f"describe_pictures names '{model_id}', which does not"
                if param == "describe_pictures" else f"The model '{model_id}' does not")
        raise errors.InvalidRequest(f"{what} serve {family.serves} (its modality is "
                                    f"{st.cfg.modality})", param=param)
    kind = st.cfg.engine
    if registry.is_available(kind, st.cfg.modality) and \
            family.capability not in registry.capabilities(kind, st.cfg.modality):
        raise errors.InvalidRequest(f"The model '{model_id}' (engine {kind}) has no "
                                    f"{family.engine} in this version of Hypnos; give it "
                                    f"modality = \"{family.modalities[0]}\" or another model",
                                    param=param)
    return st
