"""The built-in language-modelling corpus: short documents from a small probabilistic grammar of English."""

from __future__ import annotations

import random

__all__ = ["generate_grammar_corpus"]

_NOUNS = (
    ("cat", "cats"), ("dog", "dogs"), ("bird", "birds"), ("fox", "foxes"), ("owl", "owls"), ("mouse", "mice"),
    ("child", "children"), ("teacher", "teachers"), ("farmer", "farmers"), ("robot", "robots"),
    ("king", "kings"), ("girl", "girls"), ("boy", "boys"), ("elephant", "elephants"),
)  # fmt: skip
_NAMES = ("Anna", "Ben", "Clara", "David", "Elena", "Felix", "Omar", "Ivy")
_ADJECTIVES = ("small", "big", "old", "young", "happy", "clever", "lazy", "brown", "quiet", "angry", "hungry")
# (3rd person singular, plural/base, past)
_TRANSITIVE = (
    ("sees", "see", "saw"), ("likes", "like", "liked"), ("chases", "chase", "chased"),
    ("follows", "follow", "followed"), ("finds", "find", "found"), ("watches", "watch", "watched"),
    ("helps", "help", "helped"), ("feeds", "feed", "fed"),
)  # fmt: skip
_INTRANSITIVE = (
    ("sleeps", "sleep", "slept"), ("runs", "run", "ran"), ("sings", "sing", "sang"), ("waits", "wait", "waited"),
    ("smiles", "smile", "smiled"), ("laughs", "laugh", "laughed"), ("hides", "hide", "hid"),
)  # fmt: skip
_ADVERBS = ("quietly", "quickly", "happily", "again", "all day", "at night")
_PLACES = ("the garden", "the river", "the old house", "the forest", "the market", "the school", "the barn")
_PREPOSITIONS = ("in", "near", "behind")
_SG_DETERMINERS = ("the", "the", "a", "this", "that", "every")
_PL_DETERMINERS = ("the", "the", "some", "these", "those", "many", "two", "three")


class _Grammar:
    """A small probabilistic grammar of English sentences with subject-verb agreement."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def noun_phrase(self, plural: bool, depth: int = 0) -> str:
        r = self.rng
        if not plural and r.random() < 0.2:
            return r.choice(_NAMES)
        det = r.choice(_PL_DETERMINERS if plural else _SG_DETERMINERS)
        words = [r.choice(_ADJECTIVES)] if r.random() < 0.4 else []
        words.append(r.choice(_NOUNS)[1 if plural else 0])
        if det == "a" and words[0][0] in "aeiou":
            det = "an"
        phrase = f"{det} {' '.join(words)}"
        if depth == 0 and r.random() < 0.15:  # a relative clause, agreeing with the noun
            phrase += " that " + self.verb_phrase(plural, "present", depth + 1)
        return phrase

    def subject(self) -> tuple[str, bool]:
        r = self.rng
        if r.random() < 0.1:
            return f"{r.choice(_NAMES)} and {r.choice(_NAMES)}", True
        plural = r.random() < 0.45
        return self.noun_phrase(plural), plural

    def verb_phrase(self, plural: bool, tense: str, depth: int = 0) -> str:
        r = self.rng
        index = {"present": 1 if plural else 0, "past": 2, "base": 1}[tense]
        if r.random() < 0.6:
            verb = r.choice(_TRANSITIVE)[index]
            phrase = f"{verb} {self.noun_phrase(r.random() < 0.4, depth + 1)}"
        else:
            phrase = r.choice(_INTRANSITIVE)[index]
            if r.random() < 0.4:
                phrase += " " + r.choice(_ADVERBS)
        if r.random() < 0.3:
            phrase += f" {r.choice(_PREPOSITIONS)} {r.choice(_PLACES)}"
        return phrase

    def clause(self, tense: str) -> str:
        subject, plural = self.subject()
        return f"{subject} {self.verb_phrase(plural, tense)}"

    def sentence(self, tense: str) -> str:
        r = self.rng
        x = r.random()
        if x < 0.55:
            s = self.clause(tense) + "."
        elif x < 0.75:
            s = f"{self.clause(tense)}, {r.choice(('and', 'but'))} {self.clause(tense)}."
        elif x < 0.87:
            s = f"when {self.clause(tense)}, {self.clause(tense)}."
        else:
            subject, plural = self.subject()
            aux = "did" if tense == "past" else ("do" if plural else "does")
            s = f"{aux} {subject} {self.verb_phrase(plural, 'base')}?"
        return s[0].upper() + s[1:]


def generate_grammar_corpus(n: int, seed: int = 42) -> list[str]:
    """``n`` short documents from a small probabilistic grammar of English (no download).

    **What it is.** Each document has 1-4 sentences, all in the present or all in the past tense:
    statements ("The hungry fox chased two birds near the river."), two clauses joined by "and" or
    "but", "When ..., ..." sentences and yes/no questions ("Does the old owl sleep?"), built
    from 14 nouns, 8 names, 11 adjectives, 15 verbs, places and adverbs, with subject-verb agreement
    (singular/plural, irregular plurals and past tenses, "a"/"an", "does"/"do"/"did" + base
    form) and relative clauses ("the dogs that chase a cat"). Fully determined by ``seed``.

    **What it can show.** That a language model learns structure beyond character frequencies:
    spelling, the vocabulary, agreement across a few words, capitalisation after a full stop; its
    bits per character fall far below the unigram entropy. **What it cannot show.** Anything about
    real text: the vocabulary is tiny and the grammar has no meaning, topic or long-range structure.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"generate_grammar_corpus: n must be an int >= 1, got {n!r}")
    rng = random.Random(seed)
    grammar = _Grammar(rng)
    docs = []
    for _ in range(n):
        tense = "past" if rng.random() < 0.5 else "present"
        docs.append(" ".join(grammar.sentence(tense) for _ in range(rng.randint(1, 4))))
    return docs
