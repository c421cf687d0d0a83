"""One transcription under one lease (the HTTP route and each live utterance)."""
from __future__ import annotations

from dataclasses import dataclass

from hypnos.engines.records import TranscribeRequest, TranscribeResult
from hypnos.service.inference.capabilities import TRANSCRIPTION
from hypnos.service.inference.leased import leased_by
from hypnos.service.scheduling.scheduler import Scheduler


@dataclass
class Transcription:
    result: TranscribeResult
    telemetry: dict
    headers: dict                     # x-hypnos-* telemetry headers + estimated wait
    wait_headers: dict


async def transcribe(sched: Scheduler, model_id: str, req: TranscribeRequest, *,
                     deadline_ms: float | None = None, audio_param: str = "file",
                     checked: bool = False) -> Transcription:
    """One lease, one engine call. Raises HypnosError (400 naming ``audio_param`` for
    undecodable audio)."""
    async with leased_by(sched, model_id, TRANSCRIPTION, param=audio_param,
                         deadline_ms=deadline_ms, checked=checked) as call:
        result = await call.run(call.transcriber.transcribe, req)
        timings = {"audio_secs": round(result.duration_secs, 3)}
        if result.duration_secs > 0:
            timings["rtf"] = round(result.processing_ms / 1000 / result.duration_secs, 4)
        wait = call.wait_headers()
        return Transcription(result, call.telemetry(timings),
                             {**call.telemetry_headers(result.duration_secs), **wait}, wait)
