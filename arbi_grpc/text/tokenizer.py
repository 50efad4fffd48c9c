"""The model's tokenizer: text <-> token ids over a HF `tokenizer.json`, plus its special-token facts.

It reads the HF-style files of a model directory (`tokenizer.json`, `tokenizer_config.json`, optionally
`generation_config.json` and `chat_template.jinja`) and owns the EOS/BOS ids the engine stops and starts on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer

from arbi_grpc.errors import ModelLoadError

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


@dataclass(frozen=True)
class SpecialTokenFacts:
    """What the model's config files say about its special tokens and chat template."""

    bos_token: str | None
    eos_token: str | None
    bos_token_id: int | None
    eos_token_ids: frozenset[int]
    special_token_ids: frozenset[int]
    add_bos_token: bool
    chat_template: str | None


class TextTokenizer:
    """Encodes and decodes text for one model; immutable after construction."""

    def __init__(self, backend: Tokenizer, facts: SpecialTokenFacts) -> None:
        self._backend = backend
        self._facts = facts

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> TextTokenizer:
        """Load `tokenizer.json` + `tokenizer_config.json` (+ optional generation config and template file)."""
        directory = Path(model_dir)
        backend = _load_backend(directory / TOKENIZER_FILE)
        tokenizer_config = _read_json(directory / TOKENIZER_CONFIG_FILE)
        if tokenizer_config is None:
            raise ModelLoadError(f"{TOKENIZER_CONFIG_FILE}: missing from the model directory")
        generation_config = _read_json(directory / GENERATION_CONFIG_FILE)
        _register_config_added_tokens(backend, tokenizer_config)
        facts = _special_token_facts(backend, tokenizer_config, generation_config, directory)
        return cls(backend, facts)

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer knows, added tokens included."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every id that ends generation: tokenizer_config's eos_token plus generation_config's eos_token_id."""
        return self._facts.eos_token_ids

    @property
    def bos_token_id(self) -> int | None:
        return self._facts.bos_token_id

    @property
    def bos_token(self) -> str | None:
        return self._facts.bos_token

    @property
    def eos_token(self) -> str | None:
        return self._facts.eos_token

    @property
    def chat_template(self) -> str | None:
        """The model's jinja2 chat template source, or None when the model has none."""
        return self._facts.chat_template

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; special-token strings inside `text` become their special ids.

        With `add_special_tokens`, BOS is prepended when the model asks for it (`add_bos_token`) and the
        text does not already start with it. Chat prompts are rendered with their special tokens already
        in the text, so they are encoded with `add_special_tokens=False`.
        """
        ids = self._backend.encode(text, add_special_tokens=False).ids
        bos_id = self._facts.bos_token_id
        wants_bos = add_special_tokens and self._facts.add_bos_token and bos_id is not None
        if wants_bos and (not ids or ids[0] != bos_id):
            ids = [bos_id, *ids]
        return ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of `token_ids`; ids outside the vocabulary are dropped, broken UTF-8 becomes U+FFFD.

        `skip_special_tokens` drops exactly the ids `is_special` reports (EOS ids from generation_config
        included), so every consumer agrees on what is special.
        """
        kept = [token_id for token_id in token_ids if not (skip_special_tokens and self.is_special(token_id))]
        return self._backend.decode(kept, skip_special_tokens=False)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary entry (raw, e.g. byte-level `Ġhello`) of `token_id`, or None when out of range."""
        return self._backend.id_to_token(token_id)

    def vocabulary(self) -> dict[str, int]:
        """Every raw vocabulary entry (byte-level `Ġhello`, added tokens included) and its id."""
        return self._backend.get_vocab(with_added_tokens=True)

    def decoder_types(self) -> tuple[str, ...]:
        """The `type` of tokenizer.json's decoder and of each step of a Sequence decoder (e.g. ByteLevel,
        ByteFallback, Metaspace): how raw vocabulary entries become text."""
        decoder = json.loads(self._backend.to_str()).get("decoder") or {}
        steps = decoder.get("decoders", []) if decoder.get("type") == "Sequence" else [decoder]
        return tuple(step.get("type", "") for step in steps if isinstance(step, dict))

    def is_special(self, token_id: int) -> bool:
        """True for control tokens (BOS, EOS, `<|im_end|>` ...) that decoding skips."""
        return token_id in self._facts.special_token_ids


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when the file does not exist."""
    if not path.is_file():
        return None
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{path.name}: unreadable or not valid JSON ({error})") from error
    if not isinstance(content, dict):
        raise ModelLoadError(f"{path.name}: expected a JSON object, got {type(content).__name__}")
    return content


def _load_backend(path: Path) -> Tokenizer:
    if not path.is_file():
        raise ModelLoadError(f"{path.name}: missing from the model directory")
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as error:  # the Rust side raises plain Exception for any parse failure
        raise ModelLoadError(f"{path.name}: not a valid tokenizers file ({error})") from error
    backend.no_truncation()
    backend.no_padding()
    return backend


