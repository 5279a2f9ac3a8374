"""The built-in translation data: English->Spanish numbers written as words, and short sentences."""

from __future__ import annotations

import random
from typing import Literal

__all__ = ["english_number", "number_pairs", "spanish_number"]

Pair = tuple[str, str]
_EN_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_ES_UNITS = (
    "cero", "uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve", "diez", "once", "doce",
    "trece", "catorce", "quince", "dieciséis", "diecisiete", "dieciocho", "diecinueve", "veinte", "veintiuno",
    "veintidós", "veintitrés", "veinticuatro", "veinticinco", "veintiséis", "veintisiete", "veintiocho", "veintinueve",
)  # fmt: skip
_ES_TENS = ("", "", "", "treinta", "cuarenta", "cincuenta", "sesenta", "setenta", "ochenta", "noventa")
_ES_HUNDREDS = (
    "", "ciento", "doscientos", "trescientos", "cuatrocientos", "quinientos", "seiscientos", "setecientos",
    "ochocientos", "novecientos",
)  # fmt: skip
Form = Literal["number", "masculine", "feminine"]


def english_number(n: int) -> str:
    """American English words for ``0 <= n < 1,000,000``: ``321`` -> ``"three hundred twenty-one"``."""
    _check_number(n)
    if n < 20:
        return _EN_ONES[n]
    if n < 100:
        return _EN_TENS[n // 10] + (f"-{_EN_ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        return f"{_EN_ONES[n // 100]} hundred" + (f" {english_number(n % 100)}" if n % 100 else "")
    return f"{english_number(n // 1000)} thousand" + (f" {english_number(n % 1000)}" if n % 1000 else "")


def spanish_number(n: int, form: Form = "number") -> str:
    """Spanish words for ``0 <= n < 1,000,000``.

    ``form``: ``"number"`` counts (``21`` -> ``"veintiuno"``); ``"masculine"`` comes before a
    masculine noun, where *uno* is shortened (``"veintiún libros"``, ``"treinta y un libros"``,
    ``"un libro"``); ``"feminine"`` before a feminine noun (``"veintiuna casas"``,
    ``"doscientas casas"``; only below 1000, where usage is settled). In thousands *uno* is always
    shortened (``"veintiún mil"``) and ``1000`` is ``"mil"``; ``100`` is ``"cien"`` (also in
    ``"cien mil"``), ``101..199`` start with ``"ciento"``.
    """
    _check_number(n)
    if form == "feminine" and n >= 1000:
        raise ValueError(f"spanish_number: the feminine form is only generated below 1000, got {n}")
    if n >= 1000:
        thousands, rest = divmod(n, 1000)
        head = "mil" if thousands == 1 else f"{spanish_number(thousands, 'masculine')} mil"
        return head + (f" {spanish_number(rest, form)}" if rest else "")
    if n >= 100:
        hundreds, rest = divmod(n, 100)
        if n == 100:
            return "cien"
        head = _ES_HUNDREDS[hundreds]
        if form == "feminine" and hundreds > 1:
            head = head.removesuffix("os") + "as"
        return head + (f" {spanish_number(rest, form)}" if rest else "")
    if n >= 30:
        tens, unit = divmod(n, 10)
        return _ES_TENS[tens] + (f" y {spanish_number(unit, form)}" if unit else "")
    word = _ES_UNITS[n]
    if n in (1, 21) and form != "number":
        word = word.removesuffix("uno") + ("una" if form == "feminine" else "ún" if n == 21 else "un")
    return word


def _check_number(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 1_000_000:
        raise ValueError(f"numbers are generated for integers in [0, 1000000), got {n!r}")


# (English singular, English plural, Spanish singular, Spanish plural, gender)
_NOUNS: tuple[tuple[str, str, str, str, Form], ...] = (
    ("book", "books", "libro", "libros", "masculine"),
    ("dog", "dogs", "perro", "perros", "masculine"),
    ("car", "cars", "coche", "coches", "masculine"),
    ("tree", "trees", "árbol", "árboles", "masculine"),
    ("pencil", "pencils", "lápiz", "lápices", "masculine"),
    ("egg", "eggs", "huevo", "huevos", "masculine"),
    ("glass", "glasses", "vaso", "vasos", "masculine"),
    ("student", "students", "alumno", "alumnos", "masculine"),
    ("house", "houses", "casa", "casas", "feminine"),
    ("table", "tables", "mesa", "mesas", "feminine"),
    ("window", "windows", "ventana", "ventanas", "feminine"),
    ("apple", "apples", "manzana", "manzanas", "feminine"),
    ("bottle", "bottles", "botella", "botellas", "feminine"),
    ("chair", "chairs", "silla", "sillas", "feminine"),
    ("flower", "flowers", "flor", "flores", "feminine"),
    ("key", "keys", "llave", "llaves", "feminine"),
)
# (English, Spanish); {be} is "is"/"are" by number.
_TEMPLATES = (
    ("I have {n} {noun}.", "Tengo {n} {noun}."),
    ("You have {n} {noun}.", "Tienes {n} {noun}."),
    ("We need {n} {noun}.", "Necesitamos {n} {noun}."),
    ("She bought {n} {noun}.", "Ella compró {n} {noun}."),
    ("They sold {n} {noun} yesterday.", "Ellos vendieron {n} {noun} ayer."),
    ("My brother has {n} {noun}.", "Mi hermano tiene {n} {noun}."),
    ("I see {n} {noun}.", "Veo {n} {noun}."),
    ("There {be} {n} {noun} here.", "Hay {n} {noun} aquí."),
)


def _number_sentence(n: int, noun: tuple[str, str, str, str, Form], template: tuple[str, str]) -> Pair:
    en_sg, en_pl, es_sg, es_pl, gender = noun
    one = n == 1
    en = template[0].format(n=english_number(n), noun=en_sg if one else en_pl, be="is" if one else "are")
    es = template[1].format(n=spanish_number(n, gender), noun=es_sg if one else es_pl)
    return en, es


def _random_number(rng: random.Random, max_digits: int) -> int:
    digits = rng.randint(1, max_digits)  # as many 1-digit as 6-digit numbers
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def number_pairs(num_pairs: int, seed: int = 42, *, sentence_fraction: float = 0.5) -> list[Pair]:
    """``num_pairs`` distinct English->Spanish pairs: numbers written as words, and short sentences.

    **What it is.** A number below a million, written out (``"three hundred twenty-one thousand
    four"`` -> ``"trescientos veintiún mil cuatro"``), or, with probability ``sentence_fraction``,
    one of 8 sentence templates with a number below 1000 and one of 16 nouns (``"She bought
    twenty-one apples."`` -> ``"Ella compró veintiuna manzanas."``). The Spanish follows the
    grammar of numerals: *dieciséis*, *veintidós*, *treinta y uno*, *cien* / *ciento*,
    *quinientos*, *setecientos*, *novecientos*, *mil* / *dos mil*; agreement with the noun
    (*un libro*, *una casa*, *veintiún libros*, *doscientas casas*) and singular/plural (*Hay un
    árbol aquí.*). Numbers have 1 to 6 digits with equal probability. Deterministic in ``seed``.

    **What it can show.** That the translator learns a real, compositional mapping between two
    languages (word order differs: *twenty-one* -> *veintiuno*, *forty-five* -> *cuarenta y
    cinco*; gender agreement needs the noun that comes after the number), and exact match can
    reach 100 %.

    **What it cannot show.** It is not natural language: the vocabulary is about a hundred words
    and the syntax is fixed, so its BLEU says nothing about translating real text (use Tatoeba's
    spa.txt for that).
    """
    if isinstance(num_pairs, bool) or not isinstance(num_pairs, int) or num_pairs < 1:
        raise ValueError(f"number_pairs: num_pairs must be an int >= 1, got {num_pairs!r}")
    if not 0.0 <= sentence_fraction <= 1.0:
        raise ValueError(f"number_pairs: sentence_fraction must be in [0, 1], got {sentence_fraction!r}")
    sentences = 999 * len(_NOUNS) * len(_TEMPLATES)
    limit = sentences // 2 if sentence_fraction == 1.0 else 500_000
    if num_pairs > limit:
        raise ValueError(f"number_pairs: at most {limit} distinct pairs with sentence_fraction={sentence_fraction}")
    rng = random.Random(seed)
    seen: dict[str, str] = {}
    while len(seen) < num_pairs:
        if rng.random() < sentence_fraction:
            en, es = _number_sentence(_random_number(rng, 3) or 1, rng.choice(_NOUNS), rng.choice(_TEMPLATES))
        else:
            n = _random_number(rng, 6)
            en, es = english_number(n), spanish_number(n)
        seen.setdefault(en, es)
    return list(seen.items())
