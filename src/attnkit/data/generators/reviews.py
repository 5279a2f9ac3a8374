"""The built-in text-classification corpus: short template movie "reviews" with a sentiment label."""

from __future__ import annotations

import random

__all__ = ["SYNTHETIC_LABEL_NAMES", "generate_synthetic_corpus"]

SYNTHETIC_LABEL_NAMES: list[str] = ["negative", "positive"]

_SUBJECTS = (
    "the acting", "the plot", "the soundtrack", "the dialogue", "the ending", "the cinematography",
    "the pacing", "the cast", "the script", "the direction", "this movie", "the film", "the story",
    "the characters", "the special effects", "the lead actress", "the villain", "the editing",
)  # fmt: skip
_POSITIVE = (
    "great", "excellent", "wonderful", "brilliant", "superb", "enjoyable", "moving", "delightful",
    "fantastic", "charming", "clever", "gripping", "beautiful", "funny", "memorable", "solid",
)  # fmt: skip
_NEGATIVE = (
    "awful", "terrible", "boring", "dull", "bad", "horrible", "weak", "clumsy", "tedious",
    "disappointing", "predictable", "dreadful", "silly", "forgettable", "messy", "bland",
)  # fmt: skip
_INTENSIFIERS = ("", "", "", "really ", "very ", "quite ", "truly ", "so ")
_NEGATORS = ("not ", "not ", "never ", "hardly ", "far from ")
_NEGATED_INTENSIFIERS = ("", "", "", "really ", "very ", "that ")
_OPINIONS = (
    "{subj} was {neg}{adv}{adj}.",
    "I thought {subj} was {neg}{adv}{adj}.",
    "To be honest, {subj} is {neg}{adv}{adj}.",
    "In my opinion {subj} was {neg}{adv}{adj}.",
    "Overall {subj} felt {neg}{adv}{adj}.",
)
_FILLERS = (
    "I watched it on a {day} {time}.",
    "The film runs about {num} minutes.",
    "It is based on a {source}.",
    "My {person} recommended it to me.",
    "It came out in {year}.",
    "I saw it {where}.",
    "The story takes place in {place}.",
    "I had not seen the trailer before.",
    "I did not know anything about the director.",
    "There is a long scene in a {room}.",
    "The main character works as a {job}.",
)
_SLOTS = {
    "day": ("monday", "friday", "saturday", "sunday", "rainy", "quiet"),
    "time": ("morning", "afternoon", "evening", "night"),
    "num": ("ninety", "one hundred", "two hundred", "eighty"),
    "source": ("novel", "true story", "comic book", "play", "short story"),
    "person": ("friend", "sister", "brother", "neighbour", "colleague", "father"),
    "year": ("1985", "1999", "2004", "2012", "2019"),
    "where": ("at home", "in the cinema", "on a plane", "at a festival", "on television"),
    "place": ("paris", "a small town", "new york", "the desert", "a space station", "london"),
    "room": ("kitchen", "train station", "hospital", "library", "bar"),
    "job": ("teacher", "detective", "nurse", "pilot", "lawyer", "chef"),
}


def _opinion(rng: random.Random, polarity: int, negate: bool) -> str:
    """One sentence whose meaning has ``polarity`` (1 positive, 0 negative)."""
    adjective_positive = polarity == 1 if not negate else polarity == 0
    adj = rng.choice(_POSITIVE if adjective_positive else _NEGATIVE)
    template = rng.choice(_OPINIONS)
    return template.format(
        subj=rng.choice(_SUBJECTS),
        neg=rng.choice(_NEGATORS) if negate else "",
        adv=rng.choice(_NEGATED_INTENSIFIERS if negate else _INTENSIFIERS),
        adj=adj,
    )


def _filler(rng: random.Random) -> str:
    template = rng.choice(_FILLERS)
    slots = {name: rng.choice(values) for name, values in _SLOTS.items() if "{" + name + "}" in template}
    return template.format(**slots)


def _capitalize(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


def generate_synthetic_corpus(
    n: int, seed: int = 42, *, negation_prob: float = 0.3
) -> tuple[list[str], list[int], list[str]]:
    """A built-in, download-free, labelled corpus of short template "reviews".

    **What it is.** Each document mixes 1-3 neutral filler sentences ("I saw it on a plane.")
    with 1 or 3 opinion sentences ("I thought the plot was really clever."). An opinion's
    polarity is carried by its adjective (16 positive, 16 negative) and is flipped by a negator
    right before it ("was *not* clever", "never", "hardly", "far from") with probability
    ``negation_prob``. The label (0 ``"negative"``, 1 ``"positive"``) is the majority polarity of
    the opinions, so it is a deterministic function of the text. Some fillers contain a "not"
    that negates nothing. Sentences are capitalised and sometimes separated by ``<br /><br />``
    as in IMDB. Classes are balanced (``n // 2`` negative) and the output is fully determined
    by ``seed``.

    **What it can show.** That the pipeline works end to end (tokenizer, padding, masks, the
    model learns, accuracy well above chance within a few epochs on CPU), and a little about
    context: a bag-of-words model cannot tell which adjective a "not" belongs to, so it stays
    clearly below 100 % while a model using word order can get close to it (with the defaults
    and 6000 documents, logistic regression reaches about 0.68 accuracy on word counts and
    about 0.79 on unigrams + bigrams).

    **What it cannot show.** It is *not* a sentiment benchmark: the vocabulary is tiny (a few
    hundred words), the grammar is templated, there is no sarcasm, no long-range structure and
    no label noise. Accuracy on it says nothing about accuracy on real reviews; use aclImdb.

    Returns:
        ``(texts, labels, label_names)`` with ``label_names == ["negative", "positive"]``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"generate_synthetic_corpus: n must be an int >= 1, got {n!r}")
    if not 0.0 <= negation_prob <= 1.0:
        raise ValueError(f"generate_synthetic_corpus: negation_prob must be in [0, 1], got {negation_prob!r}")
    rng = random.Random(seed)
    labels = [0] * (n // 2) + [1] * (n - n // 2)
    rng.shuffle(labels)
    texts: list[str] = []
    for label in labels:
        if rng.random() < 0.4:
            polarities = [label]
        elif rng.random() < 0.5:
            polarities = [label] * 3
        else:
            polarities = [label, label, 1 - label]
        sentences = [_opinion(rng, p, rng.random() < negation_prob) for p in polarities]
        sentences += [_filler(rng) for _ in range(rng.randint(1, 3))]
        rng.shuffle(sentences)
        parts = [_capitalize(sentences[0])]
        for s in sentences[1:]:
            parts.append(" <br /><br />" if rng.random() < 0.2 else " ")
            parts.append(_capitalize(s))
        texts.append("".join(parts))
    return texts, labels, list(SYNTHETIC_LABEL_NAMES)