def _token_content(entry: object, source: str) -> str | None:
    """A token given as a string or as a serialized AddedToken dict ({"content": ...})."""
    if entry is None:
        return None
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    raise ModelLoadError(f"{source}: expected a token string or {{'content': ...}}, got {entry!r}")


def _register_config_added_tokens(backend: Tokenizer, tokenizer_config: dict[str, Any]) -> None:
    """Add tokens listed in `added_tokens_decoder` that tokenizer.json lacks (old exports do this)."""
    decoder = tokenizer_config.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise ModelLoadError(f"{TOKENIZER_CONFIG_FILE}: added_tokens_decoder must be an object")
    for id_text, entry in sorted(decoder.items(), key=lambda item: _config_token_id(item[0])):
        content = _token_content(entry, f"{TOKENIZER_CONFIG_FILE}: added_tokens_decoder[{id_text}]")
        if content is None or backend.token_to_id(content) is not None:
            continue
        next_id = backend.get_vocab_size(with_added_tokens=True)
        if next_id != _config_token_id(id_text):
            raise ModelLoadError(
                f"{TOKENIZER_CONFIG_FILE}: added token {content!r} has id {id_text} but tokenizer.json "
                f"would give it id {next_id}"
            )
        is_special = isinstance(entry, dict) and bool(entry.get("special", False))
        token = AddedToken(content, special=is_special, normalized=False)
        if token.special:
            backend.add_special_tokens([token])
        else:
            backend.add_tokens([token])


def _config_token_id(id_text: str) -> int:
    try:
        return int(id_text)
    except ValueError as error:
        raise ModelLoadError(
            f"{TOKENIZER_CONFIG_FILE}: added_tokens_decoder key {id_text!r} is not a token id"
        ) from error


def _token_id(backend: Tokenizer, token: str | None, field: str) -> int | None:
    if token is None:
        return None
    token_id = backend.token_to_id(token)
    if token_id is None:
        raise ModelLoadError(f"{TOKENIZER_CONFIG_FILE}: {field} {token!r} is not in the vocabulary")
    return token_id


def _id_list(value: object, field: str) -> list[int]:
    """generation_config ids: an int, a list of ints, or absent."""
    if value is None:
        return []
    values: list[object] = value if isinstance(value, list) else [value]
    ids = [item for item in values if isinstance(item, int) and not isinstance(item, bool)]
    if len(ids) != len(values):
        raise ModelLoadError(f"{GENERATION_CONFIG_FILE}: {field} must be an int or a list of ints")
    return ids


def _chat_template_source(tokenizer_config: dict[str, Any], directory: Path) -> str | None:
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # named templates [{"name": ..., "template": ...}]: "default" serves chat
        named = {item.get("name"): item.get("template") for item in template if isinstance(item, dict)}
        template = named.get("default")
    if template is None and (directory / CHAT_TEMPLATE_FILE).is_file():
        try:
            template = (directory / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ModelLoadError(f"{CHAT_TEMPLATE_FILE}: unreadable ({error})") from error
    if template is not None and not isinstance(template, str):
        raise ModelLoadError(f"{TOKENIZER_CONFIG_FILE}: chat_template must be a string")
    return template


def _special_token_facts(
    backend: Tokenizer,
    tokenizer_config: dict[str, Any],
    generation_config: dict[str, Any] | None,
    directory: Path,
) -> SpecialTokenFacts:
    generation = generation_config or {}
    bos_token = _token_content(tokenizer_config.get("bos_token"), f"{TOKENIZER_CONFIG_FILE}: bos_token")
    eos_token = _token_content(tokenizer_config.get("eos_token"), f"{TOKENIZER_CONFIG_FILE}: eos_token")
    bos_token_id = _token_id(backend, bos_token, "bos_token")
    if bos_token_id is None:
        bos_ids = _id_list(generation.get("bos_token_id"), "bos_token_id")
        bos_token_id = bos_ids[0] if bos_ids else None
    eos_ids = set(_id_list(generation.get("eos_token_id"), "eos_token_id"))
    eos_token_id = _token_id(backend, eos_token, "eos_token")
    if eos_token_id is not None:
        eos_ids.add(eos_token_id)
    special_ids = {token_id for token_id, token in backend.get_added_tokens_decoder().items() if token.special}
    special_ids |= eos_ids | ({bos_token_id} if bos_token_id is not None else set())
    add_bos = tokenizer_config.get("add_bos_token")
    if add_bos is None:  # unspecified: follow tokenizer.json's post-processor
        probe = backend.encode("a", add_special_tokens=True).ids
        add_bos = bos_token_id is not None and bool(probe) and probe[0] == bos_token_id
    return SpecialTokenFacts(
        bos_token=bos_token,
        eos_token=eos_token,
        bos_token_id=bos_token_id,
        eos_token_ids=frozenset(eos_ids),
        special_token_ids=frozenset(special_ids),
        add_bos_token=bool(add_bos),
        chat_template=_chat_template_source(tokenizer_config, directory),
    )
