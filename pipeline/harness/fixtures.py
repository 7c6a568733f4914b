"""The harness's prompts: deterministic needle and benchmark corpora, sized by the server's counter.

Fixtures are generated deterministically (`needle_fixture`): filler words
from a fixed vocabulary chosen by a SHA-256 counter stream, a planted numeric
nonce at a fixed depth, and a question.  Their size is calibrated with the
server's own token counter (`size_fixture`) so the prompt has the lane's
advertised size; the fixture's SHA-256 is recorded, the text never is.  A
per-run salt line in front keeps any prefix cache from serving the prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pipeline.harness.client import GateFailure
from pipeline.util.hashing import sha256_bytes

FIXTURE_GENERATOR = "omp-ninfer-needle-v1"
NONCE_DEPTH = 0.37

# 256 short, common words: one byte of the counter stream picks one.
_WORDS = (
    "able", "about", "above", "across", "act", "add", "after", "again", "against", "age", "ago", "air",
    "all", "also", "always", "among", "and", "animal", "answer", "any", "appear", "area", "arm", "around",
    "art", "ask", "away", "back", "base", "be", "bear", "beauty", "bed", "been", "before", "began",
    "begin", "behind", "best", "better", "between", "big", "bird", "black", "blue", "board", "boat",
    "body", "book", "both", "bottom", "box", "boy", "bring", "brought", "build", "busy", "but", "buy",
    "call", "came", "can", "car", "care", "carry", "case", "cat", "cause", "center", "certain", "change",
    "check", "child", "city", "class", "clear", "close", "cold", "color", "come", "common", "complete",
    "contain", "correct", "could", "country", "course", "cover", "cross", "cry", "current", "cut", "dark",
    "day", "deep", "did", "differ", "direct", "do", "does", "dog", "done", "door", "down", "draw", "dream",
    "drive", "dry", "during", "each", "early", "earth", "ease", "east", "eat", "edge", "egg", "end",
    "enough", "even", "ever", "every", "example", "eye", "face", "fact", "fall", "family", "far", "farm",
    "fast", "father", "feel", "feet", "few", "field", "fig", "final", "find", "fine", "fire", "first",
    "fish", "five", "floor", "fly", "follow", "food", "foot", "for", "force", "form", "found", "four",
    "free", "friend", "from", "front", "full", "game", "garden", "gave", "get", "girl", "give", "glass",
    "go", "gold", "good", "got", "govern", "great", "green", "ground", "group", "grow", "had", "half",
    "hand", "happen", "hard", "has", "hat", "have", "he", "head", "hear", "heart", "heat", "heavy", "help",
    "her", "here", "high", "hill", "him", "his", "hold", "hole", "home", "hope", "horse", "hot", "hour",
    "house", "how", "huge", "hunt", "idea", "if", "inch", "include", "iron", "island", "it", "just",
    "keep", "kind", "king", "knew", "know", "lake", "land", "large", "last", "late", "laugh", "lay",
    "lead", "learn", "leave", "left", "leg", "length", "less", "let", "letter", "level", "lie", "life",
    "light", "like", "line", "list", "listen", "little", "live", "long", "look", "lost", "low", "machine",
    "made", "main", "make", "man",
)
assert len(_WORDS) == 256


def _word_stream(seed: str) -> Iterator[str]:
    counter = 0
    while True:
        block = sha256_bytes(f"{seed}:{counter}".encode()).encode("ascii")
        counter += 1
        for index in range(0, 64, 2):
            yield _WORDS[int(block[index:index + 2], 16)]


def filler_words(seed: str, count: int) -> list[str]:
    stream = _word_stream(seed)
    return [next(stream) for _ in range(count)]


def nonce_for(seed: str) -> str:
    """A ten-digit number (no leading zero) derived from the fixture seed."""
    value = int(sha256_bytes(f"nonce:{seed}".encode()), 16)
    return str(1_000_000_000 + value % 9_000_000_000)


NEEDLE_QUESTION = "Question: What is the archive verification number stated in the document above? Answer with the number only."
CONTINUE_INSTRUCTION = "Continue the text above with more words in the same style."


def _paragraphs(words: list[str]) -> str:
    lines = []
    for start in range(0, len(words), 16):
        chunk = words[start:start + 16]
        lines.append(" ".join(chunk) + ".")
    return "\n".join(lines)


@dataclass(frozen=True)
class Fixture:
    """A generated prompt: `text` is sent (salt line included), `fixture_sha256` covers it without the salt."""

    kind: str
    seed: str
    words: int
    body: str
    salt: str
    nonce: str | None = None

    @property
    def text(self) -> str:
        return f"Document {self.salt}.\n{self.body}"

    @property
    def fixture_sha256(self) -> str:
        return sha256_bytes(self.body.encode("utf-8"))

    def describe(self) -> dict[str, Any]:
        data: dict[str, Any] = {"generator": FIXTURE_GENERATOR, "kind": self.kind, "filler_words": self.words, "salted": True}
        if self.nonce is not None:
            data["nonce_depth"] = NONCE_DEPTH
        return data


def needle_fixture(seed: str, words: int, salt: str) -> Fixture:
    filler = filler_words(seed, words)
    nonce = nonce_for(seed)
    at = int(len(filler) * NONCE_DEPTH)
    before, after = _paragraphs(filler[:at]), _paragraphs(filler[at:])
    needle = f"The archive verification number is {nonce}."
    body = "\n".join(part for part in (before, needle, after) if part) + "\n\n" + NEEDLE_QUESTION
    return Fixture("needle", seed, words, body, salt, nonce)


def continuation_fixture(seed: str, words: int, salt: str) -> Fixture:
    body = _paragraphs(filler_words(seed, words)) + "\n\n" + CONTINUE_INSTRUCTION
    return Fixture("benchmark", seed, words, body, salt)


def size_fixture(
    make: Callable[[int], Fixture], target_tokens: int, count: Callable[[str], int | None]
) -> tuple[Fixture, int | None, int]:
    """The largest fixture whose token count (by the server's counter) is at most `target_tokens`.

    Returns (fixture, its token count or None when the server cannot count, probes used).
    """
    words = max(1, int(target_tokens / 1.35))
    fixture = make(words)
    tokens = count(fixture.text)
    probes = 1
    if tokens is None:
        return fixture, None, probes
    low: tuple[int, int] | None = None  # (words, tokens) known <= target
    high: int | None = None  # words known > target
    for _ in range(40):
        if tokens <= target_tokens:
            low = (words, tokens)
        else:
            high = words
        if tokens == target_tokens:
            break
        if low is not None and high is not None:
            if high - low[0] <= 1:
                break
            words = (low[0] + high) // 2
        else:
            per_word = max(tokens / words, 0.05)
            step = int(round((target_tokens - tokens) / per_word))
            if step == 0:
                step = 1 if tokens < target_tokens else -1
            words = max(1, words + step)
        fixture = make(words)
        tokens = count(fixture.text)
        probes += 1
    if low is None:
        raise GateFailure(f"even a {words}-word fixture has more than {target_tokens} tokens")
    if fixture.words != low[0]:
        fixture = make(low[0])
    return fixture, low[1], probes
