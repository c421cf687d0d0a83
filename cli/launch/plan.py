"""What one client gets: its environment, its files, its command line. Pure data.

Paths in ``env`` values and ``files`` keys are relative to the launch folder, written
``{dir}``; ``hypnos launch`` fills in a fresh throwaway folder (removed when the client exits),
``--print`` a named one.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

DIR = "{dir}"
# The server's key as plans write it; filled in with HYPNOS_API_KEY's value, or a dummy when
# the server wants none (clients that insist on a key still start).
KEY_VAR = "HYPNOS_API_KEY"
KEY_REF = "$" + KEY_VAR
DUMMY_KEY = "hypnos"


@dataclass(frozen=True)
class Target:
    """The server and model a plan points at, and the figures it is sized with."""
    url: str                      # base URL, no trailing slash
    model: str
    models: tuple                 # every tool-calling chat model (choice.ServedModel)
    context: int                  # the chosen model's per-request context
    output_tokens: int            # the answer a client may get (its ask, clamped)
    idle_timeout_ms: int          # how long a stream may stay silent (a long first prefill)
    thinking: bool | None = None  # reasons before answering (None: unknown)


@dataclass
class Plan:
    client: str
    argv: list[str]             # program first, the user's args follow; [] prints only
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()                         # removed from the inherited environment
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text
    notes: list[str] = field(default_factory=list)      # shown by --print and --help

    def resolved_env(self, folder: str, key: str | None) -> dict[str, str]:
        """The environment with the folder and the key (or the dummy) filled in."""
        return {k: v.replace(DIR, folder).replace(KEY_REF, key or DUMMY_KEY)
                for k, v in self.env.items()}


def shell_script(plan: Plan, folder: str, has_key: bool) -> str:
    """The plan as a POSIX shell script that sets it up and starts the client. With
    ``has_key`` the key is printed as a reference to $HYPNOS_API_KEY, never in clear."""
    lines = [f"# hypnos launch {plan.client}: " + (plan.notes[0] if plan.notes else ""),
             *[f"# {n}" for n in plan.notes[1:]]]
    if plan.files:
        lines.append(f"mkdir -p {shlex.quote(folder)}")
    for rel, text in plan.files.items():
        path = f"{folder}/{rel}"
        parent = path.rsplit("/", 1)[0]
        if parent != folder:
            lines.append(f"mkdir -p {shlex.quote(parent)}")
        lines += [f"cat > {shlex.quote(path)} <<'HYPNOS_EOF'", text.rstrip("\n"), "HYPNOS_EOF"]
    lines += [f"unset {name}" for name in plan.unset]
    for name, value in plan.env.items():
        value = value.replace(DIR, folder)
        if has_key and value == KEY_REF:
            lines.append(f'export {name}="{KEY_REF}"')
        else:
            lines.append(f"export {name}={shlex.quote(value.replace(KEY_REF, DUMMY_KEY))}")
    if plan.argv:
        lines.append(shlex.join(a.replace(DIR, folder) for a in plan.argv))
    return "\n".join(lines) + "\n"
