"""ChatTemplate: HF-compatible rendering in a sandbox, and the errors a request can trigger."""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import pytest

from arbi_grpc.errors import InvalidArgumentError, ModelLoadError
from arbi_grpc.text.chat_template import ChatTemplate
from arbi_grpc.text.tokenizer import TextTokenizer
from tests.unit.text.conftest import train_byte_level_bpe, write_model_dir

SMOLLM2_SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
)
WORDS = ["café", "Paris", "世界", "😀", "what", "is", "x{y}"]


def template_for(tmp_path: Path, source: str | None) -> ChatTemplate:
    config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
    if source is not None:
        config["chat_template"] = source
    return ChatTemplate(TextTokenizer.from_model_dir(write_model_dir(tmp_path, train_byte_level_bpe(), config)))


def random_words(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))


def test_smollm2_template_renders_chatml_with_default_system(smollm2_tokenizer: TextTokenizer) -> None:
    question = random_words(random.Random())
    prompt = ChatTemplate(smollm2_tokenizer).render([{"role": "user", "content": question}])
    assert prompt == SMOLLM2_SYSTEM + f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def test_smollm2_chat_prompt_ids_hold_special_tokens_once(smollm2_tokenizer: TextTokenizer) -> None:
    template = ChatTemplate(smollm2_tokenizer)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    ids = template.encode(messages)
    im_start, im_end = 1, 2
    assert ids[0] == im_start and ids.count(im_start) == 3 and ids.count(im_end) == 2
    assert smollm2_tokenizer.decode(ids, skip_special_tokens=False) == template.render(messages)
    assert ids[-4:] == smollm2_tokenizer.encode("<|im_start|>assistant\n")


def test_generation_prompt_can_be_left_out(byte_level_dir: Path) -> None:
    template = ChatTemplate(TextTokenizer.from_model_dir(byte_level_dir))
    content = random_words(random.Random())
    rendered = template.render([{"role": "assistant", "content": content}], add_generation_prompt=False)
    assert rendered == f"<|im_start|>assistant\n{content}<|im_end|>\n"


def test_helpers_match_hf(tmp_path: Path) -> None:
    source = (
        "{{ bos_token }}{{ messages | tojson }}|{{ {'b': 1, 'a': 'é'} | tojson(indent=2, sort_keys=True) }}"
        "|{{ strftime_now('%Y') }}{{ eos_token }}"
    )
    messages = [{"role": "user", "content": "<b>é & 😀</b>"}]
    rendered = template_for(tmp_path, source).render(messages)
    messages_json = json.dumps(messages, ensure_ascii=False)
    sorted_json = json.dumps({"a": "é", "b": 1}, indent=2, ensure_ascii=False)
    assert rendered == f"<|im_start|>{messages_json}|{sorted_json}|{datetime.now():%Y}<|im_end|>"


def test_template_raise_exception_becomes_invalid_argument(tmp_path: Path) -> None:
    source = (
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('first message must be system') }}{% endif %}"
    )
    with pytest.raises(InvalidArgumentError, match="first message must be system") as caught:
        template_for(tmp_path, source).render([{"role": "user", "content": "hi"}])
    assert caught.value.field == "messages"


def test_template_errors_become_invalid_argument(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="messages"):
        template_for(tmp_path, "{{ messages[5]['content'] }}").render([{"role": "user", "content": "hi"}])


def test_sandbox_refuses_mutation_and_private_attributes(tmp_path: Path) -> None:
    for source in ("{{ messages.append(1) }}", "{{ messages.__class__.__mro__ }}"):
        with pytest.raises(InvalidArgumentError, match="unsafe"):
            template_for(tmp_path, source).render([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(
    "messages, message",
    [
        ([{"role": "wizard", "content": "hi"}], "unknown role 'wizard'"),
        ([{"role": "user"}], "needs 'role' and 'content'"),
        ([{"role": "user", "content": 3}], "must be strings"),
        ([], "at least one message"),
    ],
)
def test_bad_messages_are_refused(byte_level_dir: Path, messages, message: str) -> None:
    template = ChatTemplate(TextTokenizer.from_model_dir(byte_level_dir))
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        template.render(messages)
    assert caught.value.field == "messages"


def test_model_without_template_asks_for_raw_prompt(tmp_path: Path) -> None:
    template = template_for(tmp_path, None)
    assert not template.available
    with pytest.raises(InvalidArgumentError, match="send a raw prompt"):
        template.encode([{"role": "user", "content": "hi"}])


def test_template_that_does_not_compile_is_a_model_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="chat template does not compile"):
        template_for(tmp_path, "{% for message in messages %}")
