"""``hypnos chat``: an interactive chat in the terminal against any Hypnos server.

Split by what each part touches: ``commands`` (parsing typed lines: slash commands and
multi-line input, pure), ``session`` (the conversation and the request body, pure), ``api``
(the HTTP side: the chat stream, transcription, document conversion, the server's models),
``attach`` (``/file``: what a file becomes in the conversation), ``view`` (rich rendering:
the growing answer, the thinking line, the footer) and ``loop`` (reads, dispatches, shows).
"""
