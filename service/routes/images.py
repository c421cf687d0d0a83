"""POST /v1/images/generations and POST /v1/images/edits (spec 11).

Sizes are clamped to 256..2048 per side and rounded down to a multiple of 16; ``steps`` is
clamped to 1..100; ``n`` above max_images_per_request is a 400. Every image answers as
base64 PNG (``response_format: url`` is accepted and answers base64 too) with the seed it was
made with (``seed`` + its index).
"""
from __future__ import annotations

import base64
import math
import re
import secrets
import time
from typing import Annotated, Literal, TypeVar

from pydantic import Field
from sanic import Blueprint, HTTPResponse, Request
from sanic.request import RequestParameters
from sanic.response import json as json_response

from hypnos.engines.records import ImageRequest
from hypnos.service import errors
from hypnos.service.config.schema import ImageConfig
from hypnos.service.http.caller import caller_of
from hypnos.service.inference.capabilities import IMAGES, require
from hypnos.service.inference.leased import leased
from hypnos.service.wire.body import read_body
from hypnos.service.wire.model import Says, Wire
from hypnos.service.http.openapi import INFERENCE_ERRORS, endpoint, needs_ready
from hypnos.service.state import state_of

bp = Blueprint("images")
MIN_SIDE, MAX_SIDE, STEP = 256, 2048, 16
FORMATS = ("b64_json", "url")
SIZE_PATTERN = r"^(auto|\s*(\d+)\s*[xX]\s*(\d+)\s*)$"
IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpeg"))


def clamp_side(value: int) -> int:
    return min(MAX_SIDE, max(MIN_SIDE, value)) // STEP * STEP


def parse_size(value: object) -> tuple[int, int]:
    """"WIDTHxHEIGHT" -> the clamped (width, height); 1000x700 -> (992, 688)."""
    if value is None or value == "auto":
        return 1024, 1024
    m = re.fullmatch(SIZE_PATTERN, value) if isinstance(value, str) else None
    if m is None:
        raise errors.InvalidRequest(f"'size' must be WIDTHxHEIGHT such as 1024x1024, got "
                                    f"{value!r}", param="size")
    return clamp_side(int(m.group(2))), clamp_side(int(m.group(3)))


D = TypeVar("D", bound=int | None)      # a field's default: an int, or None for none


def _int(fields: dict, name: str, default: D) -> int | D:
    value = fields.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidRequest(f"'{name}' must be an integer, got {value!r}", param=name)
    return value


def _number(fields: dict, name: str, default: float) -> float:
    value = fields.get(name)
    if value is None or value == "":
        return default
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0 \
            or not math.isfinite(number):          # a form's "nan" or "inf" too
        raise errors.InvalidRequest(f"'{name}' must be a finite number >= 0, got {value!r}",
                                    param=name)
    return float(number)


def _text(fields: dict, name: str, required: bool = False) -> str:
    value = fields.get(name)
    if value is None or value == "":
        if required:
            raise errors.InvalidRequest(f"'{name}' is required", param=name)
        return ""
    if not isinstance(value, str):
        raise errors.InvalidRequest(f"'{name}' must be a string", param=name)
    return value


def parse_image_request(fields: dict, image: ImageConfig, max_images: int) -> ImageRequest:
    """The fields shared by generations and edits, with the model's [models.image] defaults.
    Raises a 400 naming the field."""
    prompt = _text(fields, "prompt", required=True)
    n = _int(fields, "n", 1)
    if not 1 <= n <= max_images:
        raise errors.InvalidRequest(f"'n' must be from 1 to max_images_per_request "
                                    f"({max_images}), got {n}", param="n")
    fmt = fields.get("response_format") or "b64_json"
    if fmt not in FORMATS:
        raise errors.InvalidRequest(f"'response_format' must be b64_json or url, got {fmt!r}",
                                    param="response_format")
    width, height = parse_size(fields.get("size"))
    steps = min(100, max(1, _int(fields, "steps", image.steps)))
    seed = _int(fields, "seed", None)
    if seed is not None and not 0 <= seed < 2**32:
        raise errors.InvalidRequest(f"'seed' must be from 0 to 2^32-1, got {seed}",
                                    param="seed")
    return ImageRequest(prompt=prompt, negative_prompt=_text(fields, "negative_prompt"),
                        n=n, width=width, height=height, steps=steps,
                        cfg_scale=_number(fields, "cfg_scale", image.cfg_scale),
                        seed=secrets.randbelow(2**31) if seed is None else seed,
                        sampler=image.sampler)


def _image_config(request: Request, model_id: str) -> ImageConfig:
    st = require(state_of(request).scheduler, model_id, IMAGES)
    return st.cfg.image or ImageConfig()


