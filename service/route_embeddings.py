"""Placeholder until the embeddings routes land."""
from sanic import Blueprint

bp = Blueprint("embeddings")
