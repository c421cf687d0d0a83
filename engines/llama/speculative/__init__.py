"""Speculative decoding on llama.cpp: drafters and their bookkeeping (``mtp``: the target's
own MTP heads)."""
