"""The real server driven by the official ``openai`` client: completions, chat, streaming, ``n > 1``,
seeds, usage; greedy answers equal the model's own greedy ``generate`` on the same ids in-process."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import torch
from serve_helpers import API_KEY, Server

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where did the owl sit?"}]


def reference(pretrained: Any, ids: list[int], max_new_tokens: int, stop_ids: list[int]) -> str:
    """The greedy text of ``LanguageModel.generate`` after ``ids``, up to (without) the first stop id."""
    max_new_tokens = min(max_new_tokens, pretrained.context - len(ids))
    out = pretrained.model.generate(torch.tensor([ids]), max_new_tokens, temperature=0.0, stop_at_eos=False)
    new = out[0, len(ids) :].tolist()
    end = next((i for i, t in enumerate(new) if t in stop_ids), len(new))
    return pretrained.decode(new[:end])


def completion(pretrained: Any, prompt: str, max_new_tokens: int) -> str:
    return reference(pretrained, pretrained.encode_prompt(prompt), max_new_tokens, pretrained.eos_ids)


def reply(pretrained: Any, messages: list[dict[str, str]], max_new_tokens: int) -> str:
    return reference(pretrained, pretrained.encode_chat(messages), max_new_tokens, pretrained.stop_ids)


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    return openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0, timeout=60)


def test_models_lists_the_served_model(client: Any) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny-chat"]


def test_greedy_completion_equals_the_models_generate(client: Any, pretrained: Any) -> None:
    out = client.completions.create(model="tiny-chat", prompt="The old owl", max_tokens=20, temperature=0)
    assert out.object == "text_completion" and out.model == "tiny-chat" and len(out.choices) == 1
    assert out.choices[0].text == completion(pretrained, "The old owl", 20)
    assert out.choices[0].finish_reason in ("stop", "length")
    prompt_tokens = len(pretrained.encode_prompt("The old owl"))
    assert out.usage.prompt_tokens == prompt_tokens
    assert out.usage.total_tokens == prompt_tokens + out.usage.completion_tokens
    assert 1 <= out.usage.completion_tokens <= 20


def test_default_max_tokens_is_16_and_a_list_of_prompts_gives_choices_in_order(client: Any, pretrained: Any) -> None:
    out = client.completions.create(model="tiny-chat", prompt=["The big dog", "It was"], temperature=0, n=2)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    assert out.choices[0].text == out.choices[1].text == completion(pretrained, "The big dog", 16)
    assert out.choices[2].text == out.choices[3].text == completion(pretrained, "It was", 16)
    assert out.usage.completion_tokens <= 4 * 16


def test_greedy_chat_equals_the_models_reply(client: Any, pretrained: Any) -> None:
    out = client.chat.completions.create(model="tiny-chat", messages=MESSAGES, temperature=0)
    assert out.object == "chat.completion"
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == reply(pretrained, MESSAGES, pretrained.context)
    assert out.usage.prompt_tokens == len(pretrained.encode_chat(MESSAGES))


def test_streamed_completion_equals_the_whole_answer(client: Any) -> None:
    args = dict(model="tiny-chat", prompt="The quiet fox sat", max_tokens=30, temperature=0)
    whole = client.completions.create(**args)
    chunks = list(client.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert reasons == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_streamed_chat_with_n_choices(client: Any, pretrained: Any) -> None:
    stream = client.chat.completions.create(
        model="tiny-chat", messages=MESSAGES, temperature=0, n=3, max_tokens=12, stream=True
    )
    texts: dict[int, str] = {}
    finished: dict[int, str] = {}
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    assert set(finished) == {0, 1, 2}
    assert texts[0] == texts[1] == texts[2] == reply(pretrained, MESSAGES, 12)


def test_seeded_sampling_is_reproducible(client: Any) -> None:
    args = dict(model="tiny-chat", prompt="The old owl", max_tokens=24, temperature=1.0, top_p=0.95, n=2)
    first = client.completions.create(**args, seed=123)
    again = client.completions.create(**args, seed=123)
    other = client.completions.create(**args, seed=124)
    assert [c.text for c in first.choices] == [c.text for c in again.choices]
    assert first.choices[0].text != first.choices[1].text
    assert [c.text for c in other.choices] != [c.text for c in first.choices]


def test_stop_strings_cut_the_text(client: Any) -> None:
    args = dict(model="tiny-chat", prompt="The old owl", max_tokens=30, temperature=0)
    full = client.completions.create(**args).choices[0].text
    stop = full[4:6]
    out = client.completions.create(**args, stop=[stop, "never-there"])
    assert out.choices[0].text == full[: full.find(stop)] and out.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(**args, stop=stop, stream=True))
    assert streamed == out.choices[0].text
