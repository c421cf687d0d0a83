"""Each engine class is its Protocol, structurally (the engines do not inherit them).

At run time this only builds each engine (cheap: no library is imported before ``load``) and
checks the members exist; the real check is mypy's on the annotated assignments below
(``mypy tests/unit/test_protocol_conformance.py``): an engine whose signature drifts from its
Protocol fails there."""
from hypnos.engines.docling_convert import DoclingConverter
from hypnos.engines.gliner_ner import GlinerExtractor
from hypnos.engines.kokoro import KokoroSpeaker
from hypnos.engines.llama.embed import LlamaEmbedder
from hypnos.engines.llama.engine import LlamaChatEngine
from hypnos.engines.llama.rerank import LlamaReranker
from hypnos.engines.llama.split import SplitChatEngine
from hypnos.engines.onnx_embed import OnnxEmbedder
from hypnos.engines.protocols import (ChatEngine, Converter, Embedder, Engine, Extractor,
                                      ImageGenerator, KeepsWeights, KVChatEngine,
                                      OffloadsLayers, Reranker, ReportsDevice, Speaker,
                                      SplitsLayers, Transcriber)
from hypnos.engines.sd_diffusion import DiffusionGenerator
from hypnos.engines.whisper import WhisperTranscriber


def test_each_engine_is_its_protocol() -> None:
    chat: ChatEngine = LlamaChatEngine()
    kv: KVChatEngine = LlamaChatEngine()
    offload: OffloadsLayers = LlamaChatEngine()
    keeps: KeepsWeights = LlamaChatEngine()
    split_chat: ChatEngine = SplitChatEngine()        # a chat model across RPC workers
    split: SplitsLayers = SplitChatEngine()
    split_offload: OffloadsLayers = SplitChatEngine()
    embedders: list[Embedder] = [LlamaEmbedder(), OnnxEmbedder()]
    rerankers: list[Reranker] = [LlamaReranker(), LlamaChatEngine()]
    speaker: Speaker = KokoroSpeaker()
    transcriber: Transcriber = WhisperTranscriber()
    converter: Converter = DoclingConverter()
    extractor: Extractor = GlinerExtractor()
    generator: ImageGenerator = DiffusionGenerator()
    reporting: list[ReportsDevice] = [OnnxEmbedder(), KokoroSpeaker(), WhisperTranscriber(),
                                      DoclingConverter(), GlinerExtractor(), LlamaChatEngine()]
    engines: list[Engine] = [chat, kv, split_chat, *embedders, *rerankers, speaker,
                             transcriber, converter, extractor, generator]
    for engine in engines:
        assert callable(engine.load) and callable(engine.unload)
    assert chat.format is None and chat.n_ctx_per_slot == 0          # before load
    assert split_chat.format is None and split_chat.n_ctx_per_slot == 0
    assert split.lost == "" and split.split_layers == {} and split.child_rss() == 0
    assert isinstance(split, SplitsLayers) and not isinstance(chat, SplitsLayers)
    assert split_offload.offloaded_layers == 0
    assert kv.max_sessions == 0 and kv.park() is None and kv.sessions() == {}
    assert offload.offloaded_layers == 0 and offload.device == "cpu"
    assert not keeps.holds_weights and keeps.release_context() is False   # nothing loaded
    assert speaker.sample_rate > 0
    assert all(e.device in (None, "cpu") for e in reporting)