def _model(fields: dict) -> str:
    return _text(fields, "model", required=True)


async def _generate(request: Request, model_id: str, req: ImageRequest) -> HTTPResponse:
    async with leased(caller_of(request), model_id, IMAGES, param="prompt", checked=True) as call:
        images = await call.run(call.generator.generate, req)
        tele = call.telemetry({"queue_ms": call.queue_ms, "images": len(images),
                               "width": req.width, "height": req.height, "steps": req.steps})
        wait = call.wait_headers()
    body = {"created": int(time.time()),
            "data": [{"b64_json": base64.b64encode(i.png).decode("ascii"), "seed": i.seed}
                     for i in images],
            "hypnos_telemetry": tele}
    return json_response(body, headers=wait)


class ImageBody(Wire):
    """The JSON body of /v1/images/generations. ``n`` is also capped by the server's
    max_images_per_request; ``steps`` is clamped to 1..100 and ``size`` to 256..2048."""
    model: Annotated[str, Field(min_length=1)]
    prompt: Annotated[str, Field(min_length=1)]
    negative_prompt: str | None = None
    n: Annotated[int, Field(ge=1)] | None = None
    size: Annotated[str, Field(pattern=SIZE_PATTERN),
                    Says("'size' must be WIDTHxHEIGHT such as 1024x1024, got {got}")] | None = None
    steps: int | None = None
    seed: Annotated[int, Field(ge=0, le=2**32 - 1),
                    Says("'seed' must be from 0 to 2^32-1, got {got}")] | None = None
    cfg_scale: Annotated[float, Field(ge=0)] | None = None
    response_format: Literal["b64_json", "url"] | None = None


IMAGE_FORM = {"type": "object", "required": ["model", "prompt", "image"], "properties": {
    # No "mask": the models edit from the prompt and the reference images; a mask is a 400.
    "image": {"type": "string", "contentMediaType": "application/octet-stream", "minLength": 1},
    "model": {"type": "string", "minLength": 1}, "prompt": {"type": "string", "minLength": 1},
    "n": {"type": "string"},
    "size": {"type": "string"}, "response_format": {"enum": list(FORMATS)}}}


@bp.post("/v1/images/generations")
@needs_ready
@endpoint("Image generation (OpenAI-compatible)", body=ImageBody, errors=INFERENCE_ERRORS)
async def generations(request: Request) -> HTTPResponse:
    fields = read_body(request, ImageBody).model_dump(exclude_none=True)
    model_id = _model(fields)
    image = _image_config(request, model_id)
    req = parse_image_request(fields, image, state_of(request).config.limits.max_images_per_request)
    return await _generate(request, model_id, req)


def _references(request: Request, max_bytes: int) -> list[bytes]:
    files = request.files or RequestParameters()
    uploads = list(files.getlist("image") or []) + list(files.getlist("image[]") or [])
    if not uploads:
        raise errors.InvalidRequest("The form has no 'image' part: send one or more "
                                    "reference images", param="image")
    out = []
    for upload in uploads:
        data = upload.body
        if len(data) > max_bytes:
            raise errors.InvalidRequest(f"The image {upload.name!r} is {len(data)} bytes; "
                                        f"max_image_bytes is {max_bytes}", param="image")
        is_webp = data[:4] == b"RIFF" and data[8:12] == b"WEBP"
        if not is_webp and not any(data.startswith(m) for m, _ in IMAGE_MAGIC):
            raise errors.InvalidRequest(f"The image {upload.name!r} is not PNG, JPEG or WebP",
                                        param="image")
        out.append(data)
    return out


@bp.post("/v1/images/edits")
@needs_ready
@endpoint("Image edit (OpenAI-compatible multipart)", form=IMAGE_FORM, errors=INFERENCE_ERRORS)
async def edits(request: Request) -> HTTPResponse:
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise errors.InvalidRequest("/v1/images/edits takes multipart/form-data with the "
                                    "reference images as 'image' parts")
    form = request.form or RequestParameters()
    fields = {k: form.get(k) for k in form}
    if "mask" in fields or (request.files and "mask" in request.files):
        raise errors.InvalidRequest("'mask' is not supported: the models edit from the prompt "
                                    "and the reference images, not by inpainting",
                                    param="mask")
    model_id = _model(fields)
    image = _image_config(request, model_id)
    if not image.edit:
        raise errors.InvalidRequest(f"The model '{model_id}' does not edit images "
                                    "([models.image] edit = false)", param="model")
    limits = state_of(request).config.limits
    req = parse_image_request(fields, image, limits.max_images_per_request)
    req.references = _references(request, limits.max_image_bytes)
    return await _generate(request, model_id, req)
