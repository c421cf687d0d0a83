"""The tools that read or make media: transcribe_audio, synthesize_speech,
convert_document. Each makes the same leased engine call as its HTTP route (one lease, the
request's caller, its record), and reads a file by path only under server.mcp_file_roots."""
from __future__ import annotations

import base64
import io
import time
import wave

import mcp_types as types

from hypnos.engines.records import DocumentRequest, SpeechRequest, TranscribeRequest
from hypnos.service.inference.capabilities import DOCUMENTS, SPEECH, TRANSCRIPTION
from hypnos.service.inference.leased import leased
from hypnos.service.inference.transcription import transcribe
from hypnos.service.mcp.refusal import ToolRefused
from hypnos.service.mcp.context import ToolContext
from hypnos.service.mcp.tools import ToolSpec, file_bytes, json_result, number_arg, text_arg
from hypnos.service.media.markdown_join import join_pages
from hypnos.service.wire.documents import check_document, parse_ocr, parse_pages
from hypnos.service.wire.transcription import parse_language

PATH = {"type": "string", "description": (
    "Instead of the bytes: the file's absolute path on the server's machine, readable only "
    "under the folders the operator lists in server.mcp_file_roots (none by default)")}


# ------------------------------------------------------------------ transcribe_audio

async def _transcribe(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    audio, name = file_bytes(ctx, args, "audio_base64", ctx.limits.max_audio_bytes,
                             "limits.max_audio_bytes")
    req = TranscribeRequest(audio=audio, language=parse_language(text_arg(args, "language")),
                            prompt=text_arg(args, "prompt"),
                            filename=text_arg(args, "filename", name))
    done = await transcribe(ctx.caller.sched, model, req, deadline_ms=ctx.caller.deadline_ms,
                            audio_param="audio_base64", checked=True)
    ctx.caller.record.transcription(done.result)
    r = done.result
    return json_result({"text": r.text, "language": r.language, "model": model,
                        "duration_secs": round(r.duration_secs, 3),
                        "segments": [{"start": s.start, "end": s.end, "text": s.text}
                                     for s in r.segments]}, text=r.text)


TRANSCRIBE = ToolSpec(
    name="transcribe_audio", title="Transcribe audio", family=TRANSCRIPTION,
    summary=("Transcribe speech in an audio file (WAV, MP3, FLAC, Ogg, M4A, ... any container "
             "FFmpeg reads) to text, locally. Send the file as base64 in audio_base64, or its "
             "path on the server's machine."),
    properties={"audio_base64": {"type": "string", "description": "The audio file's bytes "
                                 "as base64 (a data: URI works too)"},
                "path": PATH,
                "filename": {"type": "string", "description": "The file's name (its "
                             "extension helps decoding)"},
                "language": {"type": "string", "description": "ISO 639-1 code such as en; "
                             "default: detected"},
                "prompt": {"type": "string", "description": "Text the speech continues, "
                           "or words to spell a certain way"}},
    required=(), one_of=(("audio_base64", "path"),), run=_transcribe)


# ------------------------------------------------------------------ synthesize_speech

def wav_bytes(pcm: bytes, rate: int) -> bytes:
    """16-bit mono PCM as a WAV file."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return buf.getvalue()


async def _speak(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    text = text_arg(args, "text") or ""
    if not text.strip():
        raise ToolRefused("'text' is empty; send the text to speak")
    if len(text) > ctx.limits.max_prompt_chars:
        raise ToolRefused(f"'text' holds {len(text)} characters, above max_prompt_chars "
                          f"({ctx.limits.max_prompt_chars})")
    speed = number_arg(args, "speed", 0.25, 4.0, 1.0)
    req = SpeechRequest(text=text, voice=text_arg(args, "voice", "alloy") or "alloy",
                        speed=float(speed or 1.0),
                        language=text_arg(args, "language", "en") or "en")
    chunks: list[bytes] = []
    started = time.monotonic()
    async with leased(ctx.caller, model, SPEECH, param="text", checked=True) as call:
        secs = await call.run(call.speaker.synthesize, req, chunks.append)
        rate = call.speaker.sample_rate
    ctx.caller.record.audio_secs = secs
    wav = wav_bytes(b"".join(chunks), rate)
    ms = (time.monotonic() - started) * 1000
    return types.CallToolResult(content=[
        types.AudioContent(data=base64.b64encode(wav).decode("ascii"), mime_type="audio/wav"),
        types.TextContent(text=f"{secs:.2f} s of speech from {model} (WAV, {rate} Hz, "
                               f"made in {ms:.0f} ms)")],
        structured_content={"model": model, "audio_secs": round(secs, 3),
                            "sample_rate": rate, "mime_type": "audio/wav"})


SPEAK = ToolSpec(
    name="synthesize_speech", title="Synthesize speech", family=SPEECH,
    summary="Speak a text aloud, locally: returns the speech as WAV audio content.",
    properties={"text": {"type": "string", "minLength": 1, "description": "What to say"},
                "voice": {"type": "string", "description": "A voice of the model (OpenAI "
                          "names such as alloy map to one); default alloy"},
                "speed": {"type": "number", "minimum": 0.25, "maximum": 4.0},
                "language": {"type": "string", "description": "default en"}},
    required=("text",), run=_speak)


# ------------------------------------------------------------------ convert_document

async def _convert(ctx: ToolContext, args: dict, model: str) -> types.CallToolResult:
    max_bytes = ctx.limits.max_document_bytes
    data, name = file_bytes(ctx, args, "file_base64", max_bytes, "limits.max_document_bytes")
    check_document(data, max_bytes, "file_base64")
    ocr = args.get("ocr")
    req = DocumentRequest(data=data, filename=text_arg(args, "filename", name) or "",
                          pages=parse_pages(text_arg(args, "pages")),
                          ocr=parse_ocr(ocr if isinstance(ocr, bool) else text_arg(args, "ocr")))
    async with leased(ctx.caller, model, DOCUMENTS, param="file_base64", checked=True) as call:
        doc = await call.run(lambda r, _cancel: call.converter.open(r), req)
        pages = await call.run(call.converter.convert_pages, doc, lambda _p: None,
                               what="The conversion")
    markdown = join_pages([p.markdown for p in pages])
    ocr_pages = [p.page for p in pages if p.ocr]
    return json_result({"model": model, "format": doc.format, "page_count": doc.page_count,
                        "pages": [p.page for p in pages], "ocr_pages": ocr_pages,
                        "ocr_engine": doc.ocr_engine, "warning": doc.warning,
                        "markdown": markdown}, text=markdown)


CONVERT = ToolSpec(
    name="convert_document", title="Convert a document to Markdown", family=DOCUMENTS,
    summary=("Convert a document (PDF, DOCX, PPTX, XLSX, HTML, images, ...) to Markdown, "
             "locally, reading scanned pages with OCR as the server is configured. Send the "
             "file as base64 in file_base64, or its path on the server's machine."),
    properties={"file_base64": {"type": "string", "description": "The document's bytes as "
                                "base64 (a data: URI works too)"},
                "path": PATH,
                "filename": {"type": "string", "description": "The file's name: its "
                             "extension tells the format where the bytes cannot"},
                "pages": {"type": "string", "description": "A page or range such as 3 or "
                          "2-5 (1-based); default all"},
                "ocr": {"type": ["string", "boolean"], "description": "auto (default: OCR "
                        "the pages without a text layer), true (every page) or false"}},
    required=(), one_of=(("file_base64", "path"),), run=_convert)
