"""Placeholder until the transcriptions routes land."""
from sanic import Blueprint

bp = Blueprint("transcriptions")
