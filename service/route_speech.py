"""Placeholder until the speech routes land."""
from sanic import Blueprint

bp = Blueprint("speech")
