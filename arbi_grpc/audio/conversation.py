"""The history of one conversation: the system prompt and the user and assistant turns, as chat messages."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_HISTORY_MESSAGES = 40  # older turns are dropped first, so a long session stays within the context


@dataclass
class Conversation:
    instructions: str = ""
    turns: list[dict[str, str]] = field(default_factory=list)

    def add(self, role: str, text: str) -> None:
        if text:
            self.turns.append({"role": role, "content": text})
            del self.turns[:-MAX_HISTORY_MESSAGES]

    def messages(self) -> list[dict[str, str]]:
        """The chat messages of the next reply."""
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        return system + list(self.turns)
