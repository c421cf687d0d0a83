"""``hypnos launch``: run an agent CLI (Claude Code, Codex, opencode) against a Hypnos server
with a throwaway environment and config that point it there.

The pieces: ``server`` finds (or starts) the server and reads what the launch needs from it;
``choice`` picks the model (pure); ``plan`` is what a client gets (environment, files, command
line); one module per client builds its plan (pure); ``run`` writes, prints or runs a plan.
"""
